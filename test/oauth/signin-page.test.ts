// The hosted sign-in page (/signin): request validation, headers, the page cookie and CSRF. Every bad
// request is an HTML error page (400) that never redirects and never links to the redirect_uri.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { member, oauthApp, REDIRECT } from './support.js';
import { platformKey, setReview, sql, type AppFixture } from '../access/support.js';
import { signinSite } from '../../src/modules/signin/browser.js';
import { assertPage, Browser, COOKIE, flow, formOf, setCookieHeader, signinUrl } from './signin-support.js';
import { requestQuery } from '../../src/modules/signin/params.js';
import { escapeHtml } from '../../src/modules/signin/html.js';
import { createMfaUser } from '../auth/support.js';
import { createUser, uniqueEmail } from '../helpers/fixtures.js';

let t: TestApp;
let admin: string;
let app: AppFixture;
before(async () => {
  t = await buildTestApp();
  admin = await platformKey(t);
  app = await oauthApp(t, admin, { name: 'Acme <Notes> & "Co"', icon_url: 'https://cdn.example.com/acme.png' });
});
after(() => t.close());

const get = (url: string) => t.app.inject({ method: 'GET', url });

/** 400 error page naming `field`, with no link to any redirect URI. */
function assertBadRequest(res: Awaited<ReturnType<typeof get>>, field: string): void {
  const body = assertPage(res, 400, 'This sign-in request is');
  assert.ok(body.includes(`<code>${field}</code>`), `expected the field ${field} named: ${body}`);
  assert.ok(!/<a /.test(body) && !/<form/.test(body), 'an error page has no links and no forms');
  assert.match(String(res.headers['content-security-policy']), /form-action 'none'/);
}

test('GET /signin renders the sign-in form: the Application name (escaped) and icon, the request in hidden fields, labels and autocomplete', async () => {
  const { params } = flow(app.id, { state: 'x"><script>alert(1)</script>' });
  const res = await get(signinUrl(params));
  const body = assertPage(res, 200);
  assert.match(body, /^<!doctype html>\n<html lang="en">/);
  assert.ok(body.includes('<title>Sign in – Acme &lt;Notes&gt; &amp; &quot;Co&quot;</title>'), 'body.includes(\'<title>Sign in \u2013 Acme &lt;Notes&gt; &amp; &quot;Co&quot;</title>\')');
  assert.ok(body.includes('<strong>Acme &lt;Notes&gt; &amp; &quot;Co&quot;</strong>'), 'body.includes(\'<strong>Acme &lt;Notes&gt; &amp; &quot;Co&quot;</strong>\')');
  assert.ok(!body.includes('<script>'), 'nothing supplied is ever markup');
  assert.ok(body.includes('<img src="https://cdn.example.com/acme.png" alt=""'), 'body.includes(\'<img src="https://cdn.example.com/acme.png" alt=""\')');
  assert.match(body, /<label for="email">Email<\/label>\n<input id="email" name="email" type="email" autocomplete="username"/);
  assert.match(body, /<label for="password">Password<\/label>\n<input id="password" name="password" type="password" autocomplete="current-password"/);
  const hidden = formOf(res, '/signin');
  assert.deepEqual(Object.keys(hidden).sort(), ['application_id', 'code_challenge', 'code_challenge_method', 'csrf', 'redirect_uri', 'state']);
  assert.equal(hidden.state, params.state, 'the state survives verbatim');
  assert.equal(hidden.redirect_uri, REDIRECT);
});

