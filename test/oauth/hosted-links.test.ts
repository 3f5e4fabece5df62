// The pages the mailed links open (/verify-email, /reset-password, /accept-invitation): a GET shows a
// form and never uses the token up (mail scanners fetch links); the POST (CSRF-checked, throttled) calls
// the API operation's verb; every refusal is an HTML page with the sign-in page's headers.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { boot } from '../../src/boot.js';
import { createUser, PASSWORD, uniqueEmail, userToken, type TestUser } from '../helpers/fixtures.js';
import { assertError, call, sql, type InjectResponse } from '../helpers/http.js';
import { mailsTo, type MailRow } from '../helpers/mail.js';
import { alignToWindow } from '../auth/support.js';
import { assertPage, formOf } from './signin-support.js';
import { csrfToken } from '../../src/modules/signin/browser.js';
import { escapeHtml } from '../../src/modules/signin/html.js';
import { ADDRESS_BLIND_ANSWER_MS } from '../../src/modules/auth/routes.js';
import { newApp, platformKey } from '../access/support.js';
import { oauthApp, REDIRECT } from './support.js';
import { flow } from './signin-support.js';

const NEW_PASSWORD = 'amber-lantern-orchard-77';
const COOKIE = 'platform_link';

let t: TestApp;
let admin: { user: TestUser; token: string };
before(async () => {
  t = await buildTestApp();
  admin = await userToken(t, { roles: ['superadmin'] });
});
after(() => t.close());

/** The path and query of the newest mail of this template to this address (what the user clicks). */
async function mailedLink(email: string, template: string): Promise<{ url: string; token: string }> {
  const mails: MailRow[] = await mailsTo(t, email, template);
  assert.ok(mails.length > 0, `no ${template} mail to ${email}`);
  const match = /https?:\/\/\S+\?token=\S+/.exec(mails[mails.length - 1].text_body);
  assert.ok(match, mails[mails.length - 1].text_body);
  const url = new URL(match[0]);
  return { url: `${url.pathname}${url.search}`, token: url.searchParams.get('token')! };
}

/** A browser without JavaScript: keeps the link pages' cookie (one per page path). */
class LinkBrowser {
  cookies = new Map<string, string>();

  private remember(res: InjectResponse, path: string): InjectResponse {
    const set = [res.headers['set-cookie'] ?? []].flat().map(String).find((c) => c.startsWith(`${COOKIE}=`));
    if (set) this.cookies.set(path, set.slice(COOKIE.length + 1).split(';')[0]);
    return res;
  }

  private headers(path: string): Record<string, string> {
    const secret = this.cookies.get(path);
    return secret ? { cookie: `${COOKIE}=${secret}` } : {};
  }

  async open(url: string): Promise<InjectResponse> {
    const path = url.split('?')[0];
    return this.remember(await t.app.inject({ method: 'GET', url, headers: this.headers(path) }), path);
  }

  async post(path: string, fields: Record<string, string>): Promise<InjectResponse> {
    return this.remember(
      await t.app.inject({
        method: 'POST',
        url: path,
        headers: { 'content-type': 'application/x-www-form-urlencoded', ...this.headers(path) },
        payload: new URLSearchParams(fields).toString(),
      }),
      path,
    );
  }

  /** Opens the link and submits its form (with `extra` fields, e.g. the password). */
  async follow(url: string, extra: Record<string, string> = {}): Promise<{ page: InjectResponse; done: InjectResponse }> {
    const path = url.split('?')[0];
    const page = await this.open(url);
    assertPage(page, 200);
    return { page, done: await this.post(path, { ...formOf(page, path), ...extra }) };
  }
}

function assertHeaders(res: InjectResponse, formAction: string): void {
  const csp = String(res.headers['content-security-policy']);
  assert.match(csp, /^default-src 'none'; style-src 'sha256-[A-Za-z0-9+/]+=*'; img-src https: data:; form-action [^;]+; frame-ancestors 'none'; base-uri 'none'$/);
  assert.ok(csp.includes(`form-action ${formAction};`), csp);
  assert.equal(res.headers['referrer-policy'], 'no-referrer');
  assert.equal(res.headers['cache-control'], 'no-store');
  assert.equal(res.headers['x-frame-options'], 'DENY');
  assert.equal(res.headers['x-content-type-options'], 'nosniff');
}

