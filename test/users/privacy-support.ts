// What the privacy tests (test/users/privacy-*.test.ts: export, erasure, test purge) share.
import type { TestApp } from '../helpers/app.js';
import { createApiKey, createUser, login, uniqueEmail, type TestUser } from '../helpers/fixtures.js';
import { createMfaUser, mfaChallenge, totpCode } from '../auth/support.js';
import { assertStatus, call, createApplication, createOrganization, grant, latestToken, sql } from './support.js';

/**
 * The calls and the fixture these files share, on the file's test app and superadmin (asAdmin needs
 * one), read when called (before() makes them).
 */
export function privacyCalls(file: () => { t: TestApp; adminUser?: TestUser }) {
  const asAdmin = () => login(file().t, file().adminUser!);
  const exportOf = (id: string, token: string) => call(file().t, 'GET', `/v1/users/${id}/export`, token);
  const requestErasure = (id: string, token: string, payload: object = {}) => call(file().t, 'POST', `/v1/users/${id}/erasure-requests`, token, payload);
  const count = async (table: string, where: string, params: unknown[]) =>
    (await sql<{ n: number }>(file().t, `SELECT count(*)::int AS n FROM ${table} WHERE ${where}`, params))[0].n;

  /**
   * A user holding something of every kind the export covers: a password identity with confirmed
   * TOTP, sessions with refresh tokens, an organization membership, an Application with an
   * entitlement, AppProfile and AppSettings overrides, a pending email change, audit history.
   */
  async function richUser() {
    const { t } = file();
    const mfa = await createMfaUser(t);
    const user = mfa.user;
    const verified = await call(t, 'POST', '/v1/auth/mfa/verify', null, { mfa_token: await mfaChallenge(t, user), code: await totpCode(t, mfa.secret) });
    const session = assertStatus(verified, 200);
    const app = await createApplication(t);
    const entitlementId = await grant(t, user.id, app.id);
    await sql(t, `INSERT INTO app_profiles (user_id, application_id, display_handle, custom, updated_at) VALUES ($1, $2, 'handle', '{"fav":"blue"}', now())`, [user.id, app.id]);
    await sql(t, `INSERT INTO app_settings (user_id, application_id, overrides, updated_at) VALUES ($1, $2, '{"dark":true}', now())`, [user.id, app.id]);
    const buddy = await createUser(t);
    const org = await createOrganization(t, [user.id, buddy.id]);
    const pendingEmail = uniqueEmail('pending');
    assertStatus(await call(t, 'PATCH', '/v1/users/me', session.access_token, { email: pendingEmail }), 200);
    const changeToken = await latestToken(t, pendingEmail, 'email_change_verification');
    const key = await createApiKey(t, { createdBy: user.id, permissions: [] });
    return { user, mfa, session, app, entitlementId, buddy, org, pendingEmail, changeToken, key };
  }

  return { asAdmin, exportOf, requestErasure, count, richUser };
}
