// Signing in through the hosted page (app.inject): password, the MFA step, the API's messages and
// lockout, the redirect with code and state, the code's redemption, "Continue as" and no access.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, withStoppedClock, type TestApp } from '../helpers/app.js';
import { hashSecret } from '../../src/ids.js';
import { createUser } from '../helpers/fixtures.js';
import { alignToStep, createMfaUser, mfaChallenge, totpCode } from '../auth/support.js';
import { assertStatus, call, grant, newApp, person, platformKey, sql, type AppFixture } from '../access/support.js';
import { assertOAuthError, codeGrant, member, oauthApp, REDIRECT, refreshGrant, tokenReq, verifyAppToken } from './support.js';
import { assertPage, assertRedirect, Browser, flow, formOf, setCookieHeader } from './signin-support.js';

let t: TestApp;
let admin: string;
let app: AppFixture;
before(async () => {
  t = await buildTestApp();
  admin = await platformKey(t);
  app = await oauthApp(t, admin, { name: 'Acme Notes' });
});
after(() => t.close());

const WRONG = 'wrong-password-123';

test('email and password: 303 to the redirect_uri with code and state; the code redeems with the verifier; a new cookie names the session', async () => {
  const user = await member(t, admin, app.id);
  const f = flow(app.id, { state: 'a b&c=d/é' });
  const browser = new Browser(t);
  const page = await browser.open(f.params);
  const before = browser.cookie!;
  const res = await browser.signIn(page, user.email, user.password);
  const { code, state } = assertRedirect(res);
  assert.equal(state, 'a b&c=d/é', 'state is echoed verbatim');
  assert.equal(res.headers['cache-control'], 'no-store');
  assert.equal(res.headers['referrer-policy'], 'no-referrer');

  // The cookie is replaced at sign-in (a secret planted earlier is never bound) and lasts as the session does.
  const cookie = String(setCookieHeader(res));
  assert.match(cookie, /^platform_signin=[A-Za-z0-9_-]{43}; Path=\/signin; HttpOnly; SameSite=Lax; Max-Age=\d+$/);
  assert.notEqual(browser.cookie, before);
  assert.ok(Math.abs(Number(/Max-Age=(\d+)/.exec(cookie)![1]) - 90 * 86400) < 60, 'Math.abs(Number(/Max-Age=(\\d+)/.exec(cookie)![1]) - 90 * 86400) < 60');
  const rows = await sql(t, 'SELECT b.*, s.user_id FROM signin_browser_sessions b JOIN sessions s ON s.id = b.session_id WHERE s.user_id = $1', [user.id]);
  assert.equal(rows.length, 1);
  assert.equal(rows[0].cookie_hash, hashSecret(browser.cookie!), 'only the hash is stored');

  // The code is bound to that session (Rule 8) and redeems at the token endpoint with the verifier.
  const [row] = await sql(t, 'SELECT session_id, redirect_uri FROM oauth_authorization_codes WHERE code_hash = $1', [hashSecret(code)]);
  assert.equal(row.session_id, rows[0].session_id);
  const tokens = assertStatus(await tokenReq(t, codeGrant({ code, verifier: f.verifier }, app.id)), 200);
  const claims = await verifyAppToken(t, tokens.access_token, app.id);
  assert.equal(claims.sub, user.id);
  assert.equal(claims.sid, rows[0].session_id);
  // …once, and only with the right verifier.
  assertOAuthError(await tokenReq(t, codeGrant({ code, verifier: f.verifier }, app.id)), 'invalid_grant');
  const other = flow(app.id);
  const second = assertRedirect(await browser.signIn(await browser.open(other.params), user.email, user.password));
  assertOAuthError(await tokenReq(t, codeGrant({ code: second.code, verifier: f.verifier }, app.id)), 'invalid_grant');
});

