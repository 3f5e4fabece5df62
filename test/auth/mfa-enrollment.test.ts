// TOTP enrollment, confirm, disable and the support reset: state, notifications, audit, requests at
// once. Signing in with a code or a recovery code: mfa-login.test.ts.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, pausedAfter, type TestApp } from '../helpers/app.js';
import { argon2Hashes } from '../security/core/argon2-probe.js';
import { bearer, createApiKey, createUser, login, uniqueEmail } from '../helpers/fixtures.js';
import { newId } from '../../src/ids.js';
import {
  alignToStep, assertAuthSession, beginTotp, auditRows, assertError, assertFields, createMfaUser, loginRes, mailsTo, mfaChallenge, otherCode, readMfaEnabled, sql, totpCode, verifyMfa,
} from './support.js';

let t: TestApp;
before(async () => {
  t = await buildTestApp();
});
after(() => t.close());

const verify = (body: object) => verifyMfa(t, body);
const mfaEnabled = (token: string) => readMfaEnabled(t, token);

test('TOTP enrollment returns the otpauth URI and secret; confirming with the first code turns TOTP on and returns 10 single-use recovery codes, stored hashed', async () => {
  const user = await createUser(t);
  const token = await login(t, user);
  const begin = await t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp', headers: bearer(token) });
  assert.equal(begin.statusCode, 200, begin.body);
  const { secret, otpauth_uri } = begin.json();
  assert.match(secret, /^[A-Z2-7]{16,}=*$/);
  assert.ok(otpauth_uri.startsWith('otpauth://totp/'), otpauth_uri);
  const uri = new URL(otpauth_uri);
  assert.equal(uri.searchParams.get('secret'), secret);
  assert.ok(decodeURIComponent(otpauth_uri).includes(user.email), 'decodeURIComponent(otpauth_uri).includes(user.email)');
  assert.equal(await mfaEnabled(token), false, 'TOTP is on only after confirm');

  alignToStep(t, 5);
  const wrong = await t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp/confirm', headers: bearer(token), payload: { code: otherCode(await totpCode(t, secret)) } });
  assertError(wrong, 422, 'invalid_mfa_code');
  assert.equal(await mfaEnabled(token), false);

  const confirm = await t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp/confirm', headers: bearer(token), payload: { code: await totpCode(t, secret) } });
  assert.equal(confirm.statusCode, 200, confirm.body);
  const codes: string[] = confirm.json().recovery_codes;
  assert.equal(codes.length, 10);
  assert.equal(new Set(codes).size, 10);
  assert.equal(await mfaEnabled(token), true);

  const rows = await sql(t, 'SELECT code_hash, used_at FROM recovery_codes WHERE user_id = $1', [user.id]);
  assert.equal(rows.length, 10);
  for (const row of rows) {
    assert.equal(row.used_at, null);
    for (const code of codes) {
      assert.notEqual(row.code_hash, code);
      assert.ok(!row.code_hash.includes(code) && !row.code_hash.includes(code.replace(/-/g, '')), 'stored hashed');
    }
  }
  const [identity] = await sql(t, `SELECT totp_secret FROM identities WHERE user_id = $1 AND method = 'password'`, [user.id]);
  assert.ok(identity.totp_secret, 'the confirmed secret is kept for verification');
});

test('recovery codes are ten distinct codes of the form xxxxx-xxxxx (docs/decisions.md, MFA enrollment)', async () => {
  const { recoveryCodes } = await createMfaUser(t);
  assert.equal(recoveryCodes.length, 10);
  assert.equal(new Set(recoveryCodes).size, 10);
  for (const code of recoveryCodes) assert.match(code, /^[a-z0-9]{5}-[a-z0-9]{5}$/);
});

test('disable needs a current code or a recovery code: a wrong one gets 422 invalid_mfa_code; a right one turns TOTP off (204) and login no longer asks for MFA', async () => {
  const withCode = await createMfaUser(t);
  const disable = (token: string, payload: object) =>
    t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp/disable', headers: bearer(token), payload });
  assertError(await disable(withCode.token, { code: otherCode(await totpCode(t, withCode.secret)) }), 422, 'invalid_mfa_code');
  assertError(await disable(withCode.token, { recovery_code: 'zzzzz-zzzzz' }), 422, 'invalid_mfa_code');
  assert.equal(await mfaEnabled(withCode.token), true);
  const off = await disable(withCode.token, { code: await totpCode(t, withCode.secret) });
  assert.equal(off.statusCode, 204, off.body);
  assert.equal(await mfaEnabled(withCode.token), false);
  assert.equal((await sql(t, 'SELECT 1 FROM recovery_codes WHERE user_id = $1', [withCode.user.id])).length, 0);
  const plain = await loginRes(t, withCode.user);
  assert.equal(plain.statusCode, 200);
  assertAuthSession(plain.json(), withCode.user.id);

  const withRecovery = await createMfaUser(t);
  const off2 = await disable(withRecovery.token, { recovery_code: withRecovery.recoveryCodes[3] });
  assert.equal(off2.statusCode, 204, off2.body);
  assertAuthSession((await loginRes(t, withRecovery.user)).json(), withRecovery.user.id);
});