test('headers: CSP (nothing external, style by hash, form-action self plus the redirect origin, no framing), X-Frame-Options, Referrer-Policy, no-store', async () => {
  const res = await get(signinUrl(flow(app.id).params));
  assertPage(res, 200);
  const csp = String(res.headers['content-security-policy']);
  assert.match(csp, /default-src 'none'/);
  assert.match(csp, /style-src 'sha256-[A-Za-z0-9+/]+=*'/);
  assert.match(csp, /img-src https: data:/);
  assert.match(csp, /form-action 'self' https:\/\/app\.example\.com(;|$)/);
  assert.match(csp, /frame-ancestors 'none'/);
  assert.match(csp, /base-uri 'none'/);
  assert.ok(!/script-src|unsafe-inline/.test(csp), '!/script-src|unsafe-inline/.test(csp)');
  assert.equal(res.headers['x-frame-options'], 'DENY');
  assert.equal(res.headers['referrer-policy'], 'no-referrer');
  assert.equal(res.headers['cache-control'], 'no-store');
  assert.equal(res.headers['x-content-type-options'], 'nosniff');
  // A private-use scheme redirect URI is allowed as a scheme source.
  const native = await oauthApp(t, admin, { redirect_uris: ['com.example.notes:/callback'] });
  const nres = await get(signinUrl(flow(native.id, { redirect_uri: 'com.example.notes:/callback' }).params));
  assertPage(nres, 200);
  assert.match(String(nres.headers['content-security-policy']), /form-action 'self' com\.example\.notes:;/);
});

test('the page cookie: HttpOnly, SameSite=Lax, Path=/signin; not Secure on http://localhost or 127.0.0.1 (https: signin-https.test.ts)', async () => {
  const cookie = setCookieHeader(await get(signinUrl(flow(app.id).params)));
  assert.match(String(cookie), /^platform_signin=[A-Za-z0-9_-]{43}; Path=\/signin; HttpOnly; SameSite=Lax$/);
  // Only loopback http goes without Secure; plain http elsewhere keeps it (the browser then refuses the cookie).
  for (const [publicUrl, expected] of [['http://127.0.0.1:8080', false], ['http://[::1]:8080', false], ['http://id.example.com', true], ['https://localhost', true]] as const) {
    assert.equal(signinSite(publicUrl).secure, expected, publicUrl);
  }
  assert.deepEqual(signinSite('https://id.example.com/auth/').paths, { signin: '/auth/signin', mfa: '/auth/signin/mfa', continue: '/auth/signin/continue', forgot: '/auth/forgot-password' });
  // A browser that already has a well-formed cookie keeps it.
  const browser = new Browser(t);
  await browser.open(flow(app.id).params);
  const again = await browser.open(flow(app.id).params);
  assert.equal(setCookieHeader(again), undefined);
});

test('a malformed page cookie counts as none: GET /signin issues a fresh one (32 random bytes)', async () => {
  for (const cookie of ['platform_signin=short', `platform_signin=${'a'.repeat(44)}`]) {
    const res = await t.app.inject({ method: 'GET', url: signinUrl(flow(app.id).params), headers: { cookie } });
    assertPage(res, 200);
    assert.match(String(setCookieHeader(res)), /^platform_signin=[A-Za-z0-9_-]{43}; /, cookie);
  }
});

test('400 without redirect: missing or unknown Application, client_id disagreeing with application_id, response_type other than code', async () => {
  const { params } = flow(app.id);
  const { application_id: _, ...noApp } = params;
  assertBadRequest(await get(signinUrl(noApp)), 'application_id');
  assertBadRequest(await get(signinUrl({ ...params, application_id: 'app_nosuchapp' })), 'application_id');
  assertBadRequest(await get(signinUrl({ ...params, client_id: 'app_other' })), 'client_id');
  assertBadRequest(await get(signinUrl({ ...params, response_type: 'token' })), 'response_type');
  // The standard OAuth names work: client_id alone, response_type=code, unknown parameters ignored.
  assertPage(await get(signinUrl({ ...noApp, client_id: app.id, response_type: 'code', scope: 'openid', nonce: 'n' })), 200);
});