test('wrong password or unknown email: 401 with the API message, the email kept, fields marked invalid; empty fields 422', async () => {
  const user = await member(t, admin, app.id);
  const browser = new Browser(t);
  const page = await browser.open(flow(app.id).params);
  for (const [email, password] of [[user.email, WRONG], ['nobody@example.com', user.password]]) {
    const body = assertPage(await browser.signIn(page, email, password), 401, 'Email or password is incorrect.');
    assert.ok(body.includes(`value="${email}" aria-invalid="true" aria-describedby="signin-error"`), body);
  }
  assertPage(await browser.signIn(page, '', ''), 422, 'Enter your email and password.');
  // The form re-rendered after an error still works.
  const retry = await browser.signIn(assertPageAnd(await browser.signIn(page, user.email, WRONG)), user.email, user.password);
  assertRedirect(retry);
});

const assertPageAnd = (res: Awaited<ReturnType<Browser['open']>>) => (assertPage(res, 401), res);

test('empty fields: an empty password, or an empty email, alone is 422 too, and no password is checked', async () => {
  const user = await member(t, admin, app.id);
  const browser = new Browser(t);
  const page = await browser.open(flow(app.id).params);
  const body = assertPage(await browser.signIn(page, user.email, ''), 422, 'Enter your email and password.');
  assert.match(body, /<input id="password" name="password"[^>]* aria-invalid="true" aria-describedby="signin-error"/);
  assertPage(await browser.signIn(page, '', user.password), 422, 'Enter your email and password.');
  // recent_failures is what the lockout counts (failed_attempts is a column no sign-in writes any more).
  const [identity] = await sql(t, `SELECT cardinality(recent_failures) AS failures FROM identities WHERE user_id = $1 AND method = 'password'`, [user.id]);
  assert.equal(identity.failures, 0, 'no password was checked');
});

test('lockout as the API: five failures lock for 15 minutes (then 429, Retry-After, "try again in 15 minutes"), even with the right password', async () => {
  const user = await member(t, admin, app.id);
  const browser = new Browser(t);
  const page = await browser.open(flow(app.id).params);
  for (let i = 0; i < 5; i++) assertPage(await browser.signIn(page, user.email, WRONG), 401);
  const locked = await browser.signIn(page, user.email, WRONG);
  assertPage(locked, 429, 'Too many attempts; try again in 15 minutes.');
  assert.equal(locked.headers['retry-after'], '900');
  const still = await browser.signIn(page, user.email, user.password);
  assertPage(still, 429, /^Too many attempts; try again in 1[45] minutes\.$/);
  t.clock.advance(15 * 60 + 1);
  assertRedirect(await browser.signIn(page, user.email, user.password));
});

test('lockout: the page never says to come back before Retry-After (N minutes rounds up)', async () => {
  const user = await member(t, admin, app.id);
  const browser = new Browser(t);
  const page = await browser.open(flow(app.id).params);
  // The clock stands still but for advance(): however long the sign-ins take on a loaded machine, 50 s
  // after the fifth failure the lock has exactly 850 s (14 1/6 minutes) left, which the page rounds up
  // to 15, never down to 14.
  await withStoppedClock(t, async () => {
    for (let i = 0; i < 5; i++) assertPage(await browser.signIn(page, user.email, WRONG), 401);
    t.clock.advance(50);
    const locked = await browser.signIn(page, user.email, user.password);
    assert.equal(locked.headers['retry-after'], '850');
    assertPage(locked, 429, 'Too many attempts; try again in 15 minutes.');
  });
});

test('a suspended user with the right password: 403 "This account is suspended." on the password form again (the email kept), not a dead-end error page', async () => {
  const user = await createUser(t, { status: 'suspended' });
  const browser = new Browser(t);
  const res = await browser.signIn(await browser.open(flow(app.id).params), user.email, user.password);
  const body = assertPage(res, 403, 'This account is suspended.');
  // Sign-in errors the user can act on re-render the form with the API's message and status.
  assert.equal(formOf(res, '/signin').application_id, app.id, 'the password form is shown again');
  assert.ok(body.includes(`value="${user.email}"`), 'the email is kept');
  assert.match(String(res.headers['content-security-policy']), /form-action 'self' https:\/\/app\.example\.com;/);
});