/** lang, a title naming the step, viewport, and the body's h1 the same as the title. */
function assertDocument(body: string, title: string): void {
  assert.match(body, /^<!doctype html>\n<html lang="en">/);
  assert.ok(body.includes(`<title>${title}</title>`), `title ${title}: ${body}`);
  assert.ok(body.includes('<meta name="viewport" content="width=device-width, initial-scale=1">'));
  assert.ok(body.includes(`<h1>${title}</h1>`));
  assert.ok(!body.includes('<script'), 'no script');
}

const INVALID = 'This link is invalid or has expired.';
const userRow = async (id: string) => (await sql(t, 'SELECT status, email, pending_email, email_verified FROM users WHERE id = $1', [id]))[0];
const signup = async (email: string) => {
  const res = await call(t, 'POST', '/v1/auth/signup', null, { email, password: PASSWORD });
  assert.equal(res.statusCode, 201, res.body);
  return res.json().user_id ?? res.json().user?.id ?? (await sql(t, 'SELECT id FROM users WHERE email = $1', [email]))[0].id;
};
const loginStatus = async (email: string, password: string) => (await call(t, 'POST', '/v1/auth/login', null, { email, password })).statusCode;
const invite = async (email: string) => {
  const res = await call(t, 'POST', '/v1/users', admin.token, { email });
  assert.equal(res.statusCode, 201, res.body);
  return res.json().id as string;
};

test('verify-email: the signup mail\'s link opens a page with one button (token and CSRF token hidden); the GET uses nothing up; the POST verifies; the link then shows the error page', async () => {
  const email = uniqueEmail('verify');
  const id = await signup(email);
  const { url, token } = await mailedLink(email, 'email_verification');
  assert.match(url, /^\/verify-email\?token=/);
  const browser = new LinkBrowser();
  const page = await browser.open(url);
  const body = assertPage(page, 200);
  assertDocument(body, 'Verify your email address');
  assertHeaders(page, "'self'");
  assert.ok(body.includes('<button type="submit" autofocus>Verify email address</button>'));
  assert.deepEqual(formOf(page, '/verify-email'), { token, csrf: formOf(page, '/verify-email').csrf });
  assert.match(String(page.headers['set-cookie']), /^platform_link=[A-Za-z0-9_-]{43}; Path=\/verify-email; HttpOnly; SameSite=Lax$/);
  // A scanner's GETs (and a reload) change nothing.
  await browser.open(url);
  await t.app.inject({ method: 'GET', url });
  assert.equal((await userRow(id)).email_verified, false);

  const done = await browser.post('/verify-email', formOf(page, '/verify-email'));
  const doneBody = assertPage(done, 200);
  assertDocument(doneBody, 'Email address verified');
  assert.ok(doneBody.includes('Your email address is verified.'));
  assertHeaders(done, "'none'");
  assert.equal((await userRow(id)).email_verified, true);

  // Used: the POST again and the link again are the 400 error page, with no form.
  for (const res of [await browser.post('/verify-email', formOf(page, '/verify-email')), await browser.open(url)]) {
    const error = assertPage(res, 400, INVALID);
    assertDocument(error, 'This link is invalid or has expired');
    assert.ok(!error.includes('<form'), 'no form on an error page');
    assertHeaders(res, "'none'");
  }
});

test('verify-email: after the page was opened the API verb still takes the token (the GET did not use it)', async () => {
  const email = uniqueEmail('verifyapi');
  const id = await signup(email);
  const { url, token } = await mailedLink(email, 'email_verification');
  assertPage(await new LinkBrowser().open(url), 200);
  assert.equal((await call(t, 'POST', '/v1/auth/email/verify', null, { token })).statusCode, 204);
  assert.equal((await userRow(id)).email_verified, true);
});

test('verify-email of an account deleted since the mail: the link is the 400 page "invalid or has expired" on GET (no form) and on POST, as the API verb refuses the token', async () => {
  const email = uniqueEmail('gone');
  const id = await signup(email);
  const { url, token } = await mailedLink(email, 'email_verification');
  const browser = new LinkBrowser();
  const page = await browser.open(url);
  assertPage(page, 200);
  assert.equal((await call(t, 'DELETE', `/v1/users/${id}`, admin.token)).statusCode, 204);
  const opened = await browser.open(url);
  assert.ok(!assertPage(opened, 400, INVALID).includes('<form'), 'no form for a deleted account');
  assertPage(await browser.post('/verify-email', formOf(page, '/verify-email')), 400, INVALID);
  assertError(await call(t, 'POST', '/v1/auth/email/verify', null, { token }), 400, 'invalid_token');
  assert.equal((await userRow(id)).email_verified, false);
});

