import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, withStoppedClock, type TestApp } from '../helpers/app.js';
import { bearer, createUser, PASSWORD, uniqueEmail } from '../helpers/fixtures.js';
import {
  alignToWindow, assertAuthSession, assertError, assertFields, auditRows, createApplication, get, jwtPayload, latestToken, linkToken, mailsTo, post, sql,
} from './support.js';

let t: TestApp;
before(async () => {
  t = await buildTestApp();
});
after(() => t.close());

const signup = (body: object) => post(t, '/v1/auth/signup', body);

async function userRowsFor(email: string) {
  return sql<{ id: string; status: string; email_verified: boolean; test_mode: boolean; signup_application_id: string | null }>(
    t,
    'SELECT id, status, email_verified, test_mode, signup_application_id FROM users WHERE lower(email) = lower($1) ORDER BY created_at',
    [email],
  );
}

test('signup creates the User (active, email_verified false), a password identity, Profile with display_name, Settings and the member Role, and answers 201 AuthSession', async () => {
  const email = uniqueEmail('signup');
  const res = await signup({ email, password: PASSWORD, display_name: 'Ada Lovelace' });
  assert.equal(res.statusCode, 201, res.body);
  const session = res.json();
  assertAuthSession(session);
  assert.equal(session.email_verified, false);
  const userId = session.user_id;

  const me = await get(t, '/v1/users/me', session.access_token);
  assert.equal(me.statusCode, 200, me.body);
  assert.equal(me.json().id, userId);
  assert.equal(me.json().email, email);
  assert.equal(me.json().status, 'active');
  assert.equal(me.json().email_verified, false);
  assert.equal(me.json().mfa_enabled, false);
  assert.equal(me.json().signup_application_id, null);
  assert.equal(me.json().test_mode, false);

  const identities = await sql(t, 'SELECT method, password_hash FROM identities WHERE user_id = $1', [userId]);
  assert.equal(identities.length, 1);
  assert.equal(identities[0].method, 'password');
  const profiles = await sql(t, 'SELECT display_name FROM profiles WHERE user_id = $1', [userId]);
  assert.deepEqual(profiles.map((p) => p.display_name), ['Ada Lovelace']);
  assert.equal((await sql(t, 'SELECT 1 FROM settings WHERE user_id = $1', [userId])).length, 1);
  const roles = await sql(t, 'SELECT role_id FROM role_assignments WHERE user_id = $1', [userId]);
  assert.deepEqual(roles.map((r) => r.role_id), ['role_platform_member']);
  const sessions = await sql(t, 'SELECT id, amr, revoked_at FROM sessions WHERE user_id = $1', [userId]);
  assert.equal(sessions.length, 1);
  assert.equal(sessions[0].id, session.session_id);
  assert.deepEqual(sessions[0].amr, ['pwd']);
  assert.equal(sessions[0].revoked_at, null);
});

test('signup without display_name still creates a Profile with a non-empty display_name', async () => {
  const email = uniqueEmail('noname');
  const res = await signup({ email, password: PASSWORD });
  assert.equal(res.statusCode, 201, res.body);
  const profiles = await sql(t, 'SELECT display_name FROM profiles WHERE user_id = $1', [res.json().user_id]);
  assert.equal(profiles.length, 1);
  assert.ok(profiles[0].display_name.length >= 1 && profiles[0].display_name.length <= 100, 'profiles[0].display_name.length >= 1 && profiles[0].display_name.length <= 100');
});

test('the password hash is Argon2id with memory 19456 KiB, iterations 2, parallelism 1', async () => {
  const res = await signup({ email: uniqueEmail('argon'), password: PASSWORD });
  assert.equal(res.statusCode, 201, res.body);
  const [identity] = await sql(t, `SELECT password_hash FROM identities WHERE user_id = $1 AND method = 'password'`, [res.json().user_id]);
  assert.ok(identity.password_hash.startsWith('$argon2id$v=19$m=19456,t=2,p=1$'), identity.password_hash);
  assert.ok(!identity.password_hash.includes(PASSWORD), '!identity.password_hash.includes(PASSWORD)');
});

