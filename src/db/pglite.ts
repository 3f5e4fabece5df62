import { PGlite, type Transaction } from '@electric-sql/pglite';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { DatabaseBusyError, MAX_WAITING_FOR_CONNECTION, type Database, type Db, type QueryResult, type Scope, type Tx } from './types.js';
import { APP_ROLE } from './roles.js';
import { assertNotInTransaction, runInTransactionContext } from './guard.js';

/**
 * Embedded PostgreSQL. It has one connection, so every statement and transaction is queued here;
 * before each one the connection is switched to the caller's scope (role and mode setting).
 */
export interface PgliteOptions {
  /** Start from this dump of a data directory (see dumpPglite) instead of an empty cluster. */
  loadDataDir?: Blob;
  /**
   * shared_buffers for this process. PostgreSQL's default, 128MB, costs about 0.35 s of every start
   * (PGlite clears it in WebAssembly memory); a short-lived user (a CLI command, a test's database)
   * reads few pages and passes less. The server keeps the default.
   */
  sharedBuffers?: `${number}MB`;
}

const engines = new WeakMap<Database, PGlite>();

/** PostgreSQL's type oid of timestamptz. */
const TIMESTAMPTZ_OID = 1184;
/** timestamptz as PostgreSQL writes it (DateStyle ISO): `0049-06-15 12:30:00.5+00`, an offset of hours and maybe minutes. */
const TIMESTAMPTZ_TEXT = /^(\d{4})-(\d\d)-(\d\d) (\d\d:\d\d:\d\d(?:\.\d+)?)([+-]\d\d)(?::(\d\d))?$/;

/**
 * A timestamptz read as the instant PostgreSQL wrote, as node-postgres reads it. PGlite's own parser
 * hands the text to `new Date`, whose fallback for a text that is not ISO 8601 takes a year below 100
 * for a two-digit one: 0001-01-01 read as 2001-01-01, 0049-06-15 as 2049-06-15, so an Entitlement that
 * ended in the year 49 answered 2049 and was announced as access on the embedded database only. The
 * text is turned into ISO 8601 (a T, the offset with its minutes), which `new Date` reads as written;
 * anything else (infinity, a BC year) goes to `new Date` as before.
 */
function parseTimestamptz(text: string): Date | number {
  const m = TIMESTAMPTZ_TEXT.exec(text);
  if (m) return new Date(`${m[1]}-${m[2]}-${m[3]}T${m[4]}${m[5]}:${m[6] ?? '00'}`);
  return text === 'infinity' ? Infinity : text === '-infinity' ? -Infinity : new Date(text);
}

/** A dump of an open embedded database's whole data directory (uncompressed tar). */
export async function dumpPglite(database: Database): Promise<Blob> {
  const pg = engines.get(database);
  if (!pg) throw new Error('not an embedded database');
  return pg.dumpDataDir('none');
}

/** Whether a process with this pid exists (EPERM: it does, owned by someone else). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Embedded storage is one process's: a second process opening the same files (a CLI command beside
 * `npm start`) would corrupt them. `<dir>.lock` holds the opener's pid; a lock whose process is gone
 * is stale and taken over. Returns the release.
 */
