import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { projectPath } from '../../src/paths.js';

// The operator CLI (`npx platform <command>`), run as an operator would: the built bin/platform.js,
// settings from the environment only, embedded storage under DATA_DIR (no DATABASE_URL).
const run = promisify(execFile);
const BIN = projectPath('bin/platform.js');
const ADMIN_EMAIL = 'a@example.com';
const ADMIN_PASSWORD = 'copper-willow-saddle-harbor-58';

let dataDir: string;
let env: NodeJS.ProcessEnv;

before(async () => {
  await run(process.execPath, [projectPath('scripts/build-if-needed.mjs')], { cwd: projectPath('.'), timeout: 120_000 });
  dataDir = await mkdtemp(join(tmpdir(), 'platform-cli-'));
  env = { ...process.env, DATA_DIR: dataDir, LOG_LEVEL: 'warn' };
  for (const name of ['DATABASE_URL', 'TEST_DATABASE_URL', 'BOOTSTRAP_ADMIN_EMAIL', 'BOOTSTRAP_ADMIN_PASSWORD', 'SMTP_URL', 'DEV_CLOCK', 'PORT']) delete env[name];
});
after(() => rm(dataDir, { recursive: true, force: true }));

async function platform(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, [BIN, ...args], { cwd: projectPath('.'), env, timeout: 60_000 });
    return { code: 0, stdout, stderr };
  } catch (err: any) {
    if (typeof err.code !== 'number') throw err;
    return { code: err.code, stdout: err.stdout, stderr: err.stderr };
  }
}

test('platform migrate applies the migrations to the embedded storage under DATA_DIR', async () => {
  const res = await platform('migrate');
  assert.equal(res.code, 0, res.stderr);
  assert.match(res.stdout, /applied: 0001_foundation/);
});

test('platform bootstrap-admin creates the superadmin once; a second run says a live user already has that email', async () => {
  const first = await platform('bootstrap-admin', '--email', ADMIN_EMAIL, '--password', ADMIN_PASSWORD);
  assert.equal(first.code, 0, first.stderr);
  const created = first.stdout.match(/created superadmin (usr_\S+)/);
  assert.ok(created, first.stdout);

  const second = await platform('bootstrap-admin', '--email', ADMIN_EMAIL, '--password', ADMIN_PASSWORD);
  assert.equal(second.code, 0, second.stderr);
  assert.match(second.stdout, /a live user already has that email/);
  assert.ok(second.stdout.includes(created[1]), 'the same user');
});

test('platform keys rotate prints the new signing key', async () => {
  const res = await platform('keys', 'rotate');
  assert.equal(res.code, 0, res.stderr);
  assert.match(res.stdout, /new signing key: sig_\S+/);
});

test('platform jobs run <job> runs one background job now and prints its JSON result', async () => {
  const res = await platform('jobs', 'run', 'idempotency-prune');
  assert.equal(res.code, 0, res.stderr);
  const lines = res.stdout.trim().split('\n');
  const out = JSON.parse(lines[lines.length - 1]);
  assert.equal(out.job, 'idempotency-prune');
  assert.equal(typeof out.result, 'object');
});

test('an unknown command exits with status 2 and prints the usage', async () => {
  const res = await platform('frobnicate');
  assert.equal(res.code, 2);
  assert.match(res.stderr, /usage: platform <command>/);
});

test('stdout carries only the result: jobs list prints exactly the job names and jobs run one JSON line (warnings go to stderr)', async () => {
  const list = await platform('jobs', 'list');
  assert.equal(list.code, 0, list.stderr);
  const names = list.stdout.trim().split('\n');
  assert.ok(names.includes('entitlement-expiry') && names.includes('email-change-expiry'), list.stdout);
  for (const name of names) assert.match(name, /^[a-z][a-z-]+$/, `not a job name: ${name}`);
  assert.match(list.stderr, /ENCRYPTION_KEY/, 'the start-up warning is on stderr');
  const run = await platform('jobs', 'run', 'idempotency-prune');
  assert.equal(run.code, 0, run.stderr);
  assert.equal(JSON.parse(run.stdout).job, 'idempotency-prune');
});