test('a link\'s token opens only its own page: a verification link\'s token on /reset-password or /accept-invitation is the 400 page "invalid or has expired" (no form) and uses nothing up', async () => {
  const email = uniqueEmail('crossed');
  const id = await signup(email);
  const { token } = await mailedLink(email, 'email_verification');
  for (const path of ['/reset-password', '/accept-invitation']) {
    const res = await new LinkBrowser().open(`${path}?token=${encodeURIComponent(token)}`);
    assert.ok(!assertPage(res, 400, INVALID).includes('<form'), path);
  }
  assert.equal((await call(t, 'POST', '/v1/auth/email/verify', null, { token })).statusCode, 204, 'the token is still good for its own page');
  assert.equal((await userRow(id)).email_verified, true);
});

test('verify-email of an email change: the change completes; a verb error (email_taken) is a page saying it', async () => {
  const { user, token: access } = await userToken(t);
  const newEmail = uniqueEmail('moved');
  assert.equal((await call(t, 'PATCH', '/v1/users/me', access, { email: newEmail })).statusCode, 200);
  const link = await mailedLink(newEmail, 'email_change_verification');
  const { done } = await new LinkBrowser().follow(link.url);
  assertPage(done, 200);
  assert.equal((await userRow(user.id)).email, newEmail);

  const other = await userToken(t);
  const contested = uniqueEmail('contested');
  assert.equal((await call(t, 'PATCH', '/v1/users/me', other.token, { email: contested })).statusCode, 200);
  const second = await mailedLink(contested, 'email_change_verification');
  await createUser(t, { email: contested });
  const taken = (await new LinkBrowser().follow(second.url)).done;
  assertPage(taken, 409, 'That email address is already in use.');
  assert.ok(!taken.body.includes('<form'));
  assert.equal((await userRow(other.user.id)).email, other.user.email, 'nothing changed');
});

test('reset-password: the form (label, new-password, minlength 12 and no maxlength), a weak password shows the form again with the reason and never echoes it; the POST changes the password; the link is then dead', async () => {
  const email = `o'neil&co-${uniqueEmail('reset')}`;
  const user = await createUser(t, { email });
  assert.equal((await call(t, 'POST', '/v1/auth/password/forgot', null, { email })).statusCode, 202);
  const { url, token } = await mailedLink(email, 'password_reset');
  assert.match(url, /^\/reset-password\?token=/);
  const browser = new LinkBrowser();
  const page = await browser.open(url);
  const body = assertPage(page, 200);
  assertDocument(body, 'Choose a new password');
  assertHeaders(page, "'self'");
  assert.ok(body.includes('<label for="password">New password</label>'));
  assert.match(body, /<input id="password" name="password" type="password" autocomplete="new-password" minlength="12" required autofocus>/);
  assert.ok(body.includes(`<strong>o&#39;neil&amp;co-`), 'the address is escaped');
  assert.ok(!body.includes(`o'neil&co`), 'never raw');
  assert.equal(formOf(page, '/reset-password').token, token);

  const weak = 'password1234';
  const refused = await browser.post('/reset-password', { ...formOf(page, '/reset-password'), password: weak });
  const refusedBody = assertPage(refused, 422, /too common/);
  assert.ok(!refusedBody.includes(weak), 'the password is never echoed');
  assert.match(refusedBody, /<input id="password" name="password" type="password" autocomplete="new-password" minlength="12" required aria-invalid="true" aria-describedby="signin-error" autofocus>/);
  const short = await browser.post('/reset-password', { ...formOf(refused, '/reset-password'), password: '<b>short' });
  assert.ok(!assertPage(short, 422, 'The password is too short: use at least 12 characters.').includes('short<'), 'not echoed');
  assert.ok(!short.body.includes('<b>short') && !short.body.includes('&lt;b&gt;short'));
  assert.equal(await loginStatus(email, PASSWORD), 200, 'nothing changed yet');

  const done = await browser.post('/reset-password', { ...formOf(short, '/reset-password'), password: NEW_PASSWORD });
  const doneBody = assertPage(done, 200);
  assert.ok(doneBody.includes('Your password is changed. Sign in with it.'));
  assert.ok(!doneBody.includes(NEW_PASSWORD));
  assert.equal(await loginStatus(email, NEW_PASSWORD), 200);
  assert.equal(await loginStatus(email, PASSWORD), 401);
  assertPage(await browser.post('/reset-password', { ...formOf(short, '/reset-password'), password: 'another-fine-password-9' }), 400, INVALID);
  assertPage(await browser.open(url), 400, INVALID);
  assert.equal(await loginStatus(email, NEW_PASSWORD), 200, 'the used link changed nothing');
  assert.ok(user.id);
});

