import type { TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import pg from 'pg';
import { loadConfig, type Config } from '../../src/config.js';
import { SystemClock } from '../../src/clock.js';
import { readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { dumpPglite, openPglite } from '../../src/db/pglite.js';
import { loadMigrations, migrate } from '../../src/db/migrate.js';
import { openPg } from '../../src/db/pg.js';
import { projectPath } from '../../src/paths.js';
import type { Database, Db, Scope } from '../../src/db/types.js';
import { boot } from '../../src/boot.js';
import type { Deps } from '../../src/context.js';
import type { App, Module } from '../../src/modules/types.js';

export const TEST_DATABASE_URL = process.env.TEST_DATABASE_URL || null;
export const storageName = TEST_DATABASE_URL ? 'postgres' : 'pglite';

export interface TestApp {
  app: App;
  deps: Deps;
  clock: SystemClock;
  database: Database;
  config: Readonly<Config>;
  /** The PostgreSQL schema of this app (PostgreSQL runs only). */
  schema: string | null;
  close(): Promise<void>;
}

export function testConfig(overrides: Partial<Config> = {}): Readonly<Config> {
  return Object.freeze({
    ...loadConfig({ PUBLIC_URL: 'http://localhost:8080', LOG_LEVEL: 'silent' }),
    authRateLimitPerMinute: 0,
    workers: false,
    ...overrides,
  });
}

/**
 * A fresh database for one test file or test: in-memory PGlite, or a schema of its own on the
 * PostgreSQL of TEST_DATABASE_URL (dropped afterwards). Empty, unless `migrated` (embedded only: the
 * caller boots the service, which migrates anyway).
 */
export async function openTestDatabase(schema: string | null = null, { migrated = false } = {}): Promise<{ database: Database; schema: string | null; drop: () => Promise<void> }> {
  if (!TEST_DATABASE_URL) {
    // Embedded: an app about to migrate may start from the migrated snapshot (same end state, faster).
    const database = await openPglite(null, { sharedBuffers: '16MB', ...(migrated ? { loadDataDir: await migratedSnapshot() } : {}) });
    return { database, schema: null, drop: async () => undefined };
  }
  const name = schema ?? `t_${randomBytes(6).toString('hex')}`;
  const database = await openPg({ url: TEST_DATABASE_URL, schema: name, poolSize: 3 });
  return { database, schema: name, drop: () => dropSchema(name) };
}

// An empty embedded cluster costs about a second to create (initdb) and the migrations more; the
// database of a booted test app starts instead from a dump of a migrated one, made once per set of
// migrations and PGlite version and kept in the OS temp directory (written whole, then renamed).
let snapshot: Promise<Blob> | null = null;
function migratedSnapshot(): Promise<Blob> {
  snapshot ??= (async () => {
    const migrations = loadMigrations();
    const pgliteVersion = JSON.parse(readFileSync(projectPath('node_modules/@electric-sql/pglite/package.json'), 'utf8')).version;
    const key = createHash('sha256').update(pgliteVersion).update(JSON.stringify(migrations)).digest('hex').slice(0, 16);
    const file = join(tmpdir(), `platform-api-pglite-${key}.tar`);
    try {
      return new Blob([readFileSync(file)]);
    } catch {
      const database = await openPglite(null);
      try {
        await migrate(database, migrations);
        const dump = await dumpPglite(database);
        const partial = `${file}.${process.pid}.${randomBytes(4).toString('hex')}`;
        try {
          writeFileSync(partial, Buffer.from(await dump.arrayBuffer()));
          renameSync(partial, file);
        } catch {
          rmSync(partial, { force: true }); // no room to keep it: the next process makes its own
        }
        return dump;
      } finally {
        await database.close();
      }
    }
  })();
  return snapshot;
}

export async function dropSchema(name: string): Promise<void> {
  const client = new pg.Client({ connectionString: TEST_DATABASE_URL! });
  await client.connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS ${pg.escapeIdentifier(name)} CASCADE`);
  } finally {
    await client.end();
  }
}

/**
 * Runs `fn` with the app's clock held at one instant (now, or `at`), so a request's now is exactly the
 * test's (boundaries of "after", "at most", "in the future").
 */
export async function atOneInstant<T>(t: Pick<TestApp, 'clock'>, fn: () => Promise<T>, at?: Date | string): Promise<T> {
  const instant = at === undefined ? t.clock.now() : new Date(at);
  const realNow = t.clock.now;
  t.clock.now = () => new Date(instant);
  try {
    return await fn();
  } finally {
    t.clock.now = realNow;
  }
}

/**
 * Runs `fn` with the app's clock standing still except for `clock.advance`, so a boundary one second
 * away stays one second away however long the requests between take on a loaded machine.
 */
export async function withStoppedClock<T>(t: Pick<TestApp, 'clock'>, fn: () => Promise<T>): Promise<T> {
  const base = t.clock.now().getTime() - t.clock.offsetMs;
  const realNow = t.clock.now;
  t.clock.now = () => new Date(base + t.clock.offsetMs);
  try {
    return await fn();
  } finally {
    t.clock.now = realNow;
  }
}

/** Boots the whole service (migrations, keys, jobs registry) without listening. Call close() after. */
export async function buildTestApp(overrides: Partial<Config> = {}, t?: TestContext, extraModules: Module[] = []): Promise<TestApp> {
  const config = testConfig(overrides);
  const { database, schema, drop } = await openTestDatabase(null, { migrated: true });
  const clock = new SystemClock();
  const { app, deps } = await boot({ config, database, clock, logger: process.env.TEST_LOG ? { level: "error" } : false, extraModules, compileSchemas: 'on-first-use' });
  await app.ready();
  const cleanup = async () => {
    await app.close();
    await deps.jobs.stop();
    await database.close();
    await drop();
  };
  if (t) t.after(cleanup);
  return { app, deps, clock, database, config, schema, close: cleanup };
}

/**
 * Runs `fn` with every connection the app takes (database.scoped) replaced by `wrap` of it, and puts
 * the database back after, whatever `fn` did: the one way the helpers below watch the app's statements.
 */
export async function withWrappedDatabase<T>(t: TestApp, wrap: (db: Db, scope: Scope) => Db, fn: () => Promise<T>): Promise<T> {
  const database = t.deps.database;
  const original = database.scoped;
  const scoped = original.bind(database);
  database.scoped = (s) => wrap(scoped(s), s);
  try {
    return await fn();
  } finally {
    database.scoped = original;
  }
}

/**
 * Runs `request` with a pause after the first query (on a connection of `scope`, or any) whose text
 * contains `fragment`: once that query has answered, `meanwhile` runs to its end (another request,
 * say) before `request` goes on. A deterministic interleaving of two requests, which the embedded
 * database otherwise does not give (it runs one in-process request to its end before the next).
 */
export async function pausedAfter<T>(t: TestApp, fragment: string, meanwhile: () => Promise<void>, request: () => Promise<T>, scope?: Scope): Promise<T> {
  let paused = false;
  const wrap = (db: Db, s: Scope): Db => {
    if (scope !== undefined && s !== scope) return db;
    const query = (async (text: string, params?: unknown[]) => {
      const result = await db.query(text, params);
      if (!paused && text.includes(fragment)) {
        paused = true;
        await meanwhile();
      }
      return result;
    }) as Db['query'];
    return { ...db, query };
  };
  const out = await withWrappedDatabase(t, wrap, request);
  assert.ok(paused, `no query containing ${fragment} ran${scope ? ` on the ${scope} connection` : ''}`);
  return out;
}

/**
 * Runs `fn`, then waits until every statement it started whose text matches `pattern` has settled,
 * those sent off the request's path (after its answer) included: a write that should not have happened
 * is seen however slow the machine, with no sleep standing in for it.
 */
export async function withStatementsSettled<T>(t: TestApp, pattern: RegExp, fn: () => Promise<T>): Promise<T> {
  const started: Promise<unknown>[] = [];
  const wrap = (db: Db): Db => {
    const query = ((text: string, params?: unknown[]) => {
      const running = db.query(text, params);
      if (pattern.test(text)) started.push(running.catch(() => undefined));
      return running;
    }) as Db['query'];
    return { ...db, query };
  };
  try {
    return await withWrappedDatabase(t, wrap, fn);
  } finally {
    await Promise.all(started);
  }
}