test('support reset DELETE /v1/users/{id}/mfa/totp with users.manage answers 204 and the user then logs in without MFA; without users.manage 403 forbidden', async () => {
  const { user, token } = await createMfaUser(t);
  const admin = await createUser(t, { roles: ['superadmin'] });
  const adminToken = await login(t, admin);
  const outsider = await login(t, await createUser(t));

  const denied = await t.app.inject({ method: 'DELETE', url: `/v1/users/${user.id}/mfa/totp`, headers: bearer(outsider) });
  assertError(denied, 403, 'forbidden');
  const self = await t.app.inject({ method: 'DELETE', url: '/v1/users/me/mfa/totp', headers: bearer(token) });
  assertError(self, 403, 'forbidden');
  assert.equal((await loginRes(t, user)).json().mfa_required, true);

  const reset = await t.app.inject({ method: 'DELETE', url: `/v1/users/${user.id}/mfa/totp`, headers: bearer(adminToken) });
  assert.equal(reset.statusCode, 204, reset.body);
  const res = await loginRes(t, user);
  assert.equal(res.statusCode, 200);
  assertAuthSession(res.json(), user.id);
  assert.equal(await mfaEnabled(res.json().access_token), false);
});

test('the support reset is for another user: a users.manage holder resetting their own TOTP (me or own id) gets 403 forbidden and TOTP stays on; another users.manage holder may reset it', async () => {
  const { user, token } = await createMfaUser(t, { roles: ['superadmin'] });
  for (const id of ['me', user.id]) {
    const own = await t.app.inject({ method: 'DELETE', url: `/v1/users/${id}/mfa/totp`, headers: bearer(token) });
    assertError(own, 403, 'forbidden');
  }
  assert.equal(await mfaEnabled(token), true);
  assert.equal((await loginRes(t, user)).json().mfa_required, true);
  assert.equal((await sql(t, `SELECT 1 FROM audit_events WHERE action = 'user.mfa_reset' AND target_user_id = $1`, [user.id])).length, 0);

  const other = await login(t, await createUser(t, { roles: ['superadmin'] }));
  const reset = await t.app.inject({ method: 'DELETE', url: `/v1/users/${user.id}/mfa/totp`, headers: bearer(other) });
  assert.equal(reset.statusCode, 204, reset.body);
  assert.equal(await mfaEnabled(token), false);
});