function lockDataDir(dataDir: string): () => void {
  const file = `${dataDir}.lock`;
  for (;;) {
    try {
      writeFileSync(file, String(process.pid), { flag: 'wx' });
      let held = true;
      return () => {
        if (held) rmSync(file, { force: true });
        held = false;
      };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    const holder = Number.parseInt(readFileSync(file, 'utf8'), 10);
    if (holder === process.pid) return () => undefined;
    if (holder > 0 && alive(holder)) {
      throw new Error(
        `the embedded database ${dataDir} is open in process ${holder}: stop that process first (several processes share one database through DATABASE_URL); if no such process uses it, delete ${file}`,
      );
    }
    rmSync(file, { force: true });
  }
}

export async function openPglite(dataDir: string | null, options: PgliteOptions = {}): Promise<Database> {
  if (dataDir) mkdirSync(dataDir, { recursive: true });
  const unlock = dataDir ? lockDataDir(dataDir) : () => undefined;
  const pg = await startEngine(dataDir, options, unlock);
  const queue = queueStatements(pg);
  let closed = false;
  const scoped = (scope: Scope): Db => scopedHandle(database, pg, queue, scope);

  const database: Database = {
    kind: 'pglite',
    scoped,
    ping: async () => {
      if (closed) throw new Error('database closed');
      await scoped('system').query('SELECT 1');
    },
    close: async () => {
      closed = true;
      try {
        await queue.exclusive(() => pg.close());
      } finally {
        unlock();
      }
    },
  };
  engines.set(database, pg);
  return database;
}

/** The engine on `dataDir` (in memory without one); on failure the lock is released. */
async function startEngine(dataDir: string | null, options: PgliteOptions, unlock: () => void): Promise<PGlite> {
  try {
    return await PGlite.create({
      parsers: { [TIMESTAMPTZ_OID]: parseTimestamptz },
      ...(dataDir ? { dataDir } : {}),
      ...(options.loadDataDir ? { loadDataDir: options.loadDataDir } : {}),
      ...(options.sharedBuffers ? { startParams: [...PGlite.defaultStartParams, '-c', `shared_buffers=${options.sharedBuffers}`] } : {}),
    });
  } catch (err) {
    unlock();
    // PGlite says only "PGlite failed to initialize properly" or "Aborted()": name the folder and what
    // usually causes it (files restored with another owner, or written by a newer version).
    if (!dataDir) throw err;
    throw new Error(
      `the embedded database ${dataDir} could not be opened (${(err as Error).message}): this process must be able to write every file in it, and the files must come from this version's embedded PostgreSQL (not a newer one's), complete`,
      { cause: err },
    );
  }
}

/** The one connection's queue: `exclusive` runs each statement or transaction after the one before. */
function queueStatements(pg: PGlite) {
  let queue: Promise<unknown> = Promise.resolve();
  let waiting = 0;
  let current: Scope = 'system';

  const exclusive = <T>(fn: () => Promise<T>): Promise<T> => {
    if (waiting >= MAX_WAITING_FOR_CONNECTION) return Promise.reject(new DatabaseBusyError());
    waiting++;
    const start = () => {
      waiting--;
      return fn();
    };
    const run = queue.then(start, start);
    queue = run.catch(() => undefined);
    return run;
  };
  const switchTo = async (scope: Scope) => {
    if (scope === current) return;
    if (scope === 'system') await pg.exec(`RESET ROLE; SELECT set_config('app.test_mode', '', false)`);
    else await pg.exec(`SET ROLE ${APP_ROLE}; SELECT set_config('app.test_mode', '${scope === 'test' ? 'on' : 'off'}', false)`);
    current = scope;
  };
  return { exclusive, switchTo };
}

const normalize = <R>(r: { rows: unknown[]; affectedRows?: number }): QueryResult<R> => ({
  rows: r.rows as R[],
  // PGlite reports affectedRows 0 for a SELECT: count the returned rows then, as pg does.
  rowCount: Math.max(r.affectedRows ?? 0, r.rows.length),
});

function txHandle(scope: Scope, tx: Transaction): Tx {
  const handle: Tx = {
    scope,
    inTransaction: true,
    query: async <R>(text: string, params?: unknown[]) => normalize<R>(await tx.query(text, params as any[])),
    exec: async (text: string) => {
      await tx.exec(text);
    },
    transaction: (fn) => fn(handle),
  };
  return handle;
}

function scopedHandle(database: Database, pg: PGlite, queue: ReturnType<typeof queueStatements>, scope: Scope): Db {
  const { exclusive, switchTo } = queue;
  return {
    scope,
    inTransaction: false,
    query: <R>(text: string, params?: unknown[]) => {
      assertNotInTransaction(database);
      return exclusive(async () => {
        await switchTo(scope);
        return normalize<R>(await pg.query(text, params as any[]));
      });
    },
    exec: (text: string) => {
      assertNotInTransaction(database);
      return exclusive(async () => {
        await switchTo(scope);
        await pg.exec(text);
      });
    },
    transaction: <T>(fn: (tx: Tx) => Promise<T>) => {
      assertNotInTransaction(database);
      return exclusive(async () => {
        await switchTo(scope);
        return pg.transaction((tx) => runInTransactionContext(database, () => fn(txHandle(scope, tx))));
      });
    },
  };
}
