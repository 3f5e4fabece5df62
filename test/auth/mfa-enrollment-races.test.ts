// TOTP enrollment, confirm, disable and the support reset at once: with each other, with a second
// request of their own kind, with an admin's email change, a delete or a suspension. One at a time:
// mfa-enrollment.test.ts.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, pausedAfter, type TestApp } from '../helpers/app.js';
import { argon2Hashes } from '../security/core/argon2-probe.js';
import { bearer, createApiKey, createUser, login, uniqueEmail } from '../helpers/fixtures.js';
import {
  alignToStep, assertResetOfDeletedUser, beginTotp, auditRows, assertError, createMfaUser, mailsTo, mfaChallenge, otherCode, readMfaEnabled, sql, totpCode, verifyMfa,
} from './support.js';

let t: TestApp;
before(async () => {
  t = await buildTestApp();
});
after(() => t.close());

const verify = (body: object) => verifyMfa(t, body);
const mfaEnabled = (token: string) => readMfaEnabled(t, token);

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
  await assertResetOfDeletedUser(t, res, user);
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