test('signup sends the verification email with a token= link, and an unverified user can log in', async () => {
  const email = uniqueEmail('verify');
  const res = await signup({ email, password: PASSWORD });
  assert.equal(res.statusCode, 201, res.body);
  const mails = await mailsTo(t, email);
  assert.equal(mails.length, 1);
  assert.equal(mails[0].template, 'email_verification');
  assert.equal(mails[0].to_address, email);
  assert.match(mails[0].text_body, /\/verify-email\?token=/);
  linkToken(mails[0]);

  const login = await post(t, '/v1/auth/login', { email, password: PASSWORD });
  assert.equal(login.statusCode, 200, login.body);
  assertAuthSession(login.json(), res.json().user_id);
  assert.equal(login.json().email_verified, false);
});

test('Platform access token claims "email_verified: boolean" carry the account\'s state, false too: an unverified user\'s access tokens from signup, login and token/refresh say false; after email/verify the next login and refresh say true', async () => {
  const email = uniqueEmail('claim');
  const res = await signup({ email, password: PASSWORD });
  assert.equal(res.statusCode, 201, res.body);
  assert.equal(res.json().email_verified, false);
  assert.equal(jwtPayload(res.json().access_token).email_verified, false, 'signup');
  const login = await post(t, '/v1/auth/login', { email, password: PASSWORD });
  assert.equal(login.statusCode, 200, login.body);
  assert.equal(jwtPayload(login.json().access_token).email_verified, false, 'login');
  const refreshed = await post(t, '/v1/auth/token/refresh', { refresh_token: login.json().refresh_token });
  assert.equal(refreshed.statusCode, 200, refreshed.body);
  assert.equal(refreshed.json().email_verified, false);
  assert.equal(jwtPayload(refreshed.json().access_token).email_verified, false, 'token/refresh');

  assert.equal((await post(t, '/v1/auth/email/verify', { token: await latestToken(t, email, 'email_verification') })).statusCode, 204);
  const verified = await post(t, '/v1/auth/login', { email, password: PASSWORD });
  assert.equal(verified.json().email_verified, true);
  assert.equal(jwtPayload(verified.json().access_token).email_verified, true, 'login after email/verify');
  const next = await post(t, '/v1/auth/token/refresh', { refresh_token: refreshed.json().refresh_token });
  assert.equal(next.statusCode, 200, next.body);
  assert.equal(jwtPayload(next.json().access_token).email_verified, true, 'token/refresh after email/verify');
});

test('README SMTP_URL unset: "mails stay in the emails table with their links (text_body)": the documented SELECT to_address, subject, text_body FROM emails ORDER BY created_at DESC shows the signup\'s verification link, whose token verifies the address', async () => {
  const email = uniqueEmail('readme-outbox');
  const res = await signup({ email, password: PASSWORD });
  assert.equal(res.statusCode, 201, res.body);
  const rows = await sql<{ to_address: string; subject: string; text_body: string }>(t, 'SELECT to_address, subject, text_body FROM emails ORDER BY created_at DESC');
  const mail = rows.find((row) => row.to_address === email);
  assert.ok(mail, 'the mail is listed');
  assert.equal(mail.subject, 'Verify your email address');
  const link = /(\S+\/verify-email\?token=\S+)/.exec(mail.text_body);
  assert.ok(link, mail.text_body);
  const verify = await post(t, '/v1/auth/email/verify', { token: new URL(link[1]).searchParams.get('token') });
  assert.equal(verify.statusCode, 204, verify.body);
  const me = await get(t, '/v1/users/me', res.json().access_token);
  assert.equal(me.json().email_verified, true);
});

test('signup writes audit user.created with actor_type user and actor_id the new user, for the signup request', async () => {
  const email = uniqueEmail('audit');
  const res = await signup({ email, password: PASSWORD });
  assert.equal(res.statusCode, 201, res.body);
  const userId = res.json().user_id;
  const rows = await auditRows(t, 'user.created', userId);
  assert.equal(rows.length, 1);
  assert.equal(rows[0].actor_type, 'user');
  assert.equal(rows[0].actor_id, userId);
  assert.equal(rows[0].target_type, 'user');
  assert.equal(rows[0].target_id, userId);
  assert.equal(rows[0].test_mode, false);
  assert.equal(rows[0].request_id, res.headers['request-id']);
  const [user] = await sql(t, 'SELECT created_at FROM users WHERE id = $1', [userId]);
  assert.equal(rows[0].created_at.getTime(), user.created_at.getTime(), 'written at the same instant as the user');
});

