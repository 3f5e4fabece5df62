// The hosted sign-in page on an https PUBLIC_URL with the per-IP throttle on (its own service, so
// the other page tests keep the development defaults): a Secure cookie, and the throttle as a page.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { platformKey, type AppFixture } from '../access/support.js';
import { alignToWindow } from '../auth/support.js';
import { oauthApp } from './support.js';
import { assertPage, Browser, flow, formOf, setCookieHeader, signinUrl } from './signin-support.js';
import { createUser } from '../helpers/fixtures.js';
import { call } from '../helpers/http.js';
import { latestToken } from '../helpers/mail.js';

let t: TestApp;
let app: AppFixture;
before(async () => {
  t = await buildTestApp({ publicUrl: 'https://id.example.com', authRateLimitPerMinute: 2 });
  app = await oauthApp(t, await platformKey(t));
});
after(() => t.close());

test('on an https PUBLIC_URL the page cookie is Secure (and still HttpOnly, SameSite=Lax, Path=/signin)', async () => {
  const res = await t.app.inject({ method: 'GET', url: signinUrl(flow(app.id).params) });
  assertPage(res, 200);
  assert.match(String(setCookieHeader(res)), /^platform_signin=[A-Za-z0-9_-]{43}; Path=\/signin; HttpOnly; SameSite=Lax; Secure$/);
});

test('the per-IP throttle of the auth endpoints covers the page POSTs and answers with a page (429, Retry-After)', async () => {
  const browser = new Browser(t);
  const page = await browser.open(flow(app.id).params);
  const fields = { ...formOf(page, '/signin'), email: 'nobody@example.com', password: 'wrong-password-123' };
  // Two per fixed minute: the third POST of a window is refused (a window may end in between).
  let res = await browser.post('/signin', fields);
  for (let i = 0; i < 5 && res.statusCode === 401; i++) res = await browser.post('/signin', fields);
  assertPage(res, 429, /^Too many requests; try again in (\d+ seconds?|1 minute)\.$/);
  assert.ok(Number(res.headers['retry-after']) >= 1, 'Number(res.headers[\'retry-after\']) >= 1');
});

test('the form steps are throttled too, each endpoint with its own count: /signin/mfa and /signin/continue answer the 429 page', async () => {
  const browser = new Browser(t);
  const fields = formOf(await browser.open(flow(app.id).params), '/signin');
  alignToWindow(t, 60, 1);
  for (const action of ['/signin/mfa', '/signin/continue']) {
    // Two per minute and endpoint: the first two get their own answer (403, the form token is not theirs), the third the throttle.
    for (let i = 0; i < 2; i++) assertPage(await browser.post(action, fields), 403);
    const res = await browser.post(action, fields);
    assertPage(res, 429, /^Too many requests; try again in (\d+ seconds?|1 minute)\.$/);
    assert.ok(Number(res.headers['retry-after']) >= 1, `Retry-After ${res.headers['retry-after']}`);
  }
});

test('on an https PUBLIC_URL the link pages\' cookie is Secure too ("Secure as the sign-in cookie"; HttpOnly, SameSite=Lax, Path=the page\'s path)', async () => {
  const forgot = await t.app.inject({ method: 'GET', url: '/forgot-password' });
  assertPage(forgot, 200);
  assert.match(String(forgot.headers['set-cookie']), /^platform_link=[A-Za-z0-9_-]{43}; Path=\/forgot-password; HttpOnly; SameSite=Lax; Secure$/);
  const user = await createUser(t);
  assert.equal((await call(t, 'POST', '/v1/auth/password/forgot', null, { email: user.email })).statusCode, 202);
  const token = await latestToken(t, user.email, 'password_reset');
  const reset = await t.app.inject({ method: 'GET', url: `/reset-password?token=${encodeURIComponent(token)}` });
  assertPage(reset, 200);
  assert.match(String(reset.headers['set-cookie']), /^platform_link=[A-Za-z0-9_-]{43}; Path=\/reset-password; HttpOnly; SameSite=Lax; Secure$/);
});