test('MFA: the password step shows the code form (and a recovery code form); a wrong code is 401, a malformed one 422; the right code redirects', async () => {
  const { user, secret } = await createMfaUser(t);
  await grant(t, admin, user.id, app.id);
  const f = flow(app.id);
  const browser = new Browser(t);
  const mfa = await browser.signIn(await browser.open(f.params), user.email, user.password);
  const body = assertPage(mfa, 200);
  assert.ok(body.includes('<h1>Two-step verification</h1>'), 'body.includes(\'<h1>Two-step verification</h1>\')');
  assert.match(body, /<label for="code">Authentication code<\/label>/);
  assert.match(body, /autocomplete="one-time-code"/);
  assert.match(body, /<summary>Use a recovery code instead<\/summary>/);
  assert.match(formOf(mfa, '/signin/mfa').mfa_token, /^mfa_/);
  assert.equal(setCookieHeader(mfa), undefined, 'not signed in yet');

  const right = await totpCode(t, secret);
  const wrong = right === '000000' ? '111111' : '000000';
  const again = await browser.mfa(mfa, 'code', wrong);
  assertPage(again, 401, 'The code is not valid.');
  assert.match(again.body, /aria-invalid="true"/);
  assertPage(await browser.mfa(again, 'code', '12ab'), 422, 'Enter the 6-digit code from your authenticator app.');
  const { code } = assertRedirect(await browser.mfa(again, 'code', right));
  const tokens = assertStatus(await tokenReq(t, codeGrant({ code, verifier: f.verifier }, app.id)), 200);
  assert.equal((await verifyAppToken(t, tokens.access_token, app.id)).sub, user.id);
  const [session] = await sql(t, `SELECT amr FROM sessions WHERE user_id = $1 ORDER BY created_at DESC LIMIT 1`, [user.id]);
  assert.deepEqual(session.amr, ['pwd', 'otp']);
});

test('MFA: a code that is not 6 digits is 422 as in the API (5 or 7 digits), and is not counted against the challenge', async () => {
  const { user, secret } = await createMfaUser(t);
  await grant(t, admin, user.id, app.id);
  const browser = new Browser(t);
  let page = await browser.signIn(await browser.open(flow(app.id).params), user.email, user.password);
  for (const code of ['12345', '1234567', '12345', '1234567', '12345']) {
    page = await browser.mfa(page, 'code', code);
    assertPage(page, 422, 'Enter the 6-digit code from your authenticator app.');
  }
  // Five malformed codes later the challenge still takes the right one.
  assertRedirect(await browser.mfa(page, 'code', await totpCode(t, secret)));
});

test('MFA with a recovery code: redirects; a used or unknown recovery code is 401 on the recovery form', async () => {
  const { user, recoveryCodes } = await createMfaUser(t);
  await grant(t, admin, user.id, app.id);
  const browser = new Browser(t);
  const mfa = await browser.signIn(await browser.open(flow(app.id).params), user.email, user.password);
  const bad = await browser.mfa(mfa, 'recovery_code', 'aaaaa-aaaaa');
  assertPage(bad, 401, 'The code is not valid.');
  assert.match(bad.body, /<details open>/);
  assertRedirect(await browser.mfa(bad, 'recovery_code', recoveryCodes[0]));
  const next = await browser.signIn(await browser.open(flow(app.id).params), user.email, user.password);
  assertPage(await browser.mfa(next, 'recovery_code', recoveryCodes[0]), 401, 'The code is not valid.');
});

