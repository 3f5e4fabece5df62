// One server process of src/main.ts for the [MP] tests: started, health-checked, SIGKILLed and
// restarted on the same port; its output is kept for diagnostics and its Argon2 password
// evaluations can be counted (argon2-count.mjs).
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { httpCall, sleep, type CallOptions, type Reply } from './http.js';
import { projectPath } from '../../../src/paths.js';

export const ROOT = projectPath('.');

const STARTUP_TIMEOUT_MS = 90_000;
const OUTPUT_KEPT = 64 * 1024;
/** Whether this system shows processes' sockets under /proc (socketPorts). */
const PROC = existsSync('/proc/self/fd');

/**
 * How a server process runs src/main.ts. Default: one esbuild bundle of it (the transpiler tsx uses,
 * packages left external), built once per test file under node_modules/.cache: a start costs about
 * 1.6 s of CPU instead of 3.4 s through the tsx loader, which matters when several files each start
 * two processes (and FT-1 restarts them) on a 2-core machine. MP_SERVER=tsx runs
 * `node --import tsx src/main.ts` exactly.
 */
const SERVER_MODE = process.env.MP_SERVER === 'tsx' ? 'tsx' : 'bundle';
let bundled: Promise<string> | null = null;

export const pidAlive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
};

const ORPHAN_GUARD = projectPath('test/security/multiprocess/orphan-guard.mjs');
const ARGON2_COUNT = projectPath('test/security/multiprocess/argon2-count.mjs');

/** The files the server processes of this test process write their Argon2 counts to. */
let countDir: string | null = null;
function countFile(name: string): string {
  if (!countDir) {
    const dir = mkdtempSync(join(tmpdir(), 'platform-mp-argon2-'));
    process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
    countDir = dir;
  }
  return join(countDir, name);
}

async function serverArgs(): Promise<string[]> {
  const guard = ['--import', ORPHAN_GUARD, '--import', ARGON2_COUNT];
  if (SERVER_MODE === 'tsx') return [...guard, '--import', 'tsx', 'src/main.ts'];
  bundled ??= (async () => {
    const { build } = await import('esbuild');
    mkdirSync(join(ROOT, 'node_modules', '.cache', 'platform-mp'), { recursive: true });
    // The real path: main.ts serves only when import.meta.url equals argv[1] (no symlink between).
    const cache = realpathSync(join(ROOT, 'node_modules', '.cache', 'platform-mp'));
    // Bundles of test processes that were killed before they could clean up.
    for (const old of readdirSync(cache)) if (!pidAlive(Number(old.split('-')[0]))) rmSync(join(cache, old), { recursive: true, force: true });
    const dir = join(cache, `${process.pid}-${randomBytes(4).toString('hex')}`);
    mkdirSync(dir, { recursive: true });
    process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
    // The Argon2 pool's worker module is a second entry point: the service finds it next to itself,
    // with its own extension (src/auth/passwords.ts).
    await build({
      entryPoints: { main: join(ROOT, 'src', 'main.ts'), 'argon2-worker': join(ROOT, 'src', 'auth', 'argon2-worker.ts') },
      outdir: dir,
      outExtension: { '.js': '.mjs' },
      bundle: true,
      platform: 'node',
      format: 'esm',
      target: 'node20',
      packages: 'external',
      logLevel: 'error',
    });
    return join(dir, 'main.mjs');
  })();
  return [...guard, await bundled];
}

export interface ExitRecord {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** True when the harness caused it (kill, stop). */
  expected: boolean;
}

/** One server process, restartable on the same port. */
export class ServerProcess {
  child: ChildProcess | null = null;
  readonly exits: ExitRecord[] = [];
  output = '';
  /** Started and answering /health; false from a kill or crash until the next start completes. */
  ready = false;
  private expectingExit = false;
  private exited: Promise<void> = Promise.resolve();

  private readonly countFile: string;

  constructor(
    readonly name: string,
    readonly port: number,
    private readonly env: Record<string, string>,
  ) {
    this.countFile = countFile(`${name}-${port}`);
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }
  get alive(): boolean {
    return this.child !== null;
  }
  get pid(): number | undefined {
    return this.child?.pid;
  }
  /** Exits the harness did not cause (crashes). */
  get unexpectedExits(): ExitRecord[] {
    return this.exits.filter((e) => !e.expected);
  }

