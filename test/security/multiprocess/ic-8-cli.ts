// The operator CLI for IC-8, run as `npx platform jobs run <job>` runs it: node on the compiled CLI
// (dist/src/cli.js, which bin/platform.js imports once dist is current), settings from the
// environment only. Every process of a batch is spawned in the same tick.
import { spawn } from 'node:child_process';
import { ROOT } from './cluster.js';
import { projectPath } from '../../../src/paths.js';

const CLI = projectPath('dist/src/cli.js');
const ORPHAN_GUARD = projectPath('test/security/multiprocess/orphan-guard.mjs');
const RUN_TIMEOUT_MS = 60_000;

export interface CliRun {
  job: string;
  code: number | null;
  stdout: string;
  stderr: string;
  /** The `result` of the JSON line `jobs run` prints, or null when there was none. */
  result: Record<string, number> | null;
  ms: number;
}

function cliEnv(databaseUrl: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const name of ['PATH', 'HOME', 'TMPDIR', 'LANG', 'TZ']) if (process.env[name]) env[name] = process.env[name]!;
  // DEV_CLOCK: the jobs read the service clock the test moved (the offset lives in the database).
  return { ...env, DATABASE_URL: databaseUrl, DEV_CLOCK: '1', LOG_LEVEL: 'warn' };
}

function runJob(databaseUrl: string, job: string): Promise<CliRun> {
  const started = Date.now();
  const child = spawn(process.execPath, ['--import', ORPHAN_GUARD, CLI, 'jobs', 'run', job], { cwd: ROOT, env: cliEnv(databaseUrl), stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString('utf8')));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
  const timer = setTimeout(() => child.kill('SIGKILL'), RUN_TIMEOUT_MS);
  return new Promise((resolve) => {
    child.on('close', (code) => {
      clearTimeout(timer);
      let result: CliRun['result'] = null;
      try {
        const out = JSON.parse(stdout.trim().split('\n').at(-1) ?? '');
        if (out.job === job) result = out.result;
      } catch {
        /* no result line: the exit code and stderr tell */
      }
      resolve({ job, code, stdout, stderr, result, ms: Date.now() - started });
    });
  });
}

/** Spawns one `jobs run` per entry of `jobs`, all at once; resolves when every one has exited. */
export function runJobsAtOnce(databaseUrl: string, jobs: readonly string[]): Promise<CliRun[]> {
  return Promise.all(jobs.map((job) => runJob(databaseUrl, job)));
}