test('MFA recovery form: an empty recovery code is 422; its errors are tied to the recovery code field, not the code field', async () => {
  const { user } = await createMfaUser(t);
  await grant(t, admin, user.id, app.id);
  const browser = new Browser(t);
  const mfa = await browser.signIn(await browser.open(flow(app.id).params), user.email, user.password);
  const empty = await browser.mfa(mfa, 'recovery_code', '');
  assertPage(empty, 422, 'Enter one of your recovery codes.');
  const bad = await browser.mfa(empty, 'recovery_code', 'aaaaa-aaaaa');
  assertPage(bad, 401, 'The code is not valid.');
  for (const body of [empty.body, bad.body]) {
    assert.match(body, /<input id="recovery_code" name="recovery_code"[^>]* aria-invalid="true" aria-describedby="signin-error"/);
    assert.doesNotMatch(body, /<input id="code" [^>]*aria-invalid/);
  }
});

test('MFA token expired (300 s): back to the password form, "sign in again"; the expired token stays refused, and a forged one is refused as unknown (a token of the other mode: the next test)', async () => {
  const { user, secret } = await createMfaUser(t);
  await grant(t, admin, user.id, app.id);
  const browser = new Browser(t);
  const mfa = await browser.signIn(await browser.open(flow(app.id).params), user.email, user.password);
  t.clock.advance(301);
  alignToStep(t, 5);
  const res = await browser.mfa(mfa, 'code', await totpCode(t, secret));
  const body = assertPage(res, 401, 'The MFA token is invalid or expired. Please sign in again.');
  assert.ok(body.includes('name="password"'), 'body.includes(\'name="password"\')');
  assertPage(await browser.mfa(mfa, 'code', 'abc'), 401, 'The MFA token is invalid or expired.');
  assertPage(await browser.post('/signin/mfa', { ...formOf(mfa, '/signin/mfa'), mfa_token: 'mfa_forged', code: '123456' }), 401, 'The MFA token is invalid or expired.');
});

test('an MFA challenge of the other mode counts as unknown: back to the password form ("… Please sign in again."), no code issued', async () => {
  // A test-mode user's challenge (from the API) posted on a live Application's page.
  const { user: tester, secret } = await createMfaUser(t, { mode: 'test' });
  const testToken = await mfaChallenge(t, tester);
  const { user } = await createMfaUser(t);
  await grant(t, admin, user.id, app.id);
  const browser = new Browser(t);
  const mfa = await browser.signIn(await browser.open(flow(app.id).params), user.email, user.password);
  const res = await browser.post('/signin/mfa', { ...formOf(mfa, '/signin/mfa'), mfa_token: testToken, code: await totpCode(t, secret) });
  const body = assertPage(res, 401, 'The MFA token is invalid or expired. Please sign in again.');
  assert.ok(body.includes('name="password"'), 'the password form');
  assert.equal(setCookieHeader(res), undefined, 'not signed in');
  const codes = await sql(t, 'SELECT 1 FROM oauth_authorization_codes WHERE user_id = $1', [tester.id]);
  assert.equal(codes.length, 0);
});

test('MFA: five wrong codes void the challenge and lock the identity: the fifth shows the password form, and signing in again gets the lockout message (429)', async () => {
  const { user, secret } = await createMfaUser(t);
  await grant(t, admin, user.id, app.id);
  const browser = new Browser(t);
  let page = await browser.signIn(await browser.open(flow(app.id).params), user.email, user.password);
  const right = await totpCode(t, secret);
  const wrong = right === '000000' ? '111111' : '000000';
  for (let i = 0; i < 4; i++) page = await browser.mfa(page, 'code', wrong), assertPage(page, 401, 'The code is not valid.');
  const fifth = await browser.mfa(page, 'code', wrong);
  const body = assertPage(fifth, 401, 'The code is not valid. Please sign in again.');
  assert.ok(body.includes('name="password"'), 'the challenge is void: sign in again');
  const locked = await browser.signIn(fifth, user.email, user.password);
  assertPage(locked, 429, 'Too many attempts; try again in 15 minutes.');
  assert.equal(locked.headers['retry-after'], '900');
});

