// Helpers of the catalog tests that need more than support.ts offers: a captured-log app that also
// mounts test-only modules (IV-6 routes that fail on purpose).
import { Writable } from 'node:stream';
import { openTestDatabase, testConfig } from '../../helpers/app.js';
import { SystemClock } from '../../../src/clock.js';
import { boot } from '../../../src/boot.js';
import type { Config } from '../../../src/config.js';
import type { Module } from '../../../src/modules/types.js';
import type { CapturedApp, LogLine } from './support.js';

/** buildCapturedApp (warn level and above captured) with extra modules registered like real ones. */
export async function buildCapturedAppWith(extraModules: Module[], overrides: Partial<Config> = {}): Promise<CapturedApp> {
  const logs: LogLine[] = [];
  const stream = new Writable({
    write(chunk, _enc, done) {
      for (const line of String(chunk).split('\n').filter(Boolean)) logs.push(JSON.parse(line));
      done();
    },
  });
  const config = testConfig(overrides);
  const { database, schema, drop } = await openTestDatabase(null, { migrated: true });
  const clock = new SystemClock();
  const { app, deps } = await boot({ config, database, clock, logger: { level: 'warn', stream }, extraModules });
  await app.ready();
  const close = async () => {
    await app.close();
    await deps.jobs.stop();
    await database.close();
    await drop();
  };
  return { app, deps, clock, database, config, schema, close, logs };
}