test('reset-password: a password over 1,024 characters is the 400 page (malformed, never echoed) and uses nothing up; one of 1,024 reaches the policy (422 too long)', async () => {
  const user = await createUser(t);
  assert.equal((await call(t, 'POST', '/v1/auth/password/forgot', null, { email: user.email })).statusCode, 202);
  const { url } = await mailedLink(user.email, 'password_reset');
  const browser = new LinkBrowser();
  const page = await browser.open(url);
  assertPage(page, 200);
  const over = await browser.post('/reset-password', { ...formOf(page, '/reset-password'), password: 'p'.repeat(1025) });
  assert.ok(!assertPage(over, 400, /malformed/).includes('p'.repeat(129)), 'never echoed');
  const atLimit = await browser.post('/reset-password', { ...formOf(page, '/reset-password'), password: 'p'.repeat(1024) });
  assertPage(atLimit, 422, 'The password is too long: use at most 128 characters.');
  assert.equal(await loginStatus(user.email, PASSWORD), 200, 'nothing changed');
  assertPage(await browser.post('/reset-password', { ...formOf(atLimit, '/reset-password'), password: NEW_PASSWORD }), 200);
  assert.equal(await loginStatus(user.email, NEW_PASSWORD), 200);
});

test('reset-password: the API verb still takes the token after the page was opened', async () => {
  const user = await createUser(t);
  assert.equal((await call(t, 'POST', '/v1/auth/password/forgot', null, { email: user.email })).statusCode, 202);
  const { url, token } = await mailedLink(user.email, 'password_reset');
  assertPage(await new LinkBrowser().open(url), 200);
  assert.equal((await call(t, 'POST', '/v1/auth/password/reset', null, { token, password: NEW_PASSWORD })).statusCode, 204);
  assert.equal(await loginStatus(user.email, NEW_PASSWORD), 200);
});

test('accept-invitation: the invitation\'s link opens the password form; the POST activates the user (no cookie, no live session); the link is then dead', async () => {
  const email = uniqueEmail('invitee');
  const id = await invite(email);
  const { url, token } = await mailedLink(email, 'invitation');
  assert.match(url, /^\/accept-invitation\?token=/);
  const browser = new LinkBrowser();
  const page = await browser.open(url);
  const body = assertPage(page, 200);
  assertDocument(body, 'Accept your invitation');
  assertHeaders(page, "'self'");
  assert.match(body, /<label for="password">New password<\/label>\n<input id="password" name="password" type="password" autocomplete="new-password" minlength="12" required autofocus>/);
  await t.app.inject({ method: 'GET', url });
  assert.equal((await userRow(id)).status, 'invited', 'the GETs changed nothing');

  const done = await browser.post('/accept-invitation', { ...formOf(page, '/accept-invitation'), password: NEW_PASSWORD });
  assert.ok(assertPage(done, 200).includes('Your account is ready'));
  assert.equal(done.headers['set-cookie'], undefined, 'no session cookie');
  assert.equal((await userRow(id)).status, 'active');
  const live = await sql(t, 'SELECT id FROM sessions WHERE user_id = $1 AND revoked_at IS NULL', [id]);
  assert.deepEqual(live, [], 'the page signs no one in');
  assert.equal(await loginStatus(email, NEW_PASSWORD), 200);
  assertPage(await browser.open(url), 400, INVALID);
  assertPage(await browser.post('/accept-invitation', { ...formOf(page, '/accept-invitation'), password: 'another-fine-password-9' }), 400, INVALID);
  assert.equal(await loginStatus(email, NEW_PASSWORD), 200, 'the used link changed nothing');
  // The API verb after a GET: a second invitee.
  const other = uniqueEmail('invitee2');
  await invite(other);
  const second = await mailedLink(other, 'invitation');
  assertPage(await new LinkBrowser().open(second.url), 200);
  assert.equal((await call(t, 'POST', '/v1/auth/invitations/accept', null, { token: second.token, password: NEW_PASSWORD })).statusCode, 200);
  assert.ok(token);
});