test('400 without redirect: redirect_uri missing, not byte-identical to a registered one, or none registered (OA-3)', async () => {
  const { params } = flow(app.id);
  const variants = [
    `${REDIRECT}/`, `${REDIRECT}?x=1`, `${REDIRECT}#f`, 'https://APP.example.com/callback', 'https://app.example.com/Callback',
    'https://app.example.com%2Fcallback', 'https://app.example.com:444/callback', 'http://app.example.com/callback',
    'https://app.example.com@evil.example.com/callback', 'https://app.example.com/cb/../callback', 'https://evil.example.com/callback', '',
  ];
  for (const uri of variants) {
    const res = await get(signinUrl({ ...params, redirect_uri: uri }));
    assertBadRequest(res, 'redirect_uri');
    if (uri) assert.ok(!res.body.includes(`href="${uri}`), uri);
  }
  const bare = await oauthApp(t, admin, { redirect_uris: [] });
  const body = assertPage(await get(signinUrl({ ...params, application_id: bare.id })), 400);
  assert.ok(body.includes('has no registered redirect URIs'), 'body.includes(\'has no registered redirect URIs\')');
});

test('400 without redirect: an Application not approved, or whose Tenant is suspended', async () => {
  const paused = await oauthApp(t, admin);
  await setReview(t, paused.id, 'suspended');
  assertBadRequest(await get(signinUrl(flow(paused.id).params)), 'application_id');
  const frozen = await oauthApp(t, admin);
  await sql(t, 'UPDATE tenants SET suspended = true WHERE id = $1', [frozen.tenant_id]);
  assertBadRequest(await get(signinUrl(flow(frozen.id).params)), 'application_id');
});

test('Part B "non-approved applications are visible only to owner, own key and applications.manage": the page answers for one (pending_review, rejected, suspended) exactly as for an unknown id, showing neither its name nor its redirect URIs', async () => {
  const unknown = assertPage(await get(signinUrl(flow('app_nosuchapp').params)), 400);
  for (const status of ['pending_review', 'rejected', 'suspended']) {
    const hidden = await oauthApp(t, admin, { name: `Secret Project ${status}`, redirect_uris: [] });
    await setReview(t, hidden.id, status);
    const res = await get(signinUrl(flow(hidden.id).params));
    assertBadRequest(res, 'application_id');
    assert.equal(res.body, unknown, status);
    assert.ok(!res.body.includes('Secret Project'), status);
  }
});

test('400 without redirect: PKCE (challenge missing, 42 or 129 characters, bad characters; method missing or plain) and state over 512', async () => {
  const { params } = flow(app.id);
  const { code_challenge: _c, ...noChallenge } = params;
  const { code_challenge_method: _m, ...noMethod } = params;
  assertBadRequest(await get(signinUrl(noChallenge)), 'code_challenge');
  for (const challenge of ['a'.repeat(42), 'a'.repeat(129), `${'a'.repeat(42)}+`, `${'a'.repeat(42)}=`]) {
    assertBadRequest(await get(signinUrl({ ...params, code_challenge: challenge })), 'code_challenge');
  }
  assertPage(await get(signinUrl({ ...params, code_challenge: 'a'.repeat(128) })), 200);
  assertBadRequest(await get(signinUrl(noMethod)), 'code_challenge_method');
  assertBadRequest(await get(signinUrl({ ...params, code_challenge_method: 'plain' })), 'code_challenge_method');
  assertBadRequest(await get(signinUrl({ ...params, code_challenge_method: 's256' })), 'code_challenge_method');
  assertBadRequest(await get(signinUrl({ ...params, state: 's'.repeat(513) })), 'state');
  assertPage(await get(signinUrl({ ...params, state: 's'.repeat(512) })), 200);
});

test('400 without redirect: a repeated parameter; several problems are listed together', async () => {
  const { params } = flow(app.id);
  assertBadRequest(await get(`${signinUrl(params)}&state=again`), 'state');
  const res = await get(signinUrl({ application_id: app.id, code_challenge_method: 'plain', state: 's'.repeat(600) }));
  for (const field of ['redirect_uri', 'code_challenge', 'code_challenge_method', 'state']) assertBadRequest(res, field);
});