  /** Spawns the process and waits until GET /health answers 200. */
  async start(): Promise<void> {
    if (this.child) throw new Error(`${this.name} is already running`);
    const child = spawn(process.execPath, await serverArgs(), {
      cwd: ROOT,
      env: { ...this.env, MP_ARGON2_COUNT_FILE: this.countFile },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.child = child;
    this.expectingExit = false;
    const keep = (chunk: Buffer) => {
      this.output = (this.output + chunk.toString('utf8')).slice(-OUTPUT_KEPT);
    };
    child.stdout!.on('data', keep);
    child.stderr!.on('data', keep);
    this.exited = new Promise((resolve) => {
      child.on('exit', (code, signal) => {
        this.ready = false;
        this.exits.push({ code, signal, expected: this.expectingExit });
        if (this.child === child) this.child = null;
        resolve();
      });
    });
    const deadline = Date.now() + STARTUP_TIMEOUT_MS;
    while (Date.now() < deadline) {
      if (this.child !== child) throw new Error(`${this.name} exited during start-up:\n${this.output}`);
      try {
        const res = await httpCall(this.url, this.name, 'GET', '/health');
        // The answer must be this process's: between freePort() and this listen, another test's
        // process may have taken the port, and its /health would answer while this one exits with
        // EADDRINUSE (the loop then reports that exit). Where there is no /proc, the answer counts.
        const mine = this.child === child && (!PROC || socketPorts(child.pid).has(this.port));
        if (res.status === 200 && mine) {
          this.ready = true;
          return;
        }
      } catch {
        /* not listening yet */
      }
      await sleep(50);
    }
    throw new Error(`${this.name} did not become healthy within ${STARTUP_TIMEOUT_MS} ms:\n${this.output}`);
  }

  /** kill -9, then waits for the exit. */
  async kill(): Promise<void> {
    if (!this.child) return;
    this.expectingExit = true;
    this.ready = false;
    this.child.kill('SIGKILL');
    await this.exited;
  }

  /** SIGTERM (graceful close), SIGKILL after 10 s. */
  async stop(): Promise<void> {
    if (!this.child) return;
    this.expectingExit = true;
    this.ready = false;
    const child = this.child;
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
    await this.exited;
    clearTimeout(timer);
  }

  call(method: string, path: string, opts: CallOptions = {}): Promise<Reply> {
    return httpCall(this.url, this.name, method, path, opts);
  }

  /**
   * Opens n keep-alive connections, so that a following burst does not pay for connecting, and as
   * many database connections in the process's system pool (/health) and, given a user token, its
   * live pool (GET /v1/users/me).
   */
  async warm(n: number, token?: string): Promise<void> {
    await Promise.all(Array.from({ length: n }, () => this.call('GET', '/health')));
    if (token) await Promise.all(Array.from({ length: n }, () => this.call('GET', '/v1/users/me', { token })));
  }

  /**
   * Argon2 password evaluations (verifications, known accounts and the unknown-email dummy alike)
   * this process has started since it was last started.
   */
  argon2Evaluations(): number {
    try {
      return Number(readFileSync(this.countFile, 'utf8'));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 0;
      throw err;
    }
  }
}

/** The environment of a server process (operations.md names). */
export function serverEnv(databaseUrl: string, port: number, publicUrl: string, extra: Record<string, string> = {}): Record<string, string> {
  const env: Record<string, string> = {};
  // Only what a server needs from ours (PATH for tsx, HOME for its cache); no TEST_* or DATABASE_URL leaks.
  for (const name of ['PATH', 'HOME', 'TMPDIR', 'LANG', 'TZ']) if (process.env[name]) env[name] = process.env[name]!;
  return {
    ...env,
    DATABASE_URL: databaseUrl,
    PORT: String(port),
    HOST: '127.0.0.1',
    PUBLIC_URL: publicUrl,
    DEV_CLOCK: '1',
    // Errors only: a 5xx answer leaves its cause in the kept output (the tests print it on failure).
    LOG_LEVEL: 'error',
    AUTH_RATE_LIMIT_PER_MINUTE: '0',
    WORKERS: '0',
    ...extra,
  };
}

/** Local TCP ports of a process's open sockets (Linux /proc); empty where /proc cannot tell. */
export function socketPorts(pid: number | undefined): Set<number> {
  const ports = new Set<number>();
  try {
    const inodes = new Set<string>();
    for (const fd of readdirSync(`/proc/${pid}/fd`)) {
      const m = /^socket:\[(\d+)\]$/.exec(readlinkSafe(`/proc/${pid}/fd/${fd}`));
      if (m) inodes.add(m[1]);
    }
    for (const file of ['/proc/net/tcp', '/proc/net/tcp6']) {
      for (const line of readFileSync(file, 'utf8').split('\n').slice(1)) {
        const f = line.trim().split(/\s+/);
        if (inodes.has(f[9])) ports.add(parseInt(f[1].split(':').at(-1)!, 16));
      }
    }
  } catch {
    /* not Linux, or the process is gone */
  }
  return ports;
}
const readlinkSafe = (path: string) => {
  try {
    return readlinkSync(path);
  } catch {
    return '';
  }
};