test('signup is one transaction: when its last write (the verification mail) fails, no User, identity, Profile, Settings, Role, session or audit row remains', async () => {
  await t.database.scoped('system').exec(`
    CREATE OR REPLACE FUNCTION auth_test_fail_mail() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF NEW.to_address LIKE 'txfail-%' THEN RAISE EXCEPTION 'injected mail failure'; END IF;
      RETURN NEW;
    END $$;
    CREATE TRIGGER auth_test_fail_mail BEFORE INSERT ON emails FOR EACH ROW EXECUTE FUNCTION auth_test_fail_mail();
  `);
  const email = uniqueEmail('txfail');
  try {
    const res = await signup({ email, password: PASSWORD, display_name: 'Rolled Back' });
    assertError(res, 500, 'internal_error');
  } finally {
    await t.database.scoped('system').exec('DROP TRIGGER auth_test_fail_mail ON emails; DROP FUNCTION auth_test_fail_mail();');
  }
  assert.deepEqual(await userRowsFor(email), []);
  assert.deepEqual(await sql(t, `SELECT user_id FROM profiles WHERE display_name = 'Rolled Back'`), []);
  assert.deepEqual(await sql(t, 'SELECT 1 FROM identities i LEFT JOIN users u ON u.id = i.user_id WHERE u.id IS NULL'), []);
  assert.deepEqual(await sql(t, 'SELECT 1 FROM settings s LEFT JOIN users u ON u.id = s.user_id WHERE u.id IS NULL'), []);
  assert.deepEqual(await sql(t, 'SELECT 1 FROM role_assignments r LEFT JOIN users u ON u.id = r.user_id WHERE u.id IS NULL'), []);
  assert.deepEqual(await sql(t, `SELECT 1 FROM audit_events a LEFT JOIN users u ON u.id = a.target_user_id WHERE a.action = 'user.created' AND u.id IS NULL`), []);
  // The address is still free: the failed attempt left nothing behind.
  const retry = await signup({ email, password: PASSWORD });
  assert.equal(retry.statusCode, 201, retry.body);
});

test("signup application_id grants nothing: it is stored as signup_application_id and brands the verification email with the application's email_from_name", async () => {
  const appId = await createApplication(t, { slug: 'acme-notes', emailFromName: 'Acme Notes' });
  const email = uniqueEmail('branded');
  const res = await signup({ email, password: PASSWORD, application_id: appId });
  assert.equal(res.statusCode, 201, res.body);
  const userId = res.json().user_id;
  const me = await get(t, '/v1/users/me', res.json().access_token);
  assert.equal(me.json().signup_application_id, appId);
  const roles = await sql(t, 'SELECT role_id, application_id FROM role_assignments WHERE user_id = $1', [userId]);
  assert.deepEqual(roles.map((r) => r.role_id), ['role_platform_member'], 'no application role or grant');
  const [mail] = await mailsTo(t, email, 'email_verification');
  assert.equal(mail.from_name, 'Acme Notes');
  assert.match(mail.text_body, /Acme Notes/);
  linkToken(mail);

  // Without application_id the mail is not branded.
  const plain = uniqueEmail('plain');
  assert.equal((await signup({ email: plain, password: PASSWORD })).statusCode, 201);
  const [plainMail] = await mailsTo(t, plain, 'email_verification');
  assert.equal(plainMail.from_name, null);
  assert.doesNotMatch(plainMail.text_body, /Acme Notes/);

  // A re-sent verification mail carries the same branding.
  assert.equal((await post(t, '/v1/auth/email/verify/resend', { email })).statusCode, 202);
  const mails = await mailsTo(t, email, 'email_verification');
  assert.equal(mails.length, 2);
  assert.equal(mails[1].from_name, 'Acme Notes');
  assert.match(mails[1].text_body, /Acme Notes/);
});

test('signup application_id in test mode (convention 10: "Applications are shared catalog rows visible to both modes"): a test-mode signup through an Application is stored as its signup_application_id and its verification mail is branded, as in live mode', async () => {
  const appId = await createApplication(t, { slug: 'acme-testmode', emailFromName: 'Acme Test Mode' });
  const email = uniqueEmail('branded-test');
  const res = await signup({ email, password: PASSWORD, application_id: appId, test_mode: true });
  assert.equal(res.statusCode, 201, res.body);
  assert.equal(jwtPayload(res.json().access_token).test_mode, true);
  const me = await get(t, '/v1/users/me', res.json().access_token);
  assert.equal(me.json().signup_application_id, appId);
  const [mail] = await mailsTo(t, email, 'email_verification');
  assert.equal(mail.from_name, 'Acme Test Mode');
});