test('400 without redirect: a parameter holding U+0000 (application_id, client_id, state; in the URL or a POST form) is the 400 page naming it, with no sign-in attempt', async () => {
  const { params } = flow(app.id);
  assertBadRequest(await get(signinUrl({ ...params, application_id: `${app.id}\u0000` })), 'application_id');
  const { application_id: _omit, ...rest } = params;
  assertBadRequest(await get(signinUrl({ ...rest, client_id: '\u0000' })), 'client_id');
  assertBadRequest(await get(signinUrl({ ...params, state: 'a\u0000b' })), 'state');
  const user = await member(t, admin, app.id);
  const browser = new Browser(t);
  const page = await browser.open(params);
  const res = await t.app.inject({
    method: 'POST',
    url: '/signin',
    headers: { 'content-type': 'application/x-www-form-urlencoded', cookie: `${COOKIE}=${browser.cookie}` },
    payload: new URLSearchParams({ ...formOf(page, '/signin'), application_id: `${app.id}\u0000`, email: user.email, password: user.password }).toString(),
  });
  assertBadRequest(res, 'application_id');
  assert.equal(res.headers.location, undefined);
  assert.equal((await sql(t, 'SELECT 1 FROM sessions WHERE user_id = $1', [user.id])).length, 1, 'no sign-in: only the fixture session');
});

test('the 400 page names only parameters the page knows: a parameter of the link-maker\'s naming that holds U+0000 is "a parameter", so no text of theirs stands in the page\'s alert', async () => {
  const { params } = flow(app.id);
  const spoof = 'Your account is locked. Call +1 800 555 0100';
  const res = await get(`${signinUrl(params)}&${encodeURIComponent(spoof)}=a%00b`);
  assertBadRequest(res, 'a parameter');
  assert.ok(!res.body.includes('Your account is locked'), res.body);
  assertBadRequest(await get(signinUrl({ ...params, state: 'a\u0000b' })), 'state');
});

test('state is counted in characters (code points) as the API counts it: 512 emoji are accepted, 513 are the 400 page', async () => {
  const ok = flow(app.id, { state: '😀'.repeat(512) });
  assertPage(await get(signinUrl(ok.params)), 200);
  assertBadRequest(await get(signinUrl(flow(app.id, { state: '😀'.repeat(513) }).params)), 'state');
});

test('a parameter repeated in a POST form body is the 400 page too, with no sign-in attempt and no redirect', async () => {
  const user = await member(t, admin, app.id);
  const browser = new Browser(t);
  const page = await browser.open(flow(app.id).params);
  const fields = new URLSearchParams({ ...formOf(page, '/signin'), email: user.email, password: user.password });
  fields.append('state', 'second-state');
  const res = await t.app.inject({
    method: 'POST',
    url: '/signin',
    headers: { 'content-type': 'application/x-www-form-urlencoded', cookie: `${COOKIE}=${browser.cookie}` },
    payload: fields.toString(),
  });
  assertBadRequest(res, 'state');
  assert.equal(res.headers.location, undefined);
  assert.equal((await sql(t, 'SELECT 1 FROM sessions WHERE user_id = $1', [user.id])).length, 1, 'no sign-in: only the fixture session');
});

test('POST forms re-check the request: tampered hidden fields (unregistered redirect_uri, plain method) are the 400 page, with no sign-in attempt', async () => {
  const user = await member(t, admin, app.id);
  const browser = new Browser(t);
  const page = await browser.open(flow(app.id).params);
  const hidden = formOf(page, '/signin');
  const tampered: Record<string, string>[] = [{ redirect_uri: 'https://evil.example.com/callback' }, { code_challenge_method: 'plain' }, { application_id: 'app_nosuchapp' }];
  for (const change of tampered) {
    const res = await browser.post('/signin', { ...hidden, ...change, email: user.email, password: 'wrong-password-123' });
    assertPage(res, 400, 'This sign-in request is not valid.');
  }
  // recent_failures is what the lockout counts (failed_attempts is a column no sign-in writes any more).
  const [identity] = await sql(t, `SELECT cardinality(recent_failures) AS failures FROM identities WHERE user_id = $1 AND method = 'password'`, [user.id]);
  assert.equal(identity.failures, 0, 'no password was checked');
});