test('MFA turned off during the challenge (a support reset): the code step goes back to the password form ("… Please sign in again."), and signing in again needs no code', async () => {
  const { user, secret } = await createMfaUser(t);
  await grant(t, admin, user.id, app.id);
  const browser = new Browser(t);
  const mfa = await browser.signIn(await browser.open(flow(app.id).params), user.email, user.password);
  assertPage(mfa, 200);
  assert.equal((await call(t, 'DELETE', `/v1/users/${user.id}/mfa/totp`, admin)).statusCode, 204);
  // The challenge can no longer be met: showing its form again would leave the user retrying a dead end.
  const res = await browser.mfa(mfa, 'code', await totpCode(t, secret));
  const body = assertPage(res, 401, 'The MFA token is invalid or expired. Please sign in again.');
  assert.ok(body.includes('name="password"') && !body.includes('name="mfa_token"'), 'the password form, not the code form');
  assert.equal(setCookieHeader(res), undefined, 'not signed in');
  assertRedirect(await browser.signIn(res, user.email, user.password));
});

test('no access to the Application: a 403 page (no redirect) with a link returning error=access_denied, the state and the issuer (iss) to the registered URI', async () => {
  const user = await person(t);
  const browser = new Browser(t);
  const res = await browser.signIn(await browser.open(flow(app.id, { state: 's&1' }).params), user.email, user.password);
  const body = assertPage(res, 403, `You are signed in as ${user.email}, but this account does not have access to Acme Notes.`);
  const href = /<a class="button" href="([^"]+)">Return to Acme Notes<\/a>/.exec(body)![1].replace(/&amp;/g, '&');
  const back = new URL(href);
  assert.equal(`${back.origin}${back.pathname}`, 'https://app.example.com/callback');
  assert.equal(back.searchParams.get('error'), 'access_denied');
  assert.equal(back.searchParams.get('state'), 's&1');
  assert.equal(back.searchParams.get('iss'), t.config.publicUrl, 'RFC 9207: the error response names its issuer too');
  assert.equal(back.searchParams.get('code'), null);
  assert.ok(setCookieHeader(res), 'the sign-in itself succeeded');
  const codes = await sql(t, 'SELECT 1 FROM oauth_authorization_codes WHERE user_id = $1', [user.id]);
  assert.equal(codes.length, 0);
});

test('no access: the "Return to" link keeps the registered redirect_uri\'s query as registered (RFC 6749 §3.1.2 "MUST be retained"), then error, error_description, state and iss', async () => {
  const registered = 'https://app.example.com/cb?next=/home&flag';
  const other = await oauthApp(t, admin, { name: 'Acme Query', redirect_uris: [registered] });
  const user = await person(t);
  const browser = new Browser(t);
  const res = await browser.signIn(await browser.open(flow(other.id, { redirect_uri: registered, state: 's1' }).params), user.email, user.password);
  const body = assertPage(res, 403);
  const href = /<a class="button" href="([^"]+)">Return to Acme Query<\/a>/.exec(body)![1].replace(/&amp;/g, '&');
  assert.ok(href.startsWith(`${registered}&error=access_denied&error_description=`), href);
  assert.ok(href.endsWith(`&state=s1&iss=${encodeURIComponent(t.config.publicUrl)}`), href);
});

test('a redirect_uri registered with characters beyond ASCII: the 303 Location carries them percent-encoded as UTF-8 (a header cannot hold them), the registered query kept in that form, then code, state and iss', async () => {
  const registered = 'https://app.example.com/cb/→x?q=日本&flag';
  const other = await oauthApp(t, admin, { name: 'Acme Unicode', redirect_uris: [registered] });
  const user = await member(t, admin, other.id);
  const browser = new Browser(t);
  const res = await browser.signIn(await browser.open(flow(other.id, { redirect_uri: registered, state: 's1' }).params), user.email, user.password);
  assert.equal(res.statusCode, 303, res.body);
  const code = new URL(String(res.headers.location)).searchParams.get('code');
  assert.match(String(code), /^oac_/);
  assert.equal(res.headers.location, `https://app.example.com/cb/%E2%86%92x?q=%E6%97%A5%E6%9C%AC&flag&code=${code}&state=s1&iss=${encodeURIComponent(t.config.publicUrl)}`);
});

