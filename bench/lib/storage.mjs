// Where the service and the baseline keep their data for one bench run, and how to clean it up.
import pg from 'pg';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const LOCAL_POSTGRES_URL = 'postgres://postgres@127.0.0.1:5432/postgres';

async function withClient(url, fn) {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000 });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end().catch(() => undefined);
  }
}

export async function reachable(url) {
  try {
    await withClient(url, (c) => c.query('SELECT 1'));
    return true;
  } catch {
    return false;
  }
}

const redact = (url) => url.replace(/\/\/([^:@/]+):[^@/]*@/, '//$1:***@');

/** CREATE DATABASE bench_<random> on the server of `adminUrl`; drop() removes it (WITH FORCE). */
export async function freshDatabase(adminUrl) {
  const name = `bench_${randomBytes(5).toString('hex')}`;
  await withClient(adminUrl, (c) => c.query(`CREATE DATABASE ${pg.escapeIdentifier(name)}`));
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    name,
    drop: () =>
      withClient(adminUrl, async (c) => {
        try {
          await c.query(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(name)} WITH (FORCE)`);
        } catch {
          await c.query(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(name)}`);
        }
      }),
  };
}

/**
 * Decides the storage of the run.
 *   BENCH_DATABASE_URL / DATABASE_URL set  → a fresh database on that server, shared by both.
 *   else local PostgreSQL reachable        → a fresh database on 127.0.0.1:5432, shared by both.
 *   else (or BENCH_STORAGE=pglite)         → service on PGlite in a temp DATA_DIR; the baseline on a
 *                                            fresh database of the local server if reachable, else on
 *                                            its own PGlite with the same schema.
 * BENCH_FRESH_DATABASE=0 uses the given database as it is (nothing created or dropped).
 * Returns { storage, shared, serviceEnv, baseline: { databaseUrl } | { pgliteDir }, cleanup }.
 */
export async function prepareStorage(env = process.env, log = () => undefined) {
  const explicit = env.BENCH_DATABASE_URL || env.DATABASE_URL || null;
  const mode = env.BENCH_STORAGE || null;
  if (mode && mode !== 'postgres' && mode !== 'pglite') throw new Error(`BENCH_STORAGE must be postgres or pglite (got "${mode}")`);
  const fresh = env.BENCH_FRESH_DATABASE !== '0';
  const cleanups = [];
  const cleanup = async () => {
    for (const fn of cleanups.splice(0).reverse()) {
      try {
        await fn();
      } catch (err) {
        log(`cleanup failed: ${err.message}`);
      }
    }
  };
  const database = async (serverUrl) => {
    if (!fresh) return serverUrl;
    const db = await freshDatabase(serverUrl);
    cleanups.push(db.drop);
    log(`created database ${db.name} on ${redact(serverUrl)}`);
    return db.url;
  };

  try {
    if (mode !== 'pglite') {
      const serverUrl = explicit ?? ((await reachable(LOCAL_POSTGRES_URL)) ? LOCAL_POSTGRES_URL : null);
      if (serverUrl) {
        const url = await database(serverUrl);
        return { storage: 'postgres-shared', shared: true, serviceEnv: { DATABASE_URL: url }, baseline: { databaseUrl: url }, cleanup };
      }
      if (mode === 'postgres') throw new Error(`BENCH_STORAGE=postgres but ${LOCAL_POSTGRES_URL} does not answer and no DATABASE_URL is set`);
    }
    const dir = mkdtempSync(join(tmpdir(), 'platform-bench-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const serviceEnv = { DATA_DIR: join(dir, 'service'), DATABASE_URL: undefined };
    const serverUrl = explicit ?? ((await reachable(LOCAL_POSTGRES_URL)) ? LOCAL_POSTGRES_URL : null);
    if (serverUrl) {
      const url = await database(serverUrl);
      return { storage: 'pglite/postgres', shared: false, serviceEnv, baseline: { databaseUrl: url }, cleanup };
    }
    return { storage: 'pglite/pglite', shared: false, serviceEnv, baseline: { pgliteDir: join(dir, 'baseline') }, cleanup };
  } catch (err) {
    await cleanup();
    throw err;
  }
}