test('CSRF: every POST needs the page cookie and its form token; otherwise 403 and nothing is tried', async () => {
  const user = await member(t, admin, app.id);
  const browser = new Browser(t);
  const page = await browser.open(flow(app.id).params);
  const hidden = formOf(page, '/signin');
  const fields: Record<string, string> = { ...hidden, email: user.email, password: 'wrong-password-123' };
  const { csrf: _, ...noToken } = fields;
  const stranger = new Browser(t);
  const strangerPage = await stranger.open(flow(app.id).params);
  const cases: [string, Browser, Record<string, string>][] = [
    ['no cookie', new Browser(t), fields],
    ['no token', browser, noToken],
    ['a wrong token', browser, { ...fields, csrf: 'A'.repeat(43) }],
    ["another browser's token", browser, { ...fields, csrf: formOf(strangerPage, '/signin').csrf }],
  ];
  for (const [label, b, body] of cases) {
    const res = await b.post('/signin', body);
    assertPage(res, 403, 'This form has expired or was not sent from the sign-in page.');
    assert.ok(!res.body.includes('<form'), label);
  }
  for (const action of ['/signin/mfa', '/signin/continue']) {
    assertPage(await browser.post(action, { ...hidden, mfa_token: 'mfa_x', code: '123456' }), 403);
    assertPage(await browser.post(action, { ...hidden, csrf: '' }), 403);
  }
  // A malformed cookie counts as none.
  const res = await t.app.inject({
    method: 'POST', url: '/signin', headers: { 'content-type': 'application/x-www-form-urlencoded', cookie: 'platform_signin=short' },
    payload: new URLSearchParams(fields).toString(),
  });
  assertPage(res, 403);
  // recent_failures is what the lockout counts (failed_attempts is a column no sign-in writes any more).
  const [identity] = await sql(t, `SELECT cardinality(recent_failures) AS failures FROM identities WHERE user_id = $1 AND method = 'password'`, [user.id]);
  assert.equal(identity.failures, 0, 'no password was checked');
});

test('malformed bodies are the error page, not JSON: a non-string field, another media type', async () => {
  const browser = new Browser(t);
  const page = await browser.open(flow(app.id).params);
  const json = await t.app.inject({
    method: 'POST', url: '/signin', headers: { cookie: `platform_signin=${browser.cookie}` }, payload: { ...formOf(page, '/signin'), email: 42, password: 'x' },
  });
  assertPage(json, 400, 'malformed');
  const text = await t.app.inject({ method: 'POST', url: '/signin', headers: { 'content-type': 'text/plain' }, payload: 'hello' });
  assertPage(text, 415);
  // Not validly percent-encoded, in the form or in the query: the 400 page, never a lenient U+FFFD.
  const form = await t.app.inject({
    method: 'POST', url: '/signin', headers: { 'content-type': 'application/x-www-form-urlencoded', cookie: `platform_signin=${browser.cookie}` },
    payload: `${new URLSearchParams(formOf(page, '/signin')).toString()}&email=a%FF%40example.com&password=x`,
  });
  assertPage(form, 400, 'not validly percent-encoded');
  assertPage(await t.app.inject({ method: 'GET', url: '/signin?client_id=%ZZ' }), 400, 'not validly encoded');
});

test('opening a form step directly (reload, bookmark) is a 405 page, not JSON', async () => {
  for (const url of ['/signin/mfa', '/signin/continue']) {
    const res = await get(url);
    assertPage(res, 405, 'This step cannot be opened directly.');
    assert.equal(res.headers.allow, 'POST');
  }
});

test('a form step answers any other method with a 405 whose Allow lists only POST, not the GET that is itself a 405 page (RFC 9110 §15.5.6: the methods the resource supports)', async () => {
  for (const url of ['/signin/mfa', '/signin/continue']) {
    for (const method of ['PUT', 'PATCH', 'DELETE'] as const) {
      const res = await t.app.inject({ method, url });
      assert.equal(res.statusCode, 405, `${method} ${url}`);
      assert.equal(res.headers.allow, 'POST', `${method} ${url}`);
    }
  }
});