test('no access to an internal Application (which the user may not see): the same 403 no-access page with its access_denied link, not an error page', async () => {
  const internal = await oauthApp(t, admin, { name: 'Acme Internal', visibility: 'internal' });
  const user = await person(t);
  const browser = new Browser(t);
  const res = await browser.signIn(await browser.open(flow(internal.id).params), user.email, user.password);
  const body = assertPage(res, 403, `You are signed in as ${user.email}, but this account does not have access to Acme Internal.`);
  assert.match(body, /<a class="button" href="https:\/\/app\.example\.com\/callback\?error=access_denied/);
  assert.equal((await sql(t, 'SELECT 1 FROM oauth_authorization_codes WHERE user_id = $1', [user.id])).length, 0);
});

test('no access: "Return to" also carries error_description; "Sign in with another account" opens the page again for the same request', async () => {
  const user = await person(t);
  const f = flow(app.id, { state: 's&2' });
  const browser = new Browser(t);
  const body = assertPage(await browser.signIn(await browser.open(f.params), user.email, user.password), 403);
  const back = new URL(/<a class="button" href="([^"]+)">Return to Acme Notes<\/a>/.exec(body)![1].replace(/&amp;/g, '&'));
  assert.ok(back.searchParams.get('error_description'), 'error_description is set');
  const link = /<a href="([^"]+)">Sign in with another account<\/a>/.exec(body);
  assert.ok(link, `no "Sign in with another account" link: ${body}`);
  const again = new URL(link[1].replace(/&amp;/g, '&'), 'http://localhost');
  assert.equal(again.pathname, '/signin');
  assert.deepEqual(Object.fromEntries(again.searchParams), f.params);
  // The page it opens signs another account in for the same request (same state, same PKCE pair).
  const other = await member(t, admin, app.id);
  const { code, state } = assertRedirect(await browser.signIn(await browser.open(Object.fromEntries(again.searchParams)), other.email, other.password));
  assert.equal(state, 's&2');
  assertStatus(await tokenReq(t, codeGrant({ code, verifier: f.verifier }, app.id)), 200);
});

test('a second visit offers "Continue as"; continuing issues a code on the same session; once the session ends, sign in again', async () => {
  const user = await member(t, admin, app.id);
  const browser = new Browser(t);
  assertRedirect(await browser.signIn(await browser.open(flow(app.id).params), user.email, user.password));
  const [{ session_id: sessionId }] = await sql(t, 'SELECT b.session_id FROM signin_browser_sessions b WHERE b.cookie_hash = $1', [hashSecret(browser.cookie!)]);

  const f = flow(app.id, { state: 'again' });
  const page = await browser.open(f.params);
  const body = assertPage(page, 200);
  assert.ok(body.includes(`<button type="submit" autofocus>Continue as ${user.email}</button>`), body);
  assert.ok(body.includes('<h2>Use another account</h2>'), 'body.includes(\'<h2>Use another account</h2>\')');
  const { code, state } = assertRedirect(await browser.post('/signin/continue', formOf(page, '/signin/continue')));
  assert.equal(state, 'again');
  const [row] = await sql(t, 'SELECT session_id FROM oauth_authorization_codes WHERE code_hash = $1', [hashSecret(code)]);
  assert.equal(row.session_id, sessionId);

  // Another browser (another cookie) is not signed in.
  assert.ok(!assertPage(await new Browser(t).open(f.params), 200).includes('Continue as'), '!assertPage(await new Browser(t).open(f.params), 200).includes(\'Continue as\')');

  await sql(t, 'UPDATE sessions SET revoked_at = now() WHERE id = $1', [sessionId]);
  assert.ok(!assertPage(await browser.open(f.params), 200).includes('Continue as'), '!assertPage(await browser.open(f.params), 200).includes(\'Continue as\')');
  assertPage(await browser.post('/signin/continue', formOf(page, '/signin/continue')), 401, 'Your session has ended. Please sign in again.');
});

