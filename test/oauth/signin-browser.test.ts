// The hosted sign-in page in a real browser: headless Chromium (Debian's chromium package) driven by
// playwright-core against the service listening on a real port, landing on a loopback redirect URI.
// Nothing is skipped: if Chromium cannot start, the tests fail and say why.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { join } from 'node:path';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { unusedPort } from '../helpers/ports.js';
import { projectPath } from '../../src/paths.js';
import { grant, newApp, person, platformKey, type AppFixture } from '../access/support.js';
import { createMfaUser, totpCode } from '../auth/support.js';
import { pkce } from './support.js';
import { createUser } from '../helpers/fixtures.js';
import { call } from '../helpers/http.js';
import { latestToken } from '../helpers/mail.js';

const CHROMIUM = '/usr/bin/chromium';
const ARTIFACTS = projectPath('test-artifacts');
const ICON_URL = 'https://icons.example.test/acme.svg';
const ICON = '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 48 48"><rect width="48" height="48" rx="10" fill="#0f766e"/><path d="M14 34 24 12l10 22h-5l-5-11-5 11z" fill="#fff"/></svg>';

let t: TestApp;
let base: string;
let browser: Browser;
let callback: Server;
let redirectUri: string;
let testKey: string;
let app: AppFixture;
const landed: URL[] = [];

async function launchChromium(): Promise<Browser> {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`Chromium is not installed at ${CHROMIUM}: install Debian's chromium package (apt-get install -y chromium).`);
  }
  try {
    return await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
      timeout: 60_000,
    });
  } catch (err) {
    throw new Error(`Chromium at ${CHROMIUM} could not start, so the hosted sign-in page cannot be tested in a browser: ${(err as Error).message}`);
  }
}

before(async () => {
  // The port is in the public URL the service boots with, so it is chosen before the service listens
  // (seconds later, Chromium starting meanwhile): outside the range listen(0) and connections use.
  const port = await unusedPort();
  // Chromium starts while the service boots; a failure of either still lets after() close the other.
  const [launched, booted] = await Promise.allSettled([launchChromium(), buildTestApp({ publicUrl: `http://localhost:${port}`, port })]);
  if (booted.status === 'fulfilled') t = booted.value;
  if (launched.status === 'fulfilled') browser = launched.value;
  if (launched.status === 'rejected') throw launched.reason;
  if (booted.status === 'rejected') throw booted.reason;
  await t.app.listen({ port, host: '127.0.0.1' });
  base = `http://localhost:${port}`;

  // The Application's redirect URI: a loopback server that records where the browser landed.
  callback = createServer((req, res) => {
    landed.push(new URL(req.url!, redirectUri));
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end('<!doctype html><title>Acme Notes</title><p>Signed in.</p>');
  });
  await new Promise<void>((resolve) => callback.listen(0, '127.0.0.1', resolve));
  redirectUri = `http://127.0.0.1:${(callback.address() as { port: number }).port}/callback`;

  // Loopback redirect URIs are allowed on test_mode Applications only, which sign in test-mode users.
  testKey = await platformKey(t, undefined, 'test');
  app = await newApp(t, testKey, { name: 'Acme Notes', icon_url: ICON_URL, redirect_uris: [redirectUri] }, { ownerMode: 'test' });
});

after(async () => {
  await browser?.close();
  await new Promise((resolve) => (callback ? callback.close(resolve) : resolve(undefined)));
  await t?.close();
});

/** A fresh browser profile whose page serves the icon locally and records CSP violations. */
async function openContext(): Promise<{ context: BrowserContext; page: Page; problems: string[] }> {
  const context = await browser.newContext({ viewport: { width: 720, height: 760 }, deviceScaleFactor: 1 });
  const page = await context.newPage();
  await page.route(ICON_URL, (route) => route.fulfill({ status: 200, contentType: 'image/svg+xml', body: ICON }));
  const problems: string[] = [];
  // Error statuses (the 401 of a wrong password) are logged too; only policy refusals count here.
  page.on('console', (m) => { if (/Content Security Policy|Refused to/i.test(m.text())) problems.push(m.text()); });
  page.on('pageerror', (e) => problems.push(e.message));
  return { context, page, problems };
}

function authorizeUrl(state: string): { url: string; verifier: string } {
  const p = pkce();
  const q = new URLSearchParams({ client_id: app.id, response_type: 'code', redirect_uri: redirectUri, code_challenge: p.challenge, code_challenge_method: 'S256', state });
  return { url: `${base}/signin?${q}`, verifier: p.verifier };
}

async function screenshot(page: Page, name: string): Promise<void> {
  mkdirSync(ARTIFACTS, { recursive: true });
  const path = join(ARTIFACTS, name);
  await page.screenshot({ path, fullPage: true });
  console.log(`screenshot: ${path}`);
}