test('the page is outside the OpenAPI document', async () => {
  const doc = (await t.app.inject({ method: 'GET', url: '/v1/openapi.json' })).json();
  assert.ok(!Object.keys(doc.paths).some((p) => p.startsWith('/signin')), Object.keys(doc.paths).join(', '));
});

test('the icon shows for an https URL in any letter case of the scheme (HTTPS://…)', async () => {
  const upper = await oauthApp(t, admin, { name: 'Upper', icon_url: 'HTTPS://cdn.example.com/upper.png' });
  assert.ok(assertPage(await get(signinUrl(flow(upper.id).params)), 200).includes('<img src="HTTPS://cdn.example.com/upper.png" alt=""'), 'assertPage(await get(signinUrl(flow(upper.id).params)), 200).includes(\'<img src="HTTPS://cdn.example.com/upper.png" alt=""\')');
});

test('the icon is shown only from an https icon_url; an http one shows the Application\'s initial', async () => {
  const plain = await oauthApp(t, admin, { name: 'plain notes', icon_url: 'http://cdn.example.com/plain.png' });
  const body = assertPage(await get(signinUrl(flow(plain.id).params)), 200);
  assert.ok(!body.includes('<img'), 'no image from an http URL');
  assert.ok(body.includes('<span class="mono" aria-hidden="true">P</span>'), body);
});

/** WCAG contrast ratio of two #rgb or #rrggbb colours. */
function contrast(a: string, b: string): number {
  const lum = (color: string) => {
    const hex = color.length === 4 ? `#${[...color.slice(1)].map((c) => c + c).join('')}` : color;
    const [r, g, b] = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16) / 255).map((c) => (c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4));
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const [hi, lo] = [lum(a), lum(b)].sort((x, y) => y - x);
  return (hi + 0.05) / (lo + 0.05);
}

