// Helpers of the single-process security tests (test/security/core/*.test.ts): a test app whose
// log lines are captured (to assert "no DB error logged" and start-up warnings), and a figure printer.
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import type { TestContext } from 'node:test';
import { openTestDatabase, testConfig, type TestApp } from '../../helpers/app.js';
import { SystemClock } from '../../../src/clock.js';
import { boot } from '../../../src/boot.js';
import type { Config } from '../../../src/config.js';
import type { Database, Db, Scope } from '../../../src/db/types.js';
import type { InjectResponse } from '../../helpers/http.js';
export { assertError, call, sql, type InjectResponse } from '../../helpers/http.js';

export interface LogLine {
  level: number;
  msg?: string;
  err?: { type?: string; message?: string; code?: string };
  [key: string]: unknown;
}

export interface CapturedApp extends TestApp {
  /** Every log line the service wrote at `level` or above, parsed. */
  logs: LogLine[];
}

/** buildTestApp with the service logger writing into `logs` instead of being off. */
export async function buildCapturedApp(overrides: Partial<Config> = {}, t?: TestContext, level = 'warn'): Promise<CapturedApp> {
  const logs: LogLine[] = [];
  const stream = captureInto(logs);
  const config = testConfig(overrides);
  const { database, schema, drop } = await openTestDatabase(null, { migrated: true });
  const clock = new SystemClock();
  const { app, deps } = await boot({ config, database, clock, logger: { level, stream } });
  await app.ready();
  const close = async () => {
    await app.close();
    await deps.jobs.stop();
    await database.close();
    await drop();
  };
  if (t) t.after(close);
  return { app, deps, clock, database, config, schema, close, logs };
}

/**
 * A second service instance on the same (already migrated) database with other settings: cheap,
 * because boot finds the migrations applied. Only the instance is closed afterwards, not the database.
 */
export async function bootAnother(t: TestApp, overrides: Partial<Config>, level = 'warn'): Promise<CapturedApp> {
  const logs: LogLine[] = [];
  const config = Object.freeze({ ...t.config, ...overrides });
  const { app, deps } = await boot({ config, database: t.database, clock: t.clock, logger: { level, stream: captureInto(logs) } });
  await app.ready();
  const close = async () => {
    await app.close();
    await deps.jobs.stop();
  };
  return { app, deps, clock: t.clock, database: t.database, config, schema: t.schema, close, logs };
}

function captureInto(logs: LogLine[]): Writable {
  return new Writable({
    write(chunk, _enc, done) {
      for (const line of String(chunk).split('\n').filter(Boolean)) logs.push(JSON.parse(line));
      done();
    },
  });
}

/**
 * A race barrier at the database boundary: the next `parties` transactions opened through
 * `database.scoped(...)` wait until all of them have arrived, then start together. Requests raced
 * this way have all made their reads (the "check") before any of them writes (the "act"), so a
 * check-then-act without an atomic write shows up on PGlite too, whose single connection otherwise
 * tends to run one request to the end before the next. `arrived()` tells whether the race happened.
 */
export function raceTransactions(database: Database, parties: number, timeoutMs = 5000): { arrived(): number; restore(): void } {
  const original = database.scoped;
  let arrived = 0;
  let open!: () => void;
  const gate = new Promise<void>((resolve) => (open = resolve));
  const timer = setTimeout(() => open(), timeoutMs);
  const restore = () => {
    clearTimeout(timer);
    open();
    (database as { scoped: Database['scoped'] }).scoped = original;
  };
  (database as { scoped: Database['scoped'] }).scoped = (scope: Scope) => {
    const db = original.call(database, scope);
    const wrapped: Db = Object.create(db);
    (wrapped as { transaction: Db['transaction'] }).transaction = async (fn) => {
      if (arrived < parties) {
        arrived++;
        if (arrived === parties) restore();
        await gate;
      }
      return db.transaction(fn);
    };
    return wrapped;
  };
  return { arrived: () => arrived, restore };
}

/** Log lines at error level or above, or naming a database error (SQLSTATE, syntax, relation). */
export function dbErrorLines(logs: LogLine[]): LogLine[] {
  return logs.filter((l) => l.level >= 50 || /syntax error|SQLSTATE|relation .* does not exist|invalid input syntax|database/i.test(JSON.stringify(l)));
}

export function assertStatus(res: InjectResponse, status: number): any {
  assert.equal(res.statusCode, status, `expected ${status}, got ${res.statusCode} ${res.body}`);
  return res.body ? res.json() : null;
}

/** The figure a catalog test reports, on its own line so runs can be compared. */
export function figure(id: string, text: string): void {
  console.log(`[${id}] ${text}`);
}