test('turning TOTP off notifies the account (ASVS 4.0.3 V2.2.3, a change of authentication details): disable with a code or a recovery code, and the support reset, each mail mfa_disabled; a wrong code, or a reset with nothing confirmed, mails nothing', async () => {
  const byCode = await createMfaUser(t);
  const wrong = await t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp/disable', headers: bearer(byCode.token), payload: { code: otherCode(await totpCode(t, byCode.secret)) } });
  assertError(wrong, 422, 'invalid_mfa_code');
  assert.deepEqual(await mailsTo(t, byCode.user.email, 'mfa_disabled'), []);
  const off = await t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp/disable', headers: bearer(byCode.token), payload: { code: await totpCode(t, byCode.secret) } });
  assert.equal(off.statusCode, 204, off.body);
  const [own] = await mailsTo(t, byCode.user.email, 'mfa_disabled');
  assert.ok(own, 'mfa_disabled mailed');
  assert.match(own.subject, /turned off/);
  assert.doesNotMatch(own.text_body, /token=/);
  assert.doesNotMatch(own.text_body, /administrator/i, 'the user turned it off: the notice does not say an administrator did');

  const byRecovery = await createMfaUser(t);
  const off2 = await t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp/disable', headers: bearer(byRecovery.token), payload: { recovery_code: byRecovery.recoveryCodes[0] } });
  assert.equal(off2.statusCode, 204, off2.body);
  const byRecoveryMails = await mailsTo(t, byRecovery.user.email, 'mfa_disabled');
  assert.equal(byRecoveryMails.length, 1);
  assert.doesNotMatch(byRecoveryMails[0].text_body, /administrator/i);

  const admin = await login(t, await createUser(t, { roles: ['superadmin'] }));
  const reset = await createMfaUser(t);
  assert.equal((await t.app.inject({ method: 'DELETE', url: `/v1/users/${reset.user.id}/mfa/totp`, headers: bearer(admin) })).statusCode, 204);
  const [support] = await mailsTo(t, reset.user.email, 'mfa_disabled');
  assert.ok(support, 'the support reset mails mfa_disabled');
  assert.match(support.text_body, /administrator/);

  const pending = await createUser(t);
  const pendingToken = await login(t, pending);
  assert.equal((await t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp', headers: bearer(pendingToken) })).statusCode, 200);
  assert.equal((await t.app.inject({ method: 'DELETE', url: `/v1/users/${pending.id}/mfa/totp`, headers: bearer(admin) })).statusCode, 204);
  assert.deepEqual(await mailsTo(t, pending.email, 'mfa_disabled'), [], 'an enrollment never confirmed protected nothing');
});

test('the support reset ends an enrollment begun and not confirmed too: the pending secret\'s code no longer confirms (409 mfa_not_enabled, TOTP stays off), audited user.mfa_reset, nothing mailed', async () => {
  const admin = await login(t, await createUser(t, { roles: ['superadmin'] }));
  const user = await createUser(t);
  const token = await login(t, user);
  const secret = await beginTotp(t, token);
  assert.equal((await t.app.inject({ method: 'DELETE', url: `/v1/users/${user.id}/mfa/totp`, headers: bearer(admin) })).statusCode, 204);
  alignToStep(t, 5);
  const confirm = await t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp/confirm', headers: bearer(token), payload: { code: await totpCode(t, secret) } });
  assertError(confirm, 409, 'mfa_not_enabled');
  assert.equal(await mfaEnabled(token), false);
  assert.equal((await auditRows(t, 'user.mfa_reset', user.id)).length, 1);
  assert.deepEqual(await mailsTo(t, user.email, 'mfa_disabled'), []);
  assert.deepEqual(await mailsTo(t, user.email, 'mfa_enabled'), []);
});

test('the support reset of a soft-deleted user\'s TOTP mails nothing (docs/decisions.md, MFA enrollment: "a reset … of a soft-deleted user, mails nothing"): 204, TOTP off and audited user.mfa_reset, no mfa_disabled mail', async () => {
  const admin = await createApiKey(t, { permissions: ['users.manage'] });
  const { user } = await createMfaUser(t);
  const deleted = await t.app.inject({ method: 'DELETE', url: `/v1/users/${user.id}`, headers: bearer(admin.secret) });
  assert.ok([200, 204].includes(deleted.statusCode), deleted.body);
  const reset = await t.app.inject({ method: 'DELETE', url: `/v1/users/${user.id}/mfa/totp`, headers: bearer(admin.secret) });
  assert.equal(reset.statusCode, 204, reset.body);
  const [identity] = await sql(t, `SELECT totp_confirmed_at FROM identities WHERE user_id = $1 AND method = 'password'`, [user.id]);
  assert.equal(identity.totp_confirmed_at, null, 'TOTP is off');
  assert.equal((await auditRows(t, 'user.mfa_reset', user.id)).length, 1);
  assert.deepEqual(await mailsTo(t, user.email, 'mfa_disabled'), [], 'no notice to a soft-deleted account');
});

test('turning TOTP on notifies the account too (ASVS 4.0.3 V2.2.3): a confirm mails mfa_enabled once, in its transaction; a begin, or a confirm with a wrong code, mails nothing', async () => {
  const user = await createUser(t);
  const token = await login(t, user);
  const secret = await beginTotp(t, token);
  alignToStep(t, 5);
  const code = await totpCode(t, secret);
  assertError(await t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp/confirm', headers: bearer(token), payload: { code: otherCode(code) } }), 422, 'invalid_mfa_code');
  assert.deepEqual(await mailsTo(t, user.email, 'mfa_enabled'), [], 'nothing is on yet');
  const confirm = await t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp/confirm', headers: bearer(token), payload: { code } });
  assert.equal(confirm.statusCode, 200, confirm.body);
  const mails = await mailsTo(t, user.email, 'mfa_enabled');
  assert.equal(mails.length, 1);
  assert.match(mails[0].subject, /turned on/);
  assert.match(mails[0].text_body, /If this was not you/);
  assert.doesNotMatch(mails[0].text_body, new RegExp(secret), 'the secret is never mailed');

  // In its transaction: a confirm whose last write (the audit row) fails mails nothing and turns nothing on.
  const failing = await createUser(t);
  const failingToken = await login(t, failing);
  const failingBegin = await t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp', headers: bearer(failingToken) });
  assert.equal(failingBegin.statusCode, 200, failingBegin.body);
  alignToStep(t, 5);
  await t.database.scoped('system').exec(`
    CREATE OR REPLACE FUNCTION mfa_test_fail_audit() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF NEW.action = 'user.mfa_enabled' AND NEW.target_user_id = '${failing.id}' THEN RAISE EXCEPTION 'injected audit failure'; END IF;
      RETURN NEW;
    END $$;
    CREATE TRIGGER mfa_test_fail_audit BEFORE INSERT ON audit_events FOR EACH ROW EXECUTE FUNCTION mfa_test_fail_audit();
  `);
  try {
    const refused = await t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp/confirm', headers: bearer(failingToken), payload: { code: await totpCode(t, failingBegin.json().secret) } });
    assertError(refused, 500, 'internal_error');
  } finally {
    await t.database.scoped('system').exec('DROP TRIGGER mfa_test_fail_audit ON audit_events; DROP FUNCTION mfa_test_fail_audit();');
  }
  assert.deepEqual(await mailsTo(t, failing.email, 'mfa_enabled'), [], 'no mfa_enabled mail for a confirm that did not commit');
  assert.equal(await mfaEnabled(failingToken), false);
});

test('MFA endpoints take me or the own id; another user id is not reachable (404 user_not_found)', async () => {
  const user = await createUser(t);
  const token = await login(t, user);
  const other = await createUser(t);
  const own = await t.app.inject({ method: 'POST', url: `/v1/users/${user.id}/mfa/totp`, headers: bearer(token) });
  assert.equal(own.statusCode, 200, own.body);
  assertError(await t.app.inject({ method: 'POST', url: `/v1/users/${other.id}/mfa/totp`, headers: bearer(token) }), 404, 'user_not_found');
  alignToStep(t, 5);
  const confirm = await t.app.inject({ method: 'POST', url: `/v1/users/me/mfa/totp/confirm`, headers: bearer(token), payload: { code: await totpCode(t, own.json().secret) } });
  assert.equal(confirm.statusCode, 200, confirm.body);
});

test('MFA bad input gets 422 validation_failed with details.fields naming the field', async () => {
  const { user, token, secret } = await createMfaUser(t);
  const mfaToken = await mfaChallenge(t, user);
  assertFields(await verify({}), ['mfa_token']);
  assertFields(await verify({ mfa_token: mfaToken, code: '12345' }), ['code']);
  assertFields(await verify({ mfa_token: mfaToken, code: 123456 }), ['code']);
  assertFields(await verify({ mfa_token: mfaToken, recovery_code: 5 }), ['recovery_code']);
  assertFields(await verify({ mfa_token: mfaToken, code: '123456', extra: 1 }), ['extra']);
  assertError(await verify({ mfa_token: mfaToken }), 422, 'validation_failed');
  assertError(await verify({ mfa_token: mfaToken, code: await totpCode(t, secret), recovery_code: 'aaaaa-aaaaa' }), 422, 'validation_failed');
  // Malformed requests do not use the challenge up.
  assert.equal((await verify({ mfa_token: mfaToken, code: await totpCode(t, secret) })).statusCode, 200);

  const call = (url: string, payload: object) => t.app.inject({ method: 'POST', url, headers: bearer(token), payload });
  assertFields(await call('/v1/users/me/mfa/totp/confirm', {}), ['code']);
  assertFields(await call('/v1/users/me/mfa/totp/confirm', { code: 'abcdef' }), ['code']);
  assertFields(await call('/v1/users/me/mfa/totp/disable', { code: '1234567' }), ['code']);
  assertError(await call('/v1/users/me/mfa/totp/disable', {}), 422, 'validation_failed');
});

test('an enrollment that was begun but not confirmed does not require MFA at login', async () => {
  const user = await createUser(t);
  const token = await login(t, user);
  assert.equal((await t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp', headers: bearer(token) })).statusCode, 200);
  const res = await loginRes(t, user);
  assert.equal(res.statusCode, 200);
  assertAuthSession(res.json(), user.id);
  assert.equal(await mfaEnabled(token), false);
});

test('MFA enrollment, confirm and disable are self-service only: a users.manage holder gets 403 forbidden on another user\'s, and nothing changes', async () => {
  const admin = await login(t, await createUser(t, { roles: ['superadmin'] }));
  const plain = await createUser(t);
  const enrolled = await createMfaUser(t);
  const call = (url: string, payload: object) => t.app.inject({ method: 'POST', url, headers: bearer(admin), payload });
  assertError(await call(`/v1/users/${plain.id}/mfa/totp`, {}), 403, 'forbidden');
  assertError(await call(`/v1/users/${plain.id}/mfa/totp/confirm`, { code: '123456' }), 403, 'forbidden');
  assertError(await call(`/v1/users/${enrolled.user.id}/mfa/totp/disable`, { code: await totpCode(t, enrolled.secret) }), 403, 'forbidden');
  const [identity] = await sql(t, `SELECT totp_pending_secret FROM identities WHERE user_id = $1 AND method = 'password'`, [plain.id]);
  assert.equal(identity.totp_pending_secret, null, 'no enrollment begun for the other user');
  assert.equal(await mfaEnabled(enrolled.token), true, 'TOTP stays on');
});

test('MFA enrollment state errors: begin or confirm with TOTP already on gets 409 mfa_already_enabled; confirm before begin and disable with TOTP off get 409 mfa_not_enabled', async () => {
  const enrolled = await createMfaUser(t);
  const as = (token: string) => (url: string, payload: object) => t.app.inject({ method: 'POST', url, headers: bearer(token), payload });
  const on = as(enrolled.token);
  assertError(await on('/v1/users/me/mfa/totp', {}), 409, 'mfa_already_enabled');
  assertError(await on('/v1/users/me/mfa/totp/confirm', { code: await totpCode(t, enrolled.secret) }), 409, 'mfa_already_enabled');
  assert.equal(await mfaEnabled(enrolled.token), true);
  assert.equal((await loginRes(t, enrolled.user)).json().mfa_required, true, 'the confirmed secret still applies');

  const fresh = as(await login(t, await createUser(t)));
  assertError(await fresh('/v1/users/me/mfa/totp/confirm', { code: '123456' }), 409, 'mfa_not_enabled');
  assertError(await fresh('/v1/users/me/mfa/totp/disable', { code: '123456' }), 409, 'mfa_not_enabled');
});

test('MFA enrollment needs a password sign-in (docs/decisions.md, MFA enrollment: 409 password_identity_required): a signed-in user whose only identity is SSO gets it at begin, confirm and disable, and no secret is stored', async () => {
  const user = await createUser(t);
  const token = await login(t, user);
  await sql(t, `INSERT INTO identities (id, user_id, method, created_at) VALUES ($1, $2, 'sso', $3)`, [newId('idn'), user.id, t.clock.now()]);
  await sql(t, `DELETE FROM identities WHERE user_id = $1 AND method = 'password'`, [user.id]);
  const call = (url: string, payload: object) => t.app.inject({ method: 'POST', url, headers: bearer(token), payload });
  assertError(await call('/v1/users/me/mfa/totp', {}), 409, 'password_identity_required');
  assertError(await call('/v1/users/me/mfa/totp/confirm', { code: '123456' }), 409, 'password_identity_required');
  assertError(await call('/v1/users/me/mfa/totp/disable', { code: '123456' }), 409, 'password_identity_required');
  assertError(await call('/v1/users/me/mfa/totp/disable', { recovery_code: 'abcde-fghij' }), 409, 'password_identity_required');
  const rows = await sql(t, 'SELECT method, totp_secret, totp_pending_secret FROM identities WHERE user_id = $1', [user.id]);
  assert.deepEqual(rows.map((r) => [r.method, r.totp_secret, r.totp_pending_secret]), [['sso', null, null]]);
});

test('disable takes a current code or a recovery code, not both: both at once get 422 validation_failed and TOTP stays on', async () => {
  const { token, secret, recoveryCodes } = await createMfaUser(t);
  const res = await t.app.inject({
    method: 'POST', url: '/v1/users/me/mfa/totp/disable', headers: bearer(token), payload: { code: await totpCode(t, secret), recovery_code: recoveryCodes[0] },
  });
  assertError(res, 422, 'validation_failed');
  assert.equal(await mfaEnabled(token), true);
});

test('MFA changes are audited on the user (docs/decisions.md): user.mfa_enabled at confirm and user.mfa_disabled at disable by the user, user.mfa_reset by the support admin', async () => {
  const trail = async (userId: string) =>
    (await sql(t, `SELECT action, actor_type, actor_id, target_type, target_id FROM audit_events WHERE target_user_id = $1 AND action LIKE 'user.mfa%' ORDER BY created_at, id`, [userId]))
      .map((r: any) => [r.action, r.actor_type, r.actor_id, r.target_type, r.target_id]);
  const self = await createMfaUser(t);
  assert.deepEqual(await trail(self.user.id), [['user.mfa_enabled', 'user', self.user.id, 'user', self.user.id]]);
  const off = await t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp/disable', headers: bearer(self.token), payload: { code: await totpCode(t, self.secret) } });
  assert.equal(off.statusCode, 204, off.body);
  assert.deepEqual((await trail(self.user.id)).map((r) => r[0]), ['user.mfa_enabled', 'user.mfa_disabled']);

  const reset = await createMfaUser(t);
  const admin = await createUser(t, { roles: ['superadmin'] });
  const res = await t.app.inject({ method: 'DELETE', url: `/v1/users/${reset.user.id}/mfa/totp`, headers: bearer(await login(t, admin)) });
  assert.equal(res.statusCode, 204, res.body);
  assert.deepEqual((await trail(reset.user.id)).at(-1), ['user.mfa_reset', 'user', admin.id, 'user', reset.user.id]);
});

// The identity is read before the transaction; a second request that read it before the first committed.
const IDENTITY_READ = "FROM identities WHERE user_id = $1 AND method = 'password'";

test('a support reset writes one user.mfa_reset per change: a second DELETE /v1/users/{id}/mfa/totp that read TOTP on before the first committed answers 204 with no second audit row and no second mfa_disabled mail', async () => {
  const { user } = await createMfaUser(t);
  const admin = await login(t, await createUser(t, { roles: ['superadmin'] }));
  const reset = () => t.app.inject({ method: 'DELETE', url: `/v1/users/${user.id}/mfa/totp`, headers: bearer(admin) });
  let first: Awaited<ReturnType<typeof reset>> | undefined;
  const second = await pausedAfter(t, IDENTITY_READ, async () => { first = await reset(); }, reset);
  assert.equal(first!.statusCode, 204, first!.body);
  assert.equal(second.statusCode, 204, second.body);
  const rows = await sql(t, `SELECT request_id FROM audit_events WHERE action = 'user.mfa_reset' AND target_user_id = $1`, [user.id]);
  assert.deepEqual(rows.map((r) => r.request_id), [first!.headers['request-id']]);
  assert.equal((await mailsTo(t, user.email, 'mfa_disabled')).length, 1);
});

test('a support reset of an enrollment confirmed after the reset read it pending mails mfa_disabled: the TOTP it turns off protected the account', async () => {
  const pending = await createUser(t);
  const token = await login(t, pending);
  const secret = await beginTotp(t, token);
  alignToStep(t, 5);
  const admin = await login(t, await createUser(t, { roles: ['superadmin'] }));
  const confirm = async () => {
    const res = await t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp/confirm', headers: bearer(token), payload: { code: await totpCode(t, secret) } });
    assert.equal(res.statusCode, 200, res.body);
  };
  const reset = await pausedAfter(t, IDENTITY_READ, confirm, () => t.app.inject({ method: 'DELETE', url: `/v1/users/${pending.id}/mfa/totp`, headers: bearer(admin) }));
  assert.equal(reset.statusCode, 204, reset.body);
  assert.equal(await mfaEnabled(token), false);
  assert.equal((await sql(t, `SELECT 1 FROM audit_events WHERE action = 'user.mfa_reset' AND target_user_id = $1`, [pending.id])).length, 1);
  assert.equal((await mailsTo(t, pending.email, 'mfa_disabled')).length, 1, 'the reset turned off a confirmed TOTP');
});

test('disable writes one user.mfa_disabled per change: the same code sent twice, the second read before the first committed, answers 409 mfa_not_enabled with no second audit row, no second mail and no lockout slot kept', async () => {
  const { user, token, secret } = await createMfaUser(t);
  const code = await totpCode(t, secret);
  const disable = () => t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp/disable', headers: bearer(token), payload: { code } });
  let first: Awaited<ReturnType<typeof disable>> | undefined;
  const second = await pausedAfter(t, IDENTITY_READ, async () => { first = await disable(); }, disable);
  assert.equal(first!.statusCode, 204, first!.body);
  assertError(second, 409, 'mfa_not_enabled');
  const rows = await sql(t, `SELECT request_id FROM audit_events WHERE action = 'user.mfa_disabled' AND target_user_id = $1`, [user.id]);
  assert.deepEqual(rows.map((r) => r.request_id), [first!.headers['request-id']]);
  assert.equal((await mailsTo(t, user.email, 'mfa_disabled')).length, 1);
  const [identity] = await sql(t, `SELECT cardinality(recent_failures) AS failures FROM identities WHERE user_id = $1 AND method = 'password'`, [user.id]);
  assert.equal(identity.failures, 0);
});

test('a confirm code is taken before the ten recovery codes are hashed (Argon2id each): of two confirms with one code, the second read before the first committed, only the first hashes; the second answers 409 mfa_already_enabled having hashed nothing', async () => {
  const user = await createUser(t);
  const token = await login(t, user);
  const secret = await beginTotp(t, token);
  alignToStep(t, 5);
  const code = await totpCode(t, secret);
  const confirm = () => t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp/confirm', headers: bearer(token), payload: { code } });
  let first: Awaited<ReturnType<typeof confirm>> | undefined;
  let second: Awaited<ReturnType<typeof confirm>> | undefined;
  const hashedBefore = argon2Hashes();
  second = await pausedAfter(t, IDENTITY_READ, async () => { first = await confirm(); }, confirm);
  const hashes = argon2Hashes() - hashedBefore;
  assert.equal(first!.statusCode, 200, first!.body);
  assert.equal(first!.json().recovery_codes.length, 10);
  assertError(second!, 409, 'mfa_already_enabled');
  assert.equal(hashes, 10, 'ten recovery codes hashed, once');
  assert.equal((await auditRows(t, 'user.mfa_enabled', user.id)).length, 1);
  assert.equal((await sql(t, 'SELECT 1 FROM recovery_codes WHERE user_id = $1', [user.id])).length, 10);
});

test('confirms sent at once with one code (a double-submitted form), none paused: one turns TOTP on and hashes the ten recovery codes; the others answer 409 mfa_already_enabled, not 422 invalid_mfa_code as if their right code were wrong', async () => {
  const user = await createUser(t);
  const token = await login(t, user);
  const secret = await beginTotp(t, token);
  alignToStep(t, 5);
  const code = await totpCode(t, secret);
  const confirm = () => t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp/confirm', headers: bearer(token), payload: { code } });
  const hashedBefore = argon2Hashes();
  const answers = await Promise.all([confirm(), confirm(), confirm()]);
  const won = answers.filter((res) => res.statusCode === 200);
  assert.equal(won.length, 1, answers.map((res) => `${res.statusCode} ${res.body}`).join('\n'));
  assert.equal(won[0].json().recovery_codes.length, 10);
  for (const res of answers.filter((r) => r !== won[0])) assertError(res, 409, 'mfa_already_enabled');
  assert.equal(argon2Hashes() - hashedBefore, 10, 'ten recovery codes hashed, once');
  assert.equal((await auditRows(t, 'user.mfa_enabled', user.id)).length, 1);
  assert.equal(await mfaEnabled(token), true);
});

test('a code spent by a confirm that did not complete is not accepted again at confirm: the step is taken once, as at sign-in (422 invalid_mfa_code), and a later code confirms', async () => {
  const user = await createUser(t);
  const token = await login(t, user);
  const begin = await t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp', headers: bearer(token) });
  const secret = begin.json().secret;
  alignToStep(t, 5);
  const code = await totpCode(t, secret);
  const confirm = (c: string) => t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp/confirm', headers: bearer(token), payload: { code: c } });
  // The step is taken, then the confirm fails before it commits (a fault after the code was checked).
  await sql(t, `UPDATE identities SET totp_last_step = $2 WHERE user_id = $1 AND method = 'password'`, [user.id, Math.floor(t.clock.now().getTime() / 30_000)]);
  assertError(await confirm(code), 422, 'invalid_mfa_code');
  assert.equal(await mfaEnabled(token), false);
  t.clock.advance(30);
  const ok = await confirm(await totpCode(t, secret));
  assert.equal(ok.statusCode, 200, ok.body);
  assert.equal(await mfaEnabled(token), true);
});

test('an enrollment begun again while pending restarts it: the first secret\'s code no longer confirms (422 invalid_mfa_code), the new one\'s does, even when a code of the first secret took a later step', async () => {
  const user = await createUser(t);
  const token = await login(t, user);
  const begin = () => t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp', headers: bearer(token) });
  const confirm = (code: string) => t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp/confirm', headers: bearer(token), payload: { code } });
  const firstSecret = (await begin()).json().secret;
  alignToStep(t, 5);
  await sql(t, `UPDATE identities SET totp_last_step = $2 WHERE user_id = $1 AND method = 'password'`, [user.id, Math.floor(t.clock.now().getTime() / 30_000) + 1]);
  const secondSecret = (await begin()).json().secret;
  assert.notEqual(secondSecret, firstSecret);
  assertError(await confirm(await totpCode(t, firstSecret)), 422, 'invalid_mfa_code');
  const ok = await confirm(await totpCode(t, secondSecret));
  assert.equal(ok.statusCode, 200, ok.body);
});

test('a confirm whose enrollment is begun again while its code is checked answers 422 invalid_mfa_code saying so (the code was right for the secret it read), and TOTP stays off until a code of the new secret confirms it', async () => {
  const user = await createUser(t);
  const token = await login(t, user);
  const firstSecret = await beginTotp(t, token);
  alignToStep(t, 5);
  let secondSecret = '';
  const beginAgain = async () => { secondSecret = await beginTotp(t, token); };
  const confirm = (code: string) => t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp/confirm', headers: bearer(token), payload: { code } });
  const code = await totpCode(t, firstSecret);
  const error = assertError(await pausedAfter(t, IDENTITY_READ, beginAgain, () => confirm(code)), 422, 'invalid_mfa_code');
  assert.match(error.message, /begun again or reset/);
  assert.equal(await mfaEnabled(token), false);
  const wrong = assertError(await confirm(otherCode(code)), 422, 'invalid_mfa_code');
  assert.equal(wrong.message, 'The code is not valid.', 'a wrong code keeps the plain message');
  t.clock.advance(30);
  const ok = await confirm(await totpCode(t, secondSecret));
  assert.equal(ok.statusCode, 200, ok.body);
});

test('an enrollment begun while a confirm commits answers 409 mfa_already_enabled, not a secret that could never be confirmed: the confirmed secret stays the one in use and no pending secret is left', async () => {
  const user = await createUser(t);
  const token = await login(t, user);
  const first = await t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp', headers: bearer(token) });
  const secret = first.json().secret;
  alignToStep(t, 5);
  const confirm = async () => {
    const res = await t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp/confirm', headers: bearer(token), payload: { code: await totpCode(t, secret) } });
    assert.equal(res.statusCode, 200, res.body);
  };
  const again = await pausedAfter(t, IDENTITY_READ, confirm, () => t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp', headers: bearer(token) }));
  assertError(again, 409, 'mfa_already_enabled');
  const [identity] = await sql(t, `SELECT totp_pending_secret, totp_confirmed_at FROM identities WHERE user_id = $1 AND method = 'password'`, [user.id]);
  assert.equal(identity.totp_pending_secret, null);
  assert.ok(identity.totp_confirmed_at);
  t.clock.advance(30);
  const signin = await verify({ mfa_token: await mfaChallenge(t, user), code: await totpCode(t, secret) });
  assert.equal(signin.statusCode, 200, signin.body);
});

test('the otpauth URI follows the Key URI format: otpauth://totp/<issuer>:<email>, the label percent-encoded so an address with +, /, & or = reads back whole; secret, issuer (the public URL\'s host name) and SHA1, 6 digits, 30 s (given or left to their defaults)', async () => {
  const email = `mfa+tag=1/x&y-${Math.random().toString(36).slice(2, 8)}@example.com`;
  const user = await createUser(t, { email });
  const begin = await t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp', headers: bearer(await login(t, user)) });
  assert.equal(begin.statusCode, 200, begin.body);
  const { secret, otpauth_uri } = begin.json();
  const issuer = new URL(t.config.publicUrl).hostname;
  const match = /^otpauth:\/\/totp\/([^?]*)\?(.*)$/.exec(otpauth_uri);
  assert.ok(match, otpauth_uri);
  const [, label, query] = match;
  assert.doesNotMatch(label, /[+/&=?#]/, 'reserved characters of the address are percent-encoded');
  assert.equal(decodeURIComponent(label), `${issuer}:${email}`);
  const params = new Map(query.split('&').map((p) => p.split('=').map(decodeURIComponent) as [string, string]));
  assert.equal(params.get('secret'), secret);
  assert.equal(params.get('issuer'), issuer);
  assert.ok([undefined, 'SHA1'].includes(params.get('algorithm')), `algorithm ${params.get('algorithm')}`);
  assert.ok([undefined, '6'].includes(params.get('digits')), `digits ${params.get('digits')}`);
  assert.ok([undefined, '30'].includes(params.get('period')), `period ${params.get('period')}`);
  assert.deepEqual([...params.keys()].filter((k) => !['secret', 'issuer', 'algorithm', 'digits', 'period'].includes(k)), []);
});

test('Part A: "users.manage changes email immediately": an admin email change committed while a confirm, a disable or a support reset was under way (after it read the account) moves its notice with it: mfa_enabled and mfa_disabled go to the address the account has when TOTP changes, nothing to the address it left', async () => {
  const admin = (await createApiKey(t, { permissions: ['users.manage'] })).secret;
  const changeEmail = (userId: string, email: string) => async () => {
    const res = await t.app.inject({ method: 'PATCH', url: `/v1/users/${userId}`, headers: bearer(admin), payload: { email } });
    assert.equal(res.statusCode, 200, res.body);
  };

  const enabling = await createUser(t);
  const token = await login(t, enabling);
  const secret = await beginTotp(t, token);
  alignToStep(t, 5);
  const code = await totpCode(t, secret);
  const enabledAt = uniqueEmail('mfa-on');
  const confirm = await pausedAfter(t, IDENTITY_READ, changeEmail(enabling.id, enabledAt), () =>
    t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp/confirm', headers: bearer(token), payload: { code } }));
  assert.equal(confirm.statusCode, 200, confirm.body);
  assert.deepEqual(await mailsTo(t, enabling.email, 'mfa_enabled'), [], 'confirm: nothing to the address the account left');
  assert.equal((await mailsTo(t, enabledAt, 'mfa_enabled')).length, 1, 'confirm: mfa_enabled to the address the account has');

  const disabling = await createMfaUser(t);
  const disabledAt = uniqueEmail('mfa-off');
  const offCode = await totpCode(t, disabling.secret);
  const off = await pausedAfter(t, IDENTITY_READ, changeEmail(disabling.user.id, disabledAt), () =>
    t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp/disable', headers: bearer(disabling.token), payload: { code: offCode } }));
  assert.equal(off.statusCode, 204, off.body);
  assert.deepEqual(await mailsTo(t, disabling.user.email, 'mfa_disabled'), [], 'disable: nothing to the address the account left');
  assert.equal((await mailsTo(t, disabledAt, 'mfa_disabled')).length, 1, 'disable: mfa_disabled to the address the account has');

  const reset = await createMfaUser(t);
  const resetAt = uniqueEmail('mfa-reset');
  const res = await pausedAfter(t, IDENTITY_READ, changeEmail(reset.user.id, resetAt), () =>
    t.app.inject({ method: 'DELETE', url: `/v1/users/${reset.user.id}/mfa/totp`, headers: bearer(admin) }));
  assert.equal(res.statusCode, 204, res.body);
  assert.deepEqual(await mailsTo(t, reset.user.email, 'mfa_disabled'), [], 'support reset: nothing to the address the account left');
  assert.equal((await mailsTo(t, resetAt, 'mfa_disabled')).length, 1, 'support reset: mfa_disabled to the address the account has');
});

test('docs/decisions.md, MFA enrollment: "a reset … of a soft-deleted user, mails nothing", also when the user was deleted while the reset was under way (after it read the account): 204, TOTP off, audited user.mfa_reset, no mfa_disabled mail', async () => {
  const admin = (await createApiKey(t, { permissions: ['users.manage'] })).secret;
  const { user } = await createMfaUser(t);
  const res = await pausedAfter(t, IDENTITY_READ, async () => {
    const deleted = await t.app.inject({ method: 'DELETE', url: `/v1/users/${user.id}`, headers: bearer(admin) });
    assert.equal(deleted.statusCode, 204, deleted.body);
  }, () => t.app.inject({ method: 'DELETE', url: `/v1/users/${user.id}/mfa/totp`, headers: bearer(admin) }));
  assert.equal(res.statusCode, 204, res.body);
  const [identity] = await sql(t, `SELECT totp_confirmed_at FROM identities WHERE user_id = $1 AND method = 'password'`, [user.id]);
  assert.equal(identity.totp_confirmed_at, null, 'TOTP is off');
  assert.equal((await auditRows(t, 'user.mfa_reset', user.id)).length, 1);
  assert.deepEqual(await mailsTo(t, user.email, 'mfa_disabled'), [], 'no notice to a soft-deleted account');
});

test('Part A: delete and suspend revoke all sessions: a confirm or a disable whose session a delete or a suspension ended while it ran (after it read the account) answers 401 unauthenticated and changes nothing, as a password change does: TOTP stays as it was, no mfa_enabled or mfa_disabled mail to the ended account, no lockout failure kept', async () => {
  const admin = (await createApiKey(t, { permissions: ['users.manage'] })).secret;

  const enabling = await createUser(t);
  const token = await login(t, enabling);
  const secret = await beginTotp(t, token);
  alignToStep(t, 5);
  const code = await totpCode(t, secret);
  const confirm = await pausedAfter(t, IDENTITY_READ, async () => {
    const deleted = await t.app.inject({ method: 'DELETE', url: `/v1/users/${enabling.id}`, headers: bearer(admin) });
    assert.equal(deleted.statusCode, 204, deleted.body);
  }, () => t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp/confirm', headers: bearer(token), payload: { code } }));
  assertError(confirm, 401, 'unauthenticated');
  const [pending] = await sql(t, `SELECT totp_confirmed_at FROM identities WHERE user_id = $1 AND method = 'password'`, [enabling.id]);
  assert.equal(pending.totp_confirmed_at, null, 'TOTP stays off');
  assert.deepEqual(await mailsTo(t, enabling.email, 'mfa_enabled'), [], 'no mfa_enabled to a deleted account');
  assert.deepEqual(await auditRows(t, 'user.mfa_enabled', enabling.id), []);

  const disabling = await createMfaUser(t);
  const offCode = await totpCode(t, disabling.secret);
  const off = await pausedAfter(t, IDENTITY_READ, async () => {
    const suspended = await t.app.inject({ method: 'POST', url: `/v1/users/${disabling.user.id}/suspend`, headers: bearer(admin), payload: {} });
    assert.equal(suspended.statusCode, 200, suspended.body);
  }, () => t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp/disable', headers: bearer(disabling.token), payload: { code: offCode } }));
  assertError(off, 401, 'unauthenticated');
  const [on] = await sql(t, `SELECT totp_confirmed_at, cardinality(recent_failures) AS failures FROM identities WHERE user_id = $1 AND method = 'password'`, [disabling.user.id]);
  assert.ok(on.totp_confirmed_at, 'TOTP stays on');
  assert.equal(on.failures, 0, 'a request whose session ended is no failed attempt');
  assert.deepEqual(await mailsTo(t, disabling.user.email, 'mfa_disabled'), [], 'no mfa_disabled to a suspended account');
  assert.deepEqual(await auditRows(t, 'user.mfa_disabled', disabling.user.id), []);
});