test('jobs run with a name that is no job is a usage error: exit 2, one line naming the known jobs, nothing on stdout', async () => {
  const res = await platform('jobs', 'run', 'no-such-job');
  assert.equal(res.code, 2, res.stdout);
  assert.match(res.stderr, /jobs run: no job named "no-such-job"; the jobs are: .*entitlement-expiry/);
  assert.equal(res.stdout, '');
  assert.doesNotMatch(res.stderr, /\n\s+at /, 'no stack trace');
});

test('platform bootstrap-admin --email that is not an address is a usage error (exit 2, one line), as BOOTSTRAP_ADMIN_EMAIL is at start; no user is created', async () => {
  const res = await platform('bootstrap-admin', '--email', 'notanemail', '--password', ADMIN_PASSWORD);
  assert.equal(res.code, 2, res.stdout);
  assert.match(res.stderr, /--email must be an email address \(got "notanemail"\)/);
  assert.doesNotMatch(res.stdout, /created superadmin/);
  assert.doesNotMatch(res.stderr, /\n\s+at /, 'no stack trace');
});

test('a command that fails prints one line naming the command without the value of --password, and exits 1', async () => {
  const saved = env;
  env = { ...env, DATABASE_URL: 'postgres://postgres@127.0.0.1:1/unreachable' };
  try {
    const res = await platform('bootstrap-admin', '--email', ADMIN_EMAIL, '--password', ADMIN_PASSWORD);
    assert.equal(res.code, 1, res.stdout);
    assert.match(res.stderr, /bootstrap-admin --email a@example\.com --password \*\*\* failed/);
    assert.ok(!res.stderr.includes(ADMIN_PASSWORD), res.stderr);
  } finally {
    env = saved;
  }
});

test('platform --help, -h and help print the usage to stdout and exit 0', async () => {
  for (const flag of ['--help', '-h', 'help']) {
    const res = await platform(flag);
    assert.equal(res.code, 0, `${flag}: ${res.stderr}`);
    assert.match(res.stdout, /usage: platform <command>/);
    assert.match(res.stdout, /bootstrap-admin/);
  }
});

test('an unknown option is a usage error: exit 2 with the usage, no stack trace', async () => {
  const res = await platform('bootstrap-admin', '--mail', 'x@example.com');
  assert.equal(res.code, 2);
  assert.match(res.stderr, /usage: platform <command>/);
  assert.doesNotMatch(res.stderr, /\n\s+at /, 'no stack trace');
});

test('embedded storage is one process\'s: while the server holds DATA_DIR a command exits 1 with one line naming that process; after it stops, or with a stale lock, commands run', async () => {
  const { spawn } = await import('node:child_process');
  const { writeFile } = await import('node:fs/promises');
  const port = 20_000 + Math.floor(Math.random() * 20_000);
  const server = spawn(process.execPath, [BIN, 'serve'], { cwd: projectPath('.'), env: { ...env, PORT: String(port), HOST: '127.0.0.1', WORKERS: '0' }, stdio: 'ignore' });
  try {
    for (let i = 0; ; i++) {
      const up = await fetch(`http://127.0.0.1:${port}/health`).then((r) => r.ok, () => false);
      if (up) break;
      assert.ok(i < 300 && server.exitCode === null, 'the server started');
      await new Promise((r) => setTimeout(r, 200));
    }
    const refused = await platform('jobs', 'list');
    assert.equal(refused.code, 1);
    assert.equal(refused.stderr.trim().split('\n').length, 1, refused.stderr);
    assert.match(refused.stderr, new RegExp(`^platform: jobs list failed: the embedded database .* is open in process ${server.pid}: stop that process first`));
  } finally {
    const exited = new Promise((r) => server.once('exit', r));
    server.kill('SIGTERM');
    await exited;
  }
  assert.equal((await platform('jobs', 'list')).code, 0, 'the lock went with the server');
  await writeFile(join(dataDir, 'pglite.lock'), '4194000');
  const stale = await platform('jobs', 'list');
  assert.equal(stale.code, 0, stale.stderr);
});