test('accept-invitation: the page signs no one in, so it starts no session: no session row (not even an ended one) and last_login_at stays null (Part A: "Set when a session is actually issued")', async () => {
  const email = uniqueEmail('invitee');
  const id = await invite(email);
  const { url } = await mailedLink(email, 'invitation');
  const browser = new LinkBrowser();
  const page = await browser.open(url);
  const done = await browser.post('/accept-invitation', { ...formOf(page, '/accept-invitation'), password: NEW_PASSWORD });
  assert.ok(assertPage(done, 200).includes('Your account is ready'));
  assert.equal((await userRow(id)).status, 'active');
  assert.deepEqual(await sql(t, 'SELECT id FROM sessions WHERE user_id = $1', [id]), [], 'no session was started');
  const [row] = await sql(t, 'SELECT last_login_at FROM users WHERE id = $1', [id]);
  assert.equal(row.last_login_at, null);
  const [audit] = await sql(t, `SELECT count(*)::int AS n FROM audit_events WHERE action = 'user.invitation_accepted' AND target_user_id = $1`, [id]);
  assert.equal(audit.n, 1, 'the acceptance is audited as by the API verb');
  // The API verb signs in: its session sets last_login_at.
  const other = uniqueEmail('invitee2');
  const otherId = await invite(other);
  const second = await mailedLink(other, 'invitation');
  assert.equal((await call(t, 'POST', '/v1/auth/invitations/accept', null, { token: second.token, password: NEW_PASSWORD })).statusCode, 200);
  assert.notEqual((await sql(t, 'SELECT last_login_at FROM users WHERE id = $1', [otherId]))[0].last_login_at, null);
});

test('an expired link is the 400 error page on GET and POST and changes nothing', async () => {
  const email = uniqueEmail('late');
  const id = await signup(email);
  const { url } = await mailedLink(email, 'email_verification');
  const browser = new LinkBrowser();
  const page = await browser.open(url);
  assertPage(page, 200);
  t.clock.advance(25 * 3600);
  assertPage(await browser.open(url), 400, INVALID);
  assertPage(await browser.post('/verify-email', formOf(page, '/verify-email')), 400, INVALID);
  assert.equal((await userRow(id)).email_verified, false);
  // Fresh sign-in token for later tests (the admin's access token expired with the clock).
  admin.token = (await call(t, 'POST', '/v1/auth/login', null, { email: admin.user.email, password: admin.user.password })).json().access_token;
});

test('CSRF: a POST without the page cookie or with a missing or wrong form token is a 403 page and uses nothing up', async () => {
  const user = await createUser(t);
  assert.equal((await call(t, 'POST', '/v1/auth/password/forgot', null, { email: user.email })).statusCode, 202);
  const { url, token } = await mailedLink(user.email, 'password_reset');
  const browser = new LinkBrowser();
  const page = await browser.open(url);
  const fields: Record<string, string> = { ...formOf(page, '/reset-password'), password: NEW_PASSWORD };
  const { csrf: _, ...noToken } = fields;
  const stranger = new LinkBrowser();
  const strangerFields = formOf(await stranger.open(url), '/reset-password');
  const cases: [string, LinkBrowser, Record<string, string>][] = [
    ['no cookie', new LinkBrowser(), fields],
    ['no token', browser, noToken],
    ['a wrong token', browser, { ...fields, csrf: 'A'.repeat(43) }],
    ["another browser's token", browser, { ...fields, csrf: strangerFields.csrf }],
  ];
  for (const [label, b, body] of cases) {
    const res = await b.post('/reset-password', body);
    assertPage(res, 403, 'This form has expired or was not sent from this page.');
    assert.ok(!res.body.includes('<form'), label);
    assert.ok(!res.body.includes(NEW_PASSWORD), label);
  }
  // Another link page's form token (same cookie secret) does not stand in, nor does the sign-in page's cookie.
  const secret = browser.cookies.get('/reset-password')!;
  assertPage(await browser.post('/reset-password', { ...fields, csrf: csrfToken(secret, 'link:verify_email') }), 403);
  assertPage(await browser.post('/reset-password', { ...fields, csrf: csrfToken(secret, 'password') }), 403);
  const signinCookie = await t.app.inject({
    method: 'POST', url: '/reset-password', headers: { 'content-type': 'application/x-www-form-urlencoded', cookie: `platform_signin=${secret}` },
    payload: new URLSearchParams(fields).toString(),
  });
  assertPage(signinCookie, 403);
  for (const path of ['/verify-email', '/accept-invitation']) assertPage(await new LinkBrowser().post(path, { token, csrf: '' }), 403);
  assert.equal(await loginStatus(user.email, NEW_PASSWORD), 401, 'nothing was changed');
  assert.equal((await call(t, 'POST', '/v1/auth/password/reset', null, { token, password: NEW_PASSWORD })).statusCode, 204, 'the token is still good');
});