test('only an approved Application brands the verification email: signup through a pending, rejected or suspended one succeeds (application_id is informational) with an unbranded mail', async () => {
  for (const status of ['pending', 'rejected', 'suspended']) {
    const appId = await createApplication(t, { slug: `brand-${status}`, emailFromName: `Brand ${status}` });
    await sql(t, 'UPDATE applications SET review_status = $2 WHERE id = $1', [appId, status]);
    const email = uniqueEmail(`brand${status}`);
    const res = await signup({ email, password: PASSWORD, application_id: appId });
    assert.equal(res.statusCode, 201, res.body);
    const [mail] = await mailsTo(t, email, 'email_verification');
    assert.equal(mail.from_name, null, status);
    assert.doesNotMatch(`${mail.subject}\n${mail.text_body}`, /Brand/, status);
    // Once approved, a re-sent mail is branded.
    await sql(t, `UPDATE applications SET review_status = 'approved' WHERE id = $1`, [appId]);
    assert.equal((await post(t, '/v1/auth/email/verify/resend', { email })).statusCode, 202);
    assert.equal((await mailsTo(t, email, 'email_verification'))[1].from_name, `Brand ${status}`, status);
  }
});

test("the verification email's sender is always the service's address: an email_from_name that reads as an address is shown without its <, >, @ and quotes", async () => {
  const appId = await createApplication(t, { slug: 'spoof-name', emailFromName: 'Acme "Support" <help@evil.example>' });
  const email = uniqueEmail('spoofname');
  assert.equal((await signup({ email, password: PASSWORD, application_id: appId })).statusCode, 201);
  const [mail] = await mailsTo(t, email, 'email_verification');
  assert.equal(mail.from_name, 'Acme Support help evil.example');
  assert.doesNotMatch(mail.subject, /[<>@"]/);
});

test("an email_from_name written as an RFC 2047 encoded word is not sent as one: mail clients would decode it into a name that reads as an address", async () => {
  // "=?utf-8?b?…?=" holds none of <, >, @ or quotes, but decodes to "Acme <help@evil.example>", and
  // the relay sends an ASCII name as is (nodemailer only quotes it), so clients that decode encoded
  // words in the From name would show another sender.
  const encoded = `=?utf-8?b?${Buffer.from('Acme <help@evil.example>').toString('base64')}?=`;
  const appId = await createApplication(t, { slug: 'encoded-name', emailFromName: encoded });
  const email = uniqueEmail('encodedname');
  assert.equal((await signup({ email, password: PASSWORD, application_id: appId })).statusCode, 201);
  const [mail] = await mailsTo(t, email, 'email_verification');
  assert.ok(mail.from_name, 'the mail is still branded');
  assert.doesNotMatch(mail.from_name, /=\?/, mail.from_name);
  assert.doesNotMatch(mail.subject, /=\?/, mail.subject);
  assert.doesNotMatch(mail.text_body, /=\?utf-8/, mail.text_body);
});

test("an email_from_name with fullwidth or small look-alikes of < > @ or a right-to-left override is not sent as one: they read as the characters the sender name leaves out", async () => {
  const appId = await createApplication(t, { slug: 'lookalike-name', emailFromName: 'Acme \uFF1Chelp\uFF20evil.example\uFE65 \u202Egnp.exe' });
  const email = uniqueEmail('lookalike');
  assert.equal((await signup({ email, password: PASSWORD, application_id: appId })).statusCode, 201);
  const [mail] = await mailsTo(t, email, 'email_verification');
  assert.equal(mail.from_name, 'Acme help evil.example gnp.exe');
});

test('signup with an unknown application_id gets 422 validation_failed naming application_id and creates nothing', async () => {
  const email = uniqueEmail('unknownapp');
  const res = await signup({ email, password: PASSWORD, application_id: 'app_does-not-exist' });
  assertFields(res, ['application_id']);
  assert.deepEqual(await userRowsFor(email), []);
  assert.deepEqual(await mailsTo(t, email), []);
});

test('email is unique per mode among non-deleted users: 409 email_taken (case-insensitively); the other mode and a soft-deleted holder do not block it', async () => {
  const email = uniqueEmail('unique');
  const first = await signup({ email, password: PASSWORD });
  assert.equal(first.statusCode, 201, first.body);
  const again = await signup({ email: email.toUpperCase(), password: PASSWORD });
  assertError(again, 409, 'email_taken');
  assert.equal(again.json().error.details.reason, undefined, 'invitation_pending only for an invited holder');

  const testMode = await signup({ email, password: PASSWORD, test_mode: true });
  assert.equal(testMode.statusCode, 201, testMode.body);
  assert.equal(jwtPayload(testMode.json().access_token).test_mode, true);
  assertError(await signup({ email, password: PASSWORD, test_mode: true }), 409, 'email_taken');

  const suspended = await createUser(t, { status: 'suspended' });
  assertError(await signup({ email: suspended.email, password: PASSWORD }), 409, 'email_taken');

  await sql(t, `UPDATE users SET status = 'deleted', deleted_at = now() WHERE id = $1`, [first.json().user_id]);
  const reuse = await signup({ email, password: PASSWORD });
  assert.equal(reuse.statusCode, 201, reuse.body);
  assert.notEqual(reuse.json().user_id, first.json().user_id);
  const rows = await userRowsFor(email);
  assert.deepEqual(rows.map((r) => [r.status, r.test_mode]).sort(), [['active', false], ['active', true], ['deleted', false]].sort());
});

test("signup with an invited user's email gets 409 email_taken with details.reason invitation_pending, re-sends the invitation and does not activate the user", async () => {
  const invited = await createUser(t, { status: 'invited' });
  const res = await signup({ email: invited.email, password: PASSWORD, display_name: 'Someone' });
  const error = assertError(res, 409, 'email_taken');
  assert.equal(error.details.reason, 'invitation_pending');
  const mails = await mailsTo(t, invited.email);
  assert.deepEqual(mails.map((m) => m.template), ['invitation']);
  assert.match(mails[0].text_body, /\/accept-invitation\?token=/);
  const [row] = await userRowsFor(invited.email);
  assert.equal(row.id, invited.id);
  assert.equal(row.status, 'invited');
  assert.deepEqual(await sql(t, 'SELECT 1 FROM identities WHERE user_id = $1', [invited.id]), [], 'no password was set');
  assert.equal((await userRowsFor(invited.email)).length, 1);

  // The invitation completes only through invitations/accept, with the mailed token.
  const accepted = await post(t, '/v1/auth/invitations/accept', { token: linkToken(mails[0]), password: PASSWORD });
  assert.equal(accepted.statusCode, 200, accepted.body);
  assertAuthSession(accepted.json(), invited.id);
});

test('invitation re-sends from signup count in the 3-per-email-per-hour limit shared with verification resend: the 4th attempt in the hour sends no mail', async () => {
  alignToWindow(t, 3600, 60);
  const invited = await createUser(t, { status: 'invited' });
  const resend = await post(t, '/v1/auth/email/verify/resend', { email: invited.email });
  assert.equal(resend.statusCode, 202);
  for (let i = 0; i < 2; i++) assert.equal(assertError(await signup({ email: invited.email, password: PASSWORD }), 409, 'email_taken').details.reason, 'invitation_pending');
  assert.equal((await mailsTo(t, invited.email, 'invitation')).length, 3);

  t.clock.advance(600);
  const fourth = await signup({ email: invited.email, password: PASSWORD });
  assert.equal(assertError(fourth, 409, 'email_taken').details.reason, 'invitation_pending');
  assert.equal((await mailsTo(t, invited.email, 'invitation')).length, 3, 'the 4th re-send in the hour sends no mail');
  assert.equal((await post(t, '/v1/auth/email/verify/resend', { email: invited.email })).statusCode, 202);
  assert.equal((await mailsTo(t, invited.email, 'invitation')).length, 3);

  // An hour later re-sends are allowed again.
  t.clock.advance(3600);
  assertError(await signup({ email: invited.email, password: PASSWORD }), 409, 'email_taken');
  assert.equal((await mailsTo(t, invited.email, 'invitation')).length, 4);
  // Only the newest invitation link is needed; it works.
  const accepted = await post(t, '/v1/auth/invitations/accept', { token: await latestToken(t, invited.email, 'invitation'), password: PASSWORD });
  assert.equal(accepted.statusCode, 200, accepted.body);
});

test('the re-send limit is 3 per email per hour even across a clock-hour boundary: 3 re-sends at 00:55 and one at 01:05 send 3 mails', async () => {
  alignToWindow(t, 3600, 3300); // hh:55
  const invited = await createUser(t, { status: 'invited' });
  for (let i = 0; i < 3; i++) assertError(await signup({ email: invited.email, password: PASSWORD }), 409, 'email_taken');
  assert.equal((await mailsTo(t, invited.email, 'invitation')).length, 3);
  t.clock.advance(600); // hh+1:05, ten minutes later
  assertError(await signup({ email: invited.email, password: PASSWORD }), 409, 'email_taken');
  assert.equal((await mailsTo(t, invited.email, 'invitation')).length, 3, 'a 4th invitation mail within one hour');
});

test('a signup\'s verification mail is counted too, 3 per address per hour: signing up, deleting the account and signing up again mails an address at most 3 times an hour; the 4th signup gets 429 rate_limited with Retry-After and creates nothing', async () => {
  const email = uniqueEmail('loop');
  await withStoppedClock(t, async () => {
    for (let i = 0; i < 3; i++) {
      const res = await signup({ email, password: PASSWORD });
      assert.equal(res.statusCode, 201, res.body);
      const deleted = await t.app.inject({ method: 'DELETE', url: '/v1/users/me', headers: bearer(res.json().access_token) });
      assert.equal(deleted.statusCode, 204, deleted.body);
      t.clock.advance(600);
    }
    const refused = await signup({ email, password: PASSWORD });
    assertError(refused, 429, 'rate_limited');
    assert.equal(refused.headers['retry-after'], String(3600 - 1800), 'the first signup leaves the hour in 30 minutes');
    assert.equal((await mailsTo(t, email, 'email_verification')).length, 3);
    assert.deepEqual((await userRowsFor(email)).map((r) => r.status), ['deleted', 'deleted', 'deleted']);
    // The other mode is another address; an hour after the first signup the address may sign up again.
    assert.equal((await signup({ email, password: PASSWORD, test_mode: true })).statusCode, 201);
    t.clock.advance(1800);
    assert.equal((await signup({ email, password: PASSWORD })).statusCode, 201);
    assert.equal((await mailsTo(t, email, 'email_verification')).length, 5);
  });
});

test('password policy: fewer than 12 characters gets 422 weak_password with details.reason too_short; exactly 12 is accepted', async () => {
  for (const password of ['short-pw-11', '𝒜'.repeat(11), '']) {
    const email = uniqueEmail('short');
    const res = await signup({ email, password });
    assert.equal(assertError(res, 422, 'weak_password').details.reason, 'too_short', password);
    assert.deepEqual(await userRowsFor(email), []);
  }
  const ok = await signup({ email: uniqueEmail('twelve'), password: 'tw3lve-chars' });
  assert.equal(ok.statusCode, 201, ok.body);
});

test('AU-1 password policy: a password of blanks only (12 to 128 spaces, tabs or other white space) is 422 weak_password too_short; blanks inside a password count as characters', async () => {
  for (const password of [' '.repeat(12), ' '.repeat(128), '\t'.repeat(20), '\u3000'.repeat(12), ' \t\n '.repeat(4)]) {
    const email = uniqueEmail('blank');
    const res = await signup({ email, password });
    assert.equal(assertError(res, 422, 'weak_password').details.reason, 'too_short', JSON.stringify(password));
    assert.deepEqual(await userRowsFor(email), []);
  }
  const ok = await signup({ email: uniqueEmail('spaced'), password: '          a ' }); // 12 with one letter
  assert.equal(ok.statusCode, 201, ok.body);
});

test('password policy: more than 128 characters gets 422 weak_password with details.reason too_long; exactly 128 is accepted', async () => {
  const email = uniqueEmail('long');
  for (const password of ['x7-'.repeat(43), 'x7-'.repeat(2000)]) { // 129, and far out of range
    const res = await signup({ email, password });
    assert.equal(assertError(res, 422, 'weak_password').details.reason, 'too_long');
  }
  assert.deepEqual(await userRowsFor(email), []);
  const ok = await signup({ email: uniqueEmail('onetwentyeight'), password: 'x7-'.repeat(42) + 'ab' }); // 128
  assert.equal(ok.statusCode, 201, ok.body);
  const login = await post(t, '/v1/auth/login', { email: (await sql(t, 'SELECT email FROM users WHERE id = $1', [ok.json().user_id]))[0].email, password: 'x7-'.repeat(42) + 'ab' });
  assert.equal(login.statusCode, 200);
});

test('a password (or any text) with an unpaired UTF-16 surrogate gets 422 validation_failed: it has no UTF-8 form, so two different passwords would hash alike', async () => {
  const email = uniqueEmail('surrogate');
  for (const password of ['abcdefghijk\ud800', 'abcdefghijk\udfff', '\udc00abcdefghijkl']) {
    const res = await signup({ email, password });
    const err = assertError(res, 422, 'validation_failed');
    assert.deepEqual(err.details.fields.map((f: any) => f.path), ['password'], password);
  }
  assert.deepEqual(await userRowsFor(email), []);
  const named = await signup({ email, password: 'tw3lve-chars-ok', display_name: 'Ann \ud83d' });
  assert.deepEqual(assertError(named, 422, 'validation_failed').details.fields.map((f: any) => f.path), ['display_name']);
  // A well-formed pair (an emoji) is one character and fine; the login refuses the lone half as input.
  const ok = await signup({ email, password: 'abcdefghijk\ud83d\ude00' });
  assert.equal(ok.statusCode, 201, ok.body);
  assertError(await post(t, '/v1/auth/login', { email, password: 'abcdefghijk\ud83d' }), 422, 'validation_failed');
  assertError(await post(t, '/v1/auth/login', { email, password: 'abcdefghijk\ufffd' }), 401, 'invalid_credentials');
});

test('password policy: a password among the 100,000 most common breached passwords gets 422 weak_password with details.reason breached (case-insensitively)', async () => {
  for (const password of ['password1234', 'qwertyuiop12', 'PASSWORD1234', 'qwerty123456']) {
    const email = uniqueEmail('breached');
    const res = await signup({ email, password });
    assert.equal(assertError(res, 422, 'weak_password').details.reason, 'breached', password);
    assert.deepEqual(await userRowsFor(email), []);
  }
});

test('password policy: the breached list is the first 100,000 entries: the last of 12 or more characters inside it (rank 99,631) gets 422 breached, the first beyond it (rank 100,437) is accepted', async () => {
  const inside = await signup({ email: uniqueEmail('rank'), password: '1111111111111' });
  assert.equal(assertError(inside, 422, 'weak_password').details.reason, 'breached');
  const beyond = await signup({ email: uniqueEmail('rank'), password: '010203040506070809' });
  assert.equal(beyond.statusCode, 201, beyond.body);
});

test('password policy: the breached list is compared case-insensitively (decisions "Breached passwords") also for entries listed with capitals: Mailcreated5240 (rank 2,202) gets 422 breached typed as listed, in lower and in upper case', async () => {
  for (const password of ['Mailcreated5240', 'mailcreated5240', 'MAILCREATED5240']) {
    const email = uniqueEmail('listedcaps');
    const res = await signup({ email, password });
    assert.equal(assertError(res, 422, 'weak_password').details.reason, 'breached', password);
    assert.deepEqual(await userRowsFor(email), []);
  }
});

test('password policy applies to the NFKC form, the password the user signs in with: a breached password typed in full-width characters gets 422 breached, and a password equal to the email so typed gets matches_email', async () => {
  const fullWidth = (s: string) => [...s].map((ch) => (ch >= '!' && ch <= '~' ? String.fromCodePoint(ch.codePointAt(0)! + 0xfee0) : ch)).join('');
  const breached = await signup({ email: uniqueEmail('fw'), password: fullWidth('password1234') });
  assert.equal(assertError(breached, 422, 'weak_password').details.reason, 'breached');
  const email = uniqueEmail('fwmail');
  const sameAsEmail = await signup({ email, password: fullWidth(email) });
  assert.equal(assertError(sameAsEmail, 422, 'weak_password').details.reason, 'matches_email');
  assert.deepEqual(await userRowsFor(email), []);
});

test('password policy has no composition rules: lowercase-only and spaced passwords outside the breached list (even one ranked beyond 100,000) are accepted', async () => {
  for (const password of ['zaqxswcdevfr', 'correct horse battery']) {
    const res = await signup({ email: uniqueEmail('nocomp'), password });
    assert.equal(res.statusCode, 201, `${password}: ${res.body}`);
  }
});

test('password policy: a password equal to the email gets 422 weak_password with details.reason matches_email', async () => {
  for (const variant of ['same', 'upper']) {
    const email = uniqueEmail('matches');
    const res = await signup({ email, password: variant === 'same' ? email : email.toUpperCase() });
    assert.equal(assertError(res, 422, 'weak_password').details.reason, 'matches_email');
    assert.deepEqual(await userRowsFor(email), []);
  }
});

test('signup bad input gets 422 validation_failed with details.fields naming the field', async () => {
  assertFields(await signup({}), ['email', 'password']);
  assertFields(await signup({ password: PASSWORD }), ['email']);
  assertFields(await signup({ email: uniqueEmail() }), ['password']);
  assertFields(await signup({ email: 'not-an-email', password: PASSWORD }), ['email']);
  assertFields(await signup({ email: 42, password: PASSWORD }), ['email']);
  assertFields(await signup({ email: uniqueEmail(), password: 123456789012345 }), ['password']);
  assertFields(await signup({ email: uniqueEmail(), password: PASSWORD, display_name: '' }), ['display_name']);
  assertFields(await signup({ email: uniqueEmail(), password: PASSWORD, display_name: 'n'.repeat(101) }), ['display_name']);
  assertFields(await signup({ email: uniqueEmail(), password: PASSWORD, test_mode: 'true' }), ['test_mode']);
  assertFields(await signup({ email: uniqueEmail(), password: PASSWORD, application_id: 7 }), ['application_id']);
  assertFields(await signup({ email: uniqueEmail(), password: PASSWORD, role: 'superadmin' }), ['role']);
  const ok = await signup({ email: uniqueEmail('dn100'), password: PASSWORD, display_name: 'n'.repeat(100) });
  assert.equal(ok.statusCode, 201, ok.body);
});

test('signup with test_mode true creates a test-mode user whose access token carries test_mode true', async () => {
  const email = uniqueEmail('testmode');
  const res = await signup({ email, password: PASSWORD, test_mode: true });
  assert.equal(res.statusCode, 201, res.body);
  assert.equal(jwtPayload(res.json().access_token).test_mode, true);
  const [row] = await userRowsFor(email);
  assert.equal(row.test_mode, true);
  const me = await t.app.inject({ method: 'GET', url: '/v1/users/me', headers: bearer(res.json().access_token) });
  assert.equal(me.json().test_mode, true);
  // Login matches only accounts in the requested mode.
  assertError(await post(t, '/v1/auth/login', { email, password: PASSWORD }), 401, 'invalid_credentials');
  assert.equal((await post(t, '/v1/auth/login', { email, password: PASSWORD, test_mode: true })).statusCode, 200);
});

test('two concurrent signups with one email: exactly one 201, the other 409 email_taken, and one user', async () => {
  const email = uniqueEmail('race');
  const results = await Promise.all([signup({ email, password: PASSWORD }), signup({ email: email.toUpperCase(), password: PASSWORD })]);
  assert.deepEqual(results.map((r) => r.statusCode).sort(), [201, 409], results.map((r) => r.body).join(' | '));
  assertError(results.find((r) => r.statusCode === 409)!, 409, 'email_taken');
  assert.equal((await userRowsFor(email)).length, 1);
});

test('passwords are NFKC-normalized before hashing (NIST SP 800-63B): one signed up with composed characters logs in typed decomposed or in full-width forms, and a different password still gets 401', async () => {
  const email = uniqueEmail('nfkc');
  const composed = 'Crème brûlée über Straße 42'.normalize('NFC');
  assert.equal((await signup({ email, password: composed })).statusCode, 201);
  const login = (password: string) => post(t, '/v1/auth/login', { email, password });
  const decomposed = composed.normalize('NFD');
  assert.notEqual(decomposed, composed);
  assert.equal((await login(decomposed)).statusCode, 200, 'NFD form');
  assert.equal((await login(composed.replace('42', '\uFF14\uFF12'))).statusCode, 200, 'full-width digits');
  assertError(await login(composed.replace('42', '43')), 401, 'invalid_credentials');
});

test('passwords are hashed in their NFKC form (NIST SP 800-63B): one signed up typed in full-width forms and decomposed logs in typed in ASCII and composed', async () => {
  const email = uniqueEmail('nfkchash');
  const typed = 'Cr\u0065\u0300me \uFF42\uFF52\uFF55\uFF4C\uFF45\uFF45 \uFF14\uFF12'; // "Crème" decomposed, "brulee 42" full-width
  assert.equal((await signup({ email, password: typed })).statusCode, 201);
  const res = await post(t, '/v1/auth/login', { email, password: 'Crème brulee 42'.normalize('NFC') });
  assert.equal(res.statusCode, 200, res.body);
});