/** Waits for the landing on the redirect URI; returns its code and state after checking them. */
async function landedWith(page: Page, state: string): Promise<string> {
  // A wait bound only (a defect never lands): a loaded machine can take more than 15 s for the sign-in
  // (Argon2, Chromium and the service sharing two cores with three other test processes).
  await page.waitForURL((url) => url.href.startsWith(redirectUri), { timeout: 60_000 });
  const url = new URL(page.url());
  assert.equal(`${url.origin}${url.pathname}`, redirectUri);
  assert.equal(url.searchParams.get('state'), state);
  const code = url.searchParams.get('code');
  assert.match(code ?? '', /^oac_/);
  assert.ok(landed.some((u) => u.searchParams.get('code') === code), 'the redirect URI server saw the code');
  assert.equal(await page.textContent('p'), 'Signed in.');
  return code!;
}

/** Exchanges the code over real HTTP; returns the token response. */
async function exchange(code: string, verifier: string): Promise<any> {
  const res = await fetch(`${base}/v1/auth/oauth/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ grant_type: 'authorization_code', code, code_verifier: verifier, redirect_uri: redirectUri, client_id: app.id }),
  });
  const body = await res.json();
  assert.equal(res.status, 200, JSON.stringify(body));
  return body;
}

test('Chromium signs in without MFA (a wrong password first), lands on the redirect URI with code and state, and the code redeems', async () => {
  const user = await person(t, { mode: 'test' });
  await grant(t, testKey, user.id, app.id);
  const { context, page, problems } = await openContext();
  try {
    const { url, verifier } = authorizeUrl('state-no-mfa');
    const res = await page.goto(url);
    assert.equal(res?.status(), 200);
    assert.equal(await page.title(), 'Sign in – Acme Notes');
    assert.equal(await page.getByRole('heading', { level: 1 }).textContent(), 'Sign in');
    assert.ok(await page.locator('header img').evaluate((img: HTMLImageElement) => img.complete && img.naturalWidth > 0), 'the icon is shown');
    await screenshot(page, 'signin-page.png');

    await page.getByLabel('Email').fill(user.email);
    await page.getByLabel('Password').fill('wrong-password-123');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForLoadState();
    assert.equal((await page.getByRole('alert').textContent())?.trim(), 'Email or password is incorrect.');
    assert.equal(await page.getByLabel('Email').inputValue(), user.email);
    assert.equal(await page.getByLabel('Password').getAttribute('aria-invalid'), 'true');
    await screenshot(page, 'signin-page-error.png');

    await page.getByLabel('Password').fill(user.password);
    await page.getByRole('button', { name: 'Sign in' }).click();
    const code = await landedWith(page, 'state-no-mfa');
    const tokens = await exchange(code, verifier);
    assert.equal(tokens.token_type, 'Bearer');

    const [cookie] = (await context.cookies(`${base}/signin`)).filter((c) => c.name === 'platform_signin');
    assert.ok(cookie, 'the page cookie is set');
    assert.equal(cookie.httpOnly, true);
    assert.equal(cookie.sameSite, 'Lax');
    assert.equal(cookie.secure, false, 'not Secure on http://localhost');
    assert.equal(cookie.path, '/signin');
    assert.equal((await context.cookies()).length, 1, 'no other cookie, no third-party cookie');

    // A second visit offers "Continue as": one click, a new code on the same session.
    const second = authorizeUrl('state-continue');
    await page.goto(second.url);
    await page.getByRole('button', { name: `Continue as ${user.email}` }).click();
    await exchange(await landedWith(page, 'state-continue'), second.verifier);
    assert.deepEqual(problems, [], 'no CSP violation or script error');
  } finally {
    await context.close();
  }
});

test('Chromium signs in with MFA: password, then the TOTP code; lands with code and state; the code redeems', async () => {
  const { user, secret } = await createMfaUser(t, { mode: 'test' });
  await grant(t, testKey, user.id, app.id);
  const { context, page, problems } = await openContext();
  try {
    const { url, verifier } = authorizeUrl('state-mfa');
    await page.goto(url);
    await page.getByLabel('Email').fill(user.email);
    await page.getByLabel('Password').fill(user.password);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { name: 'Two-step verification' }).waitFor();
    assert.equal(await page.getByLabel('Authentication code').getAttribute('autocomplete'), 'one-time-code');
    await screenshot(page, 'signin-mfa.png');

    await page.getByLabel('Authentication code').fill(await totpCode(t, secret));
    await page.getByRole('button', { name: 'Verify', exact: true }).click();
    const code = await landedWith(page, 'state-mfa');
    await exchange(code, verifier);
    assert.deepEqual(problems, [], 'no CSP violation or script error');
  } finally {
    await context.close();
  }
});

test('Chromium: a request with an unregistered redirect_uri shows the error page and stays there', async () => {
  const { context, page } = await openContext();
  try {
    const before = landed.length;
    const { url } = authorizeUrl('s');
    const res = await page.goto(url.replace(encodeURIComponent(redirectUri), encodeURIComponent(`${redirectUri}/other`)));
    assert.equal(res?.status(), 400);
    assert.equal(await page.getByRole('heading', { level: 1 }).textContent(), 'This sign-in link is not valid');
    assert.match((await page.getByRole('alert').textContent()) ?? '', /redirect_uri/);
    assert.ok(page.url().startsWith(base), 'page.url().startsWith(base)');
    assert.equal(landed.length, before, 'nothing reached the redirect URI');
    await screenshot(page, 'signin-error.png');
  } finally {
    await context.close();
  }
});

/** Nothing sticks out of the page or its card: no sideways scrolling, no text past the card's edge. */
async function assertFits(page: Page, width: number): Promise<void> {
  const overflow = await page.evaluate(() => {
    const main = document.querySelector('main')!.getBoundingClientRect();
    const out = [...document.querySelectorAll('main *')].filter((e) => {
      const r = e.getBoundingClientRect();
      // A text field scrolls its own value; everything else must fit.
      return r.width > 0 && (r.left < main.left - 0.5 || r.right > main.right + 0.5 || (e.tagName !== 'INPUT' && e.scrollWidth > e.clientWidth + 1));
    });
    return { scrollWidth: document.documentElement.scrollWidth, out: out.map((e) => `${e.tagName}: ${(e.textContent ?? '').trim().slice(0, 40)}`) };
  });
  assert.ok(overflow.scrollWidth <= width, `the page scrolls sideways at ${width} px (${overflow.scrollWidth} px wide)`);
  assert.deepEqual(overflow.out, [], `text sticks out of the card at ${width} px`);
}

test('Chromium at 320 and 1280 px: a long email wraps inside the card on the wrong-password, "Continue as" and no-access pages', async () => {
  const email = `firstname.middlename.lastname.${Date.now()}@subdomain.example-company.test`;
  const user = await person(t, { mode: 'test', email });
  await grant(t, testKey, user.id, app.id);
  const outsider = await person(t, { mode: 'test', email: `no.access.${email}` });
  for (const [width, height] of [[320, 640], [1280, 800]]) {
    const context = await browser.newContext({ viewport: { width, height }, deviceScaleFactor: 1 });
    const page = await context.newPage();
    await page.route(ICON_URL, (route) => route.fulfill({ status: 200, contentType: 'image/svg+xml', body: ICON }));
    try {
      await page.goto(authorizeUrl('state-narrow').url);
      await assertFits(page, width);
      await page.getByLabel('Email').fill(user.email);
      await page.getByLabel('Password').fill('wrong-password-123');
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.getByRole('alert').waitFor();
      await assertFits(page, width);
      await screenshot(page, `signin-error-${width}.png`);

      await page.getByLabel('Password').fill(user.password);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await landedWith(page, 'state-narrow');
      await page.goto(authorizeUrl('state-narrow').url);
      await page.getByRole('button', { name: `Continue as ${user.email}` }).waitFor();
      await assertFits(page, width);
      await screenshot(page, `signin-continue-${width}.png`);

      await page.getByLabel('Email').fill(outsider.email);
      await page.getByLabel('Password').fill(outsider.password);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.getByRole('heading', { name: 'No access to Acme Notes' }).waitFor();
      await assertFits(page, width);
      await screenshot(page, `signin-denied-${width}.png`);
    } finally {
      await context.close();
    }
  }
});

test('Chromium: the reset-password page sets the password as pasted, never cut to a maxlength counted in UTF-16 code units (70 emoji: 70 characters, 140 units)', async () => {
  const email = `astral-${Date.now()}@example.com`;
  await createUser(t, { email });
  assert.equal((await call(t, 'POST', '/v1/auth/password/forgot', null, { email })).statusCode, 202);
  const token = await latestToken(t, email, 'password_reset');
  const { context, page, problems } = await openContext();
  try {
    await page.goto(`${base}/reset-password?token=${encodeURIComponent(token)}`);
    const password = '\u{1F511}'.repeat(70);
    await page.getByLabel('New password').fill(password);
    assert.equal([...(await page.getByLabel('New password').inputValue())].length, 70, 'the field holds the whole password');
    await page.getByRole('button', { name: 'Change password' }).click();
    await page.getByRole('heading', { name: 'Password changed' }).waitFor();
    assert.equal((await call(t, 'POST', '/v1/auth/login', null, { email, password })).statusCode, 200, 'the password as pasted signs in');
    assert.equal((await call(t, 'POST', '/v1/auth/login', null, { email, password: '\u{1F511}'.repeat(64) })).statusCode, 401, 'not a cut one');
    assert.deepEqual(problems, []);
  } finally {
    await context.close();
  }
});