test('the link and forgot-password pages\' 400 page names only parameters they know: a parameter of the link-maker\'s naming that holds U+0000 is "a parameter", in the URL and in a form', async () => {
  const spoof = encodeURIComponent('Your account is locked. Call +1 800 555 0100');
  for (const path of ['/verify-email', '/reset-password', '/accept-invitation', '/forgot-password']) {
    const res = await t.app.inject({ method: 'GET', url: `${path}?token=a&${spoof}=a%00b` });
    const body = assertPage(res, 400, /malformed/);
    assert.ok(body.includes('<code>a parameter</code>'), body);
    assert.ok(!body.includes('Your account is locked'), `${path}: ${body}`);
    const form = await t.app.inject({
      method: 'POST', url: path, headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload: `token=a&csrf=x&${spoof}=a%00b`,
    });
    assert.ok(!assertPage(form, 400, /malformed/).includes('Your account is locked'), `${path} form`);
  }
  assert.ok(assertPage(await t.app.inject({ method: 'GET', url: '/reset-password?token=a%00b' }), 400, /malformed/).includes('<code>token</code>'), 'a known name is still named');
});

test('bad input is a 400 page, never a 500: no token, a repeated token, U+0000, an over-long token, a bad escape; JSON to the form is refused', async () => {
  for (const path of ['/verify-email', '/reset-password', '/accept-invitation']) {
    const cases: [string, string | RegExp][] = [
      [path, INVALID],
      [`${path}?token=`, INVALID],
      [`${path}?token=a&token=b`, /malformed/],
      [`${path}?token=a%00b`, /malformed/],
      [`${path}?token=${'a'.repeat(201)}`, /malformed/],
      [`${path}?token=%FF`, /not validly encoded/],
      [`${path}?token=${encodeURIComponent('"><script>x</script>')}`, INVALID],
    ];
    for (const [url, message] of cases) {
      const res = await t.app.inject({ method: 'GET', url });
      assertPage(res, 400, message);
      assert.ok(!res.body.includes('<script>x'), url);
      assertHeaders(res, "'none'");
    }
    const browser = new LinkBrowser();
    await browser.open(`${path}?token=whatever`);
    const csrf = '';
    const repeated = await t.app.inject({
      method: 'POST', url: path, headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload: 'token=a&token=b&csrf=x',
    });
    assertPage(repeated, 400, /malformed/);
    const nul = await browser.post(path, { token: 'a\u0000b', csrf });
    assertPage(nul, 400, /malformed/);
    const json = await t.app.inject({ method: 'POST', url: path, payload: { token: 'x' } });
    assertPage(json, 403, 'This form has expired or was not sent from this page.');
  }
});

test('the request log never shows a link\'s token (query values named token are redacted)', async () => {
  const lines: string[] = [];
  const stream = new Writable({ write(chunk, _enc, done) { lines.push(String(chunk)); done(); } });
  const second = await boot({ config: t.config, database: t.database, clock: t.clock, logger: { level: 'info', stream } });
  try {
    await second.app.inject({ method: 'GET', url: '/verify-email?token=secret-token-value-123&x=1' });
    await second.app.inject({ method: 'GET', url: '/reset-password?a=1&token=secret-token-value-456' });
  } finally {
    await second.app.close();
    await second.deps.jobs.stop();
  }
  const log = lines.join('');
  assert.ok(log.includes('/verify-email?token=[redacted]&x=1'), log);
  assert.ok(log.includes('/reset-password?a=1&token=[redacted]'), log);
  assert.ok(!log.includes('secret-token-value'), log);
});

test('the POSTs share the per-IP auth throttle (a 429 page with Retry-After)', async () => {
  const limited = await buildTestApp({ authRateLimitPerMinute: 2 });
  try {
    alignToWindow(limited, 60, 1);
    const post = () => limited.app.inject({ method: 'POST', url: '/verify-email', headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload: 'token=x&csrf=y' });
    assertPage(await post(), 403);
    assertPage(await post(), 403);
    const res = await post();
    assertPage(res, 429);
    assert.ok(Number(res.headers['retry-after']) >= 1);
  } finally {
    await limited.close();
  }
});