test('a session ended between the password check and the cookie being bound shows the "sign in again" page (401), never a 500, and sets no cookie', async () => {
  const user = await member(t, admin, app.id);
  // An admin's DELETE of the session lands in that window: here, as the browser's row is written.
  await sql(t, `CREATE FUNCTION end_session_at_bind() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN UPDATE sessions SET revoked_at = now() WHERE id = NEW.session_id; RETURN NEW; END $$`);
  await sql(t, 'CREATE TRIGGER end_session_at_bind AFTER INSERT ON signin_browser_sessions FOR EACH ROW EXECUTE FUNCTION end_session_at_bind()');
  try {
    const browser = new Browser(t);
    const res = await browser.signIn(await browser.open(flow(app.id).params), user.email, user.password);
    assertPage(res, 401, 'Your session has ended. Please sign in again.');
    assert.equal(setCookieHeader(res), undefined, 'no cookie bound to the ended session');
    assert.ok(!assertPage(await browser.open(flow(app.id).params), 200).includes('Continue as'), 'the browser is not signed in');
  } finally {
    await sql(t, 'DROP TRIGGER end_session_at_bind ON signin_browser_sessions');
    await sql(t, 'DROP FUNCTION end_session_at_bind()');
  }
});

test('a new sign-in in the same browser forgets the previous one, whose session stays alive; other browsers keep theirs', async () => {
  const first = await member(t, admin, app.id);
  const second = await member(t, admin, app.id);
  const browser = new Browser(t);
  const elsewhere = new Browser(t);
  const f = flow(app.id);
  const { code } = assertRedirect(await browser.signIn(await browser.open(f.params), first.email, first.password));
  const tokens = assertStatus(await tokenReq(t, codeGrant({ code, verifier: f.verifier }, app.id)), 200);
  assertRedirect(await elsewhere.signIn(await elsewhere.open(flow(app.id).params), first.email, first.password));
  const previous = browser.cookie!;

  assertRedirect(await browser.signIn(await browser.open(flow(app.id).params), second.email, second.password));
  assert.ok(assertPage(await browser.open(flow(app.id).params), 200).includes(`Continue as ${second.email}`), 'this browser continues as the second user');
  const stale = new Browser(t);
  stale.cookie = previous;
  assert.ok(!assertPage(await stale.open(flow(app.id).params), 200).includes('Continue as'), 'the previous cookie names no session');
  // The first session lives on: the other browser continues with it, the Application refreshes its tokens.
  assert.ok(assertPage(await elsewhere.open(flow(app.id).params), 200).includes(`Continue as ${first.email}`), 'the other browser still continues as the first user');
  assertStatus(await tokenReq(t, refreshGrant(tokens.refresh_token, app.id)), 200);
});

test('"Continue as" lasts while the session is in use: an Application refreshing its tokens keeps it; 30 days with no token used end it', async () => {
  const DAY = 24 * 3600;
  const user = await member(t, admin, app.id);
  const browser = new Browser(t);
  const f = flow(app.id);
  const { code } = assertRedirect(await browser.signIn(await browser.open(f.params), user.email, user.password));
  let appRefresh = assertStatus(await tokenReq(t, codeGrant({ code, verifier: f.verifier }, app.id)), 200).refresh_token;

  // Day 29: the Application refreshes; on day 31 the platform refresh token has idled out, the app's has not.
  t.clock.advance(29 * DAY);
  appRefresh = assertStatus(await tokenReq(t, refreshGrant(appRefresh, app.id)), 200).refresh_token;
  t.clock.advance(2 * DAY);
  const page = await browser.open(flow(app.id).params);
  assert.ok(assertPage(page, 200).includes(`Continue as ${user.email}`), 'a token of the session was used within 30 days');

  // Then 30 days and a second with no token of the session used: the session has idled out.
  t.clock.advance(28 * DAY + 1);
  assert.ok(!assertPage(await browser.open(flow(app.id).params), 200).includes('Continue as'), 'not offered once idle');
  assertPage(await browser.post('/signin/continue', formOf(page, '/signin/continue')), 401, 'Your session has ended. Please sign in again.');
  assertOAuthError(await tokenReq(t, refreshGrant(appRefresh, app.id)), 'invalid_grant');
});

