import type { TestContext } from 'node:test';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { loadConfig, type Config } from '../../src/config.js';
import { SystemClock } from '../../src/clock.js';
import { openPglite } from '../../src/db/pglite.js';
import { openPg } from '../../src/db/pg.js';
import type { Database } from '../../src/db/types.js';
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
 * PostgreSQL of TEST_DATABASE_URL (dropped afterwards).
 */
export async function openTestDatabase(schema: string | null = null): Promise<{ database: Database; schema: string | null; drop: () => Promise<void> }> {
  if (!TEST_DATABASE_URL) {
    const database = await openPglite(null);
    return { database, schema: null, drop: async () => undefined };
  }
  const name = schema ?? `t_${randomBytes(6).toString('hex')}`;
  const database = await openPg({ url: TEST_DATABASE_URL, schema: name, poolSize: 3 });
  return { database, schema: name, drop: () => dropSchema(name) };
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

/** Boots the whole service (migrations, keys, jobs registry) without listening. Call close() after. */
export async function buildTestApp(overrides: Partial<Config> = {}, t?: TestContext, extraModules: Module[] = []): Promise<TestApp> {
  const config = testConfig(overrides);
  const { database, schema, drop } = await openTestDatabase();
  const clock = new SystemClock();
  const { app, deps } = await boot({ config, database, clock, logger: process.env.TEST_LOG ? { level: "error" } : false, extraModules });
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