test('every form POST of the link pages and /forgot-password counts against the per-IP auth throttle, each path with its own count: past AUTH_RATE_LIMIT_PER_MINUTE a 429 page with Retry-After and the pages\' headers', async () => {
  const limited = await buildTestApp({ authRateLimitPerMinute: 2 });
  try {
    alignToWindow(limited, 60, 1);
    const post = (url: string) => limited.app.inject({ method: 'POST', url, headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload: 'token=x&csrf=y&email=a%40example.com' });
    for (const url of ['/reset-password', '/accept-invitation', '/forgot-password']) {
      assertPage(await post(url), 403);
      assertPage(await post(url), 403);
      const res = await post(url);
      assertPage(res, 429);
      assert.ok(Number(res.headers['retry-after']) >= 1, url);
      assertHeaders(res, "'none'");
    }
  } finally {
    await limited.close();
  }
});

test('the password forms escape the address they are for: an invited address with a quote and an ampersand (which the API accepts) is text in the page and in the hidden username field', async () => {
  const email = `o'brien&co-${Date.now().toString(36)}@example.com`;
  await invite(email);
  const { url } = await mailedLink(email, 'invitation');
  const body = assertPage(await new LinkBrowser().open(url), 200);
  assert.ok(body.includes(`<p>For <strong>${escapeHtml(email)}</strong>.`), body);
  assert.ok(body.includes(`<input type="hidden" name="username" value="${escapeHtml(email)}" autocomplete="username">`), body);
  assert.ok(!body.includes(email), 'the address appears only escaped');
});

test('the API operations answer as before (JSON errors): the pages change nothing for API callers', async () => {
  assertError(await call(t, 'POST', '/v1/auth/email/verify', null, { token: 'nope' }), 400, 'invalid_token');
  // Form bodies stay refused on /v1 operations other than the OAuth token endpoint.
  const form = await t.app.inject({ method: 'POST', url: '/v1/auth/email/verify', headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload: 'token=x' });
  assertError(form, 415, 'unsupported_media_type');
});

// The hosted /forgot-password page, linked from the sign-in page's password step.

/** The /signin query of a fresh authorization request for a new Application (what the sign-in page links with). */
async function signinQuery(body: Record<string, unknown> = {}, mode: 'live' | 'test' = 'live'): Promise<string> {
  const application = mode === 'live'
    ? await oauthApp(t, await platformKey(t), body)
    : await newApp(t, await platformKey(t, undefined, 'test'), { redirect_uris: [REDIRECT], ...body }, { ownerMode: 'test' });
  return new URLSearchParams(flow(application.id).params).toString();
}

test('forgot-password: the page (email field with label, type=email, autocomplete=username; a submit button; CSRF token and the sign-in parameters hidden) links back to /signin with them', async () => {
  const query = await signinQuery({ name: 'Forgot <App>' });
  const browser = new LinkBrowser();
  const page = await browser.open(`/forgot-password?${query}`);
  const body = assertPage(page, 200);
  assertHeaders(page, "'self'");
  assert.match(String(page.headers['set-cookie']), /^platform_link=[A-Za-z0-9_-]{43}; Path=\/forgot-password; HttpOnly; SameSite=Lax$/);
  assert.match(body, /<label for="email">Email<\/label>\n<input id="email" name="email" type="email" autocomplete="username"[^>]* required[^>]*>/);
  assert.match(body, /<button type="submit">Email me a reset link<\/button>/);
  assert.match(body, /<title>Reset your password – Forgot &lt;App&gt;<\/title>/);
  const hidden = formOf(page, '/forgot-password');
  assert.equal(hidden.csrf, csrfToken(browser.cookies.get('/forgot-password')!, 'link:forgot_password'));
  assert.deepEqual(new URLSearchParams(hidden), new URLSearchParams({ ...Object.fromEntries(new URLSearchParams(query)), csrf: hidden.csrf }));
  assert.ok(body.includes(`<a href="/signin?${escapeHtml(query)}">Back to sign in</a>`), body);
  // Opened on its own: the same form, no way back to a sign-in request it does not know.
  const bare = assertPage(await new LinkBrowser().open('/forgot-password'), 200);
  assert.match(bare, /<input id="email" name="email" type="email" autocomplete="username"/);
  assert.ok(!bare.includes('/signin'), bare);
  // Sign-in parameters are checked as /signin checks them.
  const bad = await new LinkBrowser().open(`/forgot-password?${query.replace(/redirect_uri=[^&]+/, 'redirect_uri=https%3A%2F%2Fevil.example%2F')}`);
  assertPage(bad, 400, 'This sign-in request is not valid.');
});

