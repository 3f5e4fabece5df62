// A throw-away PostgreSQL server of our own (initdb in a temp folder, a free port, trust auth), so a
// test can stop and start the database under a running service without touching the machine's
// shared server. Run as the `postgres` OS user when we are root (PostgreSQL refuses to run as root).
import { execFile } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort } from './http.js';

const run = promisify(execFile);

/** The newest installed PostgreSQL binaries (PG_BIN overrides), or null. */
export function postgresBinaries(): string | null {
  if (process.env.PG_BIN) return existsSync(join(process.env.PG_BIN, 'initdb')) ? process.env.PG_BIN : null;
  const base = '/usr/lib/postgresql';
  if (!existsSync(base)) return null;
  const versions = readdirSync(base).filter((v) => /^\d+$/.test(v)).sort((a, b) => Number(b) - Number(a));
  const found = versions.map((v) => join(base, v, 'bin')).find((bin) => existsSync(join(bin, 'initdb')) && existsSync(join(bin, 'pg_ctl')));
  return found ?? null;
}

export class PrivatePostgres {
  private constructor(
    private readonly bin: string,
    readonly dir: string,
    readonly port: number,
    private readonly asUser: string[],
  ) {}

  get data(): string {
    return join(this.dir, 'data');
  }
  get url(): string {
    return `postgres://postgres@127.0.0.1:${this.port}/postgres`;
  }

  /** initdb and start; throws when the binaries are missing. */
  static async start(): Promise<PrivatePostgres> {
    const bin = postgresBinaries();
    if (!bin) throw new Error('no PostgreSQL binaries (set PG_BIN)');
    const dir = mkdtempSync(join(tmpdir(), 'mp-pg-'));
    let asUser: string[] = [];
    if (process.getuid?.() === 0) {
      const { stdout: uid } = await run('id', ['-u', 'postgres']);
      const { stdout: gid } = await run('id', ['-g', 'postgres']);
      chownSync(dir, Number(uid), Number(gid));
      asUser = ['runuser', '-u', 'postgres', '--'];
    }
    const pg = new PrivatePostgres(bin, dir, await freePort(), asUser);
    await pg.exec('initdb', ['-D', pg.data, '-A', 'trust', '-U', 'postgres', '-E', 'UTF8', '--no-sync']);
    await pg.resume();
    return pg;
  }

  private async exec(tool: string, args: string[]): Promise<string> {
    const [cmd, ...rest] = [...this.asUser, join(this.bin, tool), ...args];
    try {
      const { stdout } = await run(cmd, rest, { cwd: this.dir, timeout: 60_000 });
      return stdout;
    } catch (err: any) {
      throw new Error(`${tool} failed: ${err.message}\n${err.stdout ?? ''}${err.stderr ?? ''}`);
    }
  }

  /** pg_ctl start, waiting until it accepts connections. */
  async resume(): Promise<void> {
    const options = `-p ${this.port} -k ${this.dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=100`;
    await this.exec('pg_ctl', ['-D', this.data, '-l', join(this.dir, 'server.log'), '-o', options, '-w', 'start']);
  }

  /** pg_ctl stop -m fast: open connections are terminated, new ones refused. */
  async stop(mode: 'fast' | 'immediate' = 'fast'): Promise<void> {
    await this.exec('pg_ctl', ['-D', this.data, '-m', mode, '-w', 'stop']);
  }

  async destroy(): Promise<void> {
    await this.stop('immediate').catch(() => undefined);
    rmSync(this.dir, { recursive: true, force: true });
  }
}