test('a test_mode Application signs in test-mode users only (its own mode), and the app token says test_mode', async () => {
  const testKey = await platformKey(t, undefined, 'test');
  const testApp = await newApp(t, testKey, { redirect_uris: [REDIRECT] }, { ownerMode: 'test' });
  const tester = await person(t, { mode: 'test' });
  await grant(t, testKey, tester.id, testApp.id);
  const live = await member(t, admin, app.id);
  const f = flow(testApp.id);
  const browser = new Browser(t);
  const page = await browser.open(f.params);
  assert.ok(page.body.includes('<p class="badge">Test mode</p>'), 'page.body.includes(\'<p class="badge">Test mode</p>\')');
  assertPage(await browser.signIn(page, live.email, live.password), 401, 'Email or password is incorrect.');
  const { code } = assertRedirect(await browser.signIn(page, tester.email, tester.password));
  const tokens = assertStatus(await tokenReq(t, codeGrant({ code, verifier: f.verifier }, testApp.id)), 200);
  assert.equal((await verifyAppToken(t, tokens.access_token, testApp.id)).test_mode, true);
  // The live page does not see the test session of this browser.
  assert.ok(!assertPage(await browser.open(flow(app.id).params), 200).includes('Continue as'), '!assertPage(await browser.open(flow(app.id).params), 200).includes(\'Continue as\')');
});

test('a test_mode Application offers "Continue as" to the test-mode user signed in on it, and continuing issues its code', async () => {
  const testKey = await platformKey(t, undefined, 'test');
  const testApp = await newApp(t, testKey, { redirect_uris: [REDIRECT] }, { ownerMode: 'test' });
  const tester = await person(t, { mode: 'test' });
  await grant(t, testKey, tester.id, testApp.id);
  const browser = new Browser(t);
  assertRedirect(await browser.signIn(await browser.open(flow(testApp.id).params), tester.email, tester.password));
  const f = flow(testApp.id);
  const page = await browser.open(f.params);
  assert.ok(assertPage(page, 200).includes(`Continue as ${tester.email}`), page.body);
  const { code } = assertRedirect(await browser.post('/signin/continue', formOf(page, '/signin/continue')));
  const tokens = assertStatus(await tokenReq(t, codeGrant({ code, verifier: f.verifier }, testApp.id)), 200);
  assert.equal((await verifyAppToken(t, tokens.access_token, testApp.id)).sub, tester.id);
});

test('the no-access page escapes the Application name wherever it names it (heading, alert, "Return to" link): an owner\'s name is never markup', async () => {
  const name = '<script>alert(1)</script> "Q" & Co';
  const escaped = '&lt;script&gt;alert(1)&lt;/script&gt; &quot;Q&quot; &amp; Co';
  const marked = await oauthApp(t, admin, { name });
  const user = await person(t);
  const browser = new Browser(t);
  const body = assertPage(await browser.signIn(await browser.open(flow(marked.id).params), user.email, user.password), 403);
  assert.ok(body.includes(`<h1>No access to ${escaped}</h1>`), body);
  assert.ok(body.includes(`does not have access to ${escaped}.</p>`), body);
  assert.ok(body.includes(`">Return to ${escaped}</a>`), body);
  assert.ok(!body.includes('<script'), 'nothing an owner names is markup');
});