test('forgot-password: a known and an unknown address get the same page (status and body), no sooner than the API\'s floor; only the known one queues a password_reset mail', async () => {
  const query = await signinQuery();
  const user = await createUser(t);
  const unknown = uniqueEmail('nobody');
  const answer = async (email: string) => {
    const browser = new LinkBrowser();
    const page = await browser.open(`/forgot-password?${query}`);
    const started = performance.now();
    const res = await browser.post('/forgot-password', { ...formOf(page, '/forgot-password'), email });
    return { res, ms: performance.now() - started };
  };
  const known = await answer(user.email);
  const stranger = await answer(unknown);
  for (const { res, ms } of [known, stranger]) {
    assertPage(res, 200);
    assert.ok(ms >= ADDRESS_BLIND_ANSWER_MS - 5, `answered after ${ms} ms`);
    assert.ok(res.body.includes('If an account exists for that address, we sent a link'), res.body);
    assert.ok(res.body.includes(`<a href="/signin?${escapeHtml(query)}">Back to sign in</a>`), res.body);
    assert.equal(res.headers['set-cookie'], undefined);
  }
  assert.equal(known.res.statusCode, stranger.res.statusCode);
  assert.equal(known.res.body, stranger.res.body);
  assert.ok(!known.res.body.includes(user.email) && !stranger.res.body.includes(unknown), 'the address is not echoed');
  assert.equal((await mailsTo(t, user.email, 'password_reset')).length, 1);
  assert.equal((await mailsTo(t, unknown)).length, 0);
  // The mailed link opens the reset page.
  const { url } = await mailedLink(user.email, 'password_reset');
  assertPage(await new LinkBrowser().open(url), 200);
});

test('forgot-password: the Application\'s mode is the mode, as on /signin (a test Application mails its test user, not the live one)', async () => {
  const query = await signinQuery({}, 'test');
  const email = uniqueEmail('modes');
  await createUser(t, { email, mode: 'test' });
  const browser = new LinkBrowser();
  const page = await browser.open(`/forgot-password?${query}`);
  assertPage(await browser.post('/forgot-password', { ...formOf(page, '/forgot-password'), email }), 200);
  const mails = await sql<{ test_mode: boolean }>(t, `SELECT test_mode FROM emails WHERE lower(to_address) = lower($1) AND template = 'password_reset'`, [email]);
  assert.deepEqual(mails.map((m) => m.test_mode), [true]);
  // The test user's reset link opens its form (the address read in the token's mode), and sets the password.
  const link = await mailedLink(email, 'password_reset');
  const reset = new LinkBrowser();
  const resetPage = await reset.open(link.url);
  assert.ok(assertPage(resetPage, 200).includes(escapeHtml(email)), 'the form names the test user');
  assertPage(await reset.post('/reset-password', { ...formOf(resetPage, '/reset-password'), password: NEW_PASSWORD }), 200);
  // Opened without sign-in parameters the page is live: the test user is unknown there.
  const liveOnly = uniqueEmail('testonly');
  await createUser(t, { email: liveOnly, mode: 'test' });
  const bare = new LinkBrowser();
  const form = await bare.open('/forgot-password');
  assertPage(await bare.post('/forgot-password', { ...formOf(form, '/forgot-password'), email: liveOnly }), 200);
  assert.equal((await mailsTo(t, liveOnly)).length, 0);
});

test('forgot-password: CSRF: without the page cookie, or with a missing, wrong or other page\'s form token, the POST is a 403 page and mails nothing', async () => {
  const user = await createUser(t);
  const browser = new LinkBrowser();
  const page = await browser.open('/forgot-password');
  const fields: Record<string, string> = { ...formOf(page, '/forgot-password'), email: user.email };
  const { csrf: _, ...noToken } = fields;
  const secret = browser.cookies.get('/forgot-password')!;
  const cases: [string, LinkBrowser, Record<string, string>][] = [
    ['no cookie', new LinkBrowser(), fields],
    ['no token', browser, noToken],
    ['a wrong token', browser, { ...fields, csrf: 'A'.repeat(43) }],
    ['the reset page\'s token', browser, { ...fields, csrf: csrfToken(secret, 'link:reset_password') }],
  ];
  for (const [label, b, body] of cases) {
    const res = await b.post('/forgot-password', body);
    assertPage(res, 403, 'This form has expired or was not sent from this page.');
    assert.ok(!res.body.includes('<form'), label);
  }
  assert.equal((await mailsTo(t, user.email)).length, 0, 'nothing was mailed');
  // A blank address is the form again, saying so (and the title says Error).
  const blank = await browser.post('/forgot-password', { ...fields, email: ' ' });
  assert.match(assertPage(blank, 422, 'Enter your email address.'), /<title>Error: Reset your password<\/title>/);
});
