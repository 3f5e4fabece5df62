// What the Entitlement tests (test/access/entitlements-*.test.ts) share.
import assert from 'node:assert/strict';
import type { TestApp } from '../helpers/app.js';
import { entRow, grant, inSeconds, type AppFixture } from './support.js';

/**
 * expiredRow(userId, applicationId = the file's Application) for the file's test app, admin key and
 * Application, read when called (before() builds them).
 */
export function expiredRowOf(file: () => { t: TestApp; admin: string; app: AppFixture }) {
  /** An expired row: granted with a short term, then the clock passes ends_at and the sweep runs. */
  return async function expiredRow(userId: string, applicationId = file().app.id): Promise<any> {
    const { t, admin } = file();
    const ent = await grant(t, admin, userId, applicationId, { source: 'trial', ends_at: inSeconds(t, 60) });
    t.clock.advance(61);
    await t.deps.jobs.runNow('entitlement-expiry');
    assert.equal((await entRow(t, ent.id))!.status, 'expired');
    return ent;
  };
}