test('the focus ring of fields, buttons, links and the recovery-code toggle has 3:1 contrast against the card and the page (WCAG 1.4.11)', async () => {
  const body = assertPage(await get(signinUrl(flow(app.id).params)), 200);
  const style = /<style>([\s\S]*?)<\/style>/.exec(body)![1];
  const rule = /input:focus,button:focus,a:focus,summary:focus\{outline:3px solid (#[0-9a-f]{3,6});outline-offset:2px\}/.exec(style);
  assert.ok(rule, `no focus rule in ${style}`);
  const card = /main\{[^}]*background:(#[0-9a-f]{3,6})/.exec(style)![1];
  const page = /body\{[^}]*background:(#[0-9a-f]{3,6})/.exec(style)![1];
  for (const behind of [card, page]) {
    const ratio = contrast(rule[1], behind);
    assert.ok(ratio >= 3, `focus ring ${rule[1]} on ${behind}: ${ratio.toFixed(2)}:1, below 3:1`);
  }
  // The page's text keeps AA (4.5:1) as before: body, notes, links, the button, the alert.
  for (const [fg, bg] of [['#1b1f24', card], ['#47505c', card], ['#2449ad', card], ['#fff', '#2f5bd3'], ['#6d1410', '#fdecea']]) {
    assert.ok(style.includes(`color:${fg}`) && style.includes(bg), `${fg} on ${bg} is no longer in the style`);
    assert.ok(contrast(fg, bg) >= 4.5, `${fg} on ${bg}: ${contrast(fg, bg).toFixed(2)}:1`);
  }
});

test('the password step links to the hosted forgot-password page with the sign-in request\'s parameters (to come back)', async () => {
  const f = flow(app.id);
  const body = assertPage(await new Browser(t).open(f.params), 200);
  const query = requestQuery({ application_id: app.id, redirect_uri: REDIRECT, code_challenge: f.challenge, code_challenge_method: 'S256', state: 'st-1' });
  assert.ok(body.includes(`<a href="/forgot-password?${escapeHtml(query)}">Forgot password?</a>`), body);
});

test('the title says when a step shows an error ("Error: Sign in – <App>"); without one it does not', async () => {
  const user = await createUser(t);
  const browser = new Browser(t);
  const page = await browser.open(flow(app.id).params);
  assert.match(assertPage(page, 200), /<title>Sign in – Acme &lt;Notes&gt; &amp; &quot;Co&quot;<\/title>/);
  const wrong = await browser.signIn(page, user.email, 'not-the-password-at-all');
  assert.match(assertPage(wrong, 401), /<title>Error: Sign in – Acme &lt;Notes&gt; &amp; &quot;Co&quot;<\/title>/);
});

test('the MFA step shows which account is signing in (escaped) and a "Use another account" link back to the password step; its error title says Error', async () => {
  const email = uniqueEmail("o'brien+<b>");
  const { user } = await createMfaUser(t, { email });
  const f = flow(app.id);
  const browser = new Browser(t);
  const mfa = await browser.signIn(await browser.open(f.params), user.email, user.password);
  const body = assertPage(mfa, 200);
  assert.ok(body.includes(`<p>Signing in as <strong>${escapeHtml(email)}</strong>.</p>`), body);
  assert.ok(!body.includes(email), 'the email is escaped');
  const query = requestQuery({ application_id: app.id, redirect_uri: REDIRECT, code_challenge: f.challenge, code_challenge_method: 'S256', state: 'st-1' });
  assert.ok(body.includes(`<a href="/signin?${escapeHtml(query)}">Use another account</a>`), body);
  assert.match(body, /<title>Two-step verification – /);
  const bad = await browser.mfa(mfa, 'code', '12ab');
  const badBody = assertPage(bad, 422, 'Enter the 6-digit code');
  assert.match(badBody, /<title>Error: Two-step verification – /);
  assert.ok(badBody.includes(`<strong>${escapeHtml(email)}</strong>`), 'the account is still shown after an error');
});

test('the 400 page escapes the Application name its field messages quote ("is not registered for <App>", "has no registered redirect URIs", "not available"), on /signin and /forgot-password: nothing an owner names is markup', async () => {
  const name = '<script>alert(1)</script> "Q" & Co';
  const escaped = '&lt;script&gt;alert(1)&lt;/script&gt; &quot;Q&quot; &amp; Co';
  const named = await oauthApp(t, admin, { name });
  const bare = await oauthApp(t, admin, { name, redirect_uris: [] });
  const frozen = await oauthApp(t, admin, { name });
  await sql(t, 'UPDATE tenants SET suspended = true WHERE id = $1', [frozen.tenant_id]);
  const cases: [Record<string, string>, string][] = [
    [flow(named.id, { redirect_uri: 'https://evil.example.com/cb' }).params, `is not registered for ${escaped}`],
    [flow(bare.id).params, `${escaped} has no registered redirect URIs`],
    [flow(frozen.id).params, `${escaped} is not available for sign-in right now`],
  ];
  for (const [params, message] of cases) {
    for (const path of ['/signin', '/forgot-password']) {
      const body = assertPage(await get(`${path}?${new URLSearchParams(params)}`), 400);
      assert.ok(body.includes(message), `${path}: expected "${message}" in ${body}`);
      assert.ok(!body.includes('<script'), `${path}: the name is never markup`);
    }
  }
});

test('the email a refused sign-in keeps in its field is escaped: quotes and markup typed into it never leave the value attribute, and the password is never echoed', async () => {
  const browser = new Browser(t);
  const page = await browser.open(flow(app.id).params);
  const password = 'typed-secret-password-1';
  for (const email of ['x"><script>alert(1)</script>@example.com', "o'brien\" autofocus onfocus=\"alert(1)@example.com"]) {
    const res = await browser.signIn(page, email, password);
    const body = assertPage(res, 401, 'Email or password is incorrect.');
    assert.ok(body.includes(`required value="${escapeHtml(email)}" aria-invalid="true"`), body);
    assert.ok(!body.includes('<script') && !body.includes('onfocus="'), 'nothing typed is markup');
    assert.ok(!body.includes(password), 'the password is never echoed');
  }
});
