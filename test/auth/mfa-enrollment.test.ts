// TOTP enrollment, confirm, disable and the support reset: state, notifications, audit, errors. The
// same requests at once: mfa-enrollment-races.test.ts. Signing in with a code or a recovery code:
// mfa-login.test.ts.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { bearer, createApiKey, createUser, login } from '../helpers/fixtures.js';
import { newId } from '../../src/ids.js';
import {
  alignToStep, assertAuthSession, assertResetOfDeletedUser, beginTotp, auditRows, assertError, assertFields, createMfaUser, loginRes, mailsTo, mfaChallenge, otherCode, readMfaEnabled, sql, totpCode, verifyMfa,
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
  assert.equal(deleted.statusCode, 204, deleted.body);
  const reset = await t.app.inject({ method: 'DELETE', url: `/v1/users/${user.id}/mfa/totp`, headers: bearer(admin.secret) });
  await assertResetOfDeletedUser(t, reset, user);
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
