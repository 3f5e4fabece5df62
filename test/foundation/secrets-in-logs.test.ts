// What the service logs never holds a credential or a stored row's values (docs/security.md, the AU-2 rows):
// the request serializer redacts credentials wherever a client puts them in the URL, and the error
// serializer drops the values of a failed statement. Every log line is captured at trace level.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildCapturedApp, type CapturedApp } from '../security/core/support.js';
import { bearer, createUser, PASSWORD, uniqueEmail } from '../helpers/fixtures.js';
import { assertError, call, sql } from '../helpers/http.js';
import { newApp, platformKey } from '../access/support.js';
import { codeFor, member, pkce, REDIRECT } from '../oauth/support.js';
import { redactUrl } from '../../src/http/log-redaction.js';
import { tenantOwner } from '../tenancy/support.js';

let t: CapturedApp;
before(async () => {
  t = await buildCapturedApp({}, undefined, 'trace');
});
after(() => t.close());

const logText = () => t.logs.map((line) => JSON.stringify(line)).join('\n');

/** The error logged with a request that failed (its 'request failed' line). */
function failureLogged(res: { headers: Record<string, unknown> }): { line: Record<string, unknown>; err: Record<string, unknown> } {
  const line = t.logs.find((l) => l.msg === 'request failed' && l.reqId === res.headers['request-id']);
  assert.ok(line, 'the failure is logged');
  return { line, err: line.err as Record<string, unknown> };
}

test('AU-2: the request log redacts a credential a client sends in the query: a refresh token in ?refresh_token= is refused (422) and never logged, and only its holder can use it', async () => {
  const user = await createUser(t);
  const login = await t.app.inject({ method: 'POST', url: '/v1/auth/login', payload: { email: user.email, password: PASSWORD } });
  assert.equal(login.statusCode, 200, login.body);
  const { refresh_token: refreshToken, access_token: accessToken } = login.json();

  const refresh = await t.app.inject({ method: 'POST', url: `/v1/auth/token/refresh?refresh_token=${refreshToken}` });
  assertError(refresh, 422, 'validation_failed');
  const me = await t.app.inject({ method: 'GET', url: `/v1/users/me?access_token=${accessToken}` });
  assertError(me, 401, 'unauthenticated');
  const password = await t.app.inject({ method: 'POST', url: `/v1/auth/login?email=${encodeURIComponent(user.email)}&password=${PASSWORD}` });
  assert.equal(password.statusCode, 422, password.body);

  const log = logText();
  for (const secret of [refreshToken, accessToken, PASSWORD]) assert.ok(!log.includes(secret), `logged: ${secret.slice(0, 12)}…`);
  assert.ok(log.includes('/v1/auth/token/refresh?refresh_token=[redacted]'), 'the line still shows which parameter was sent');
  assert.ok(log.includes('/v1/users/me?access_token=[redacted]'));
  assert.ok(log.includes(`/v1/auth/login?email=${encodeURIComponent(user.email)}&password=[redacted]`), 'other parameters stay readable');
  // The refresh token was not spent by the refused request: its holder still refreshes with it.
  const used = await t.app.inject({ method: 'POST', url: '/v1/auth/token/refresh', payload: { refresh_token: refreshToken } });
  assert.equal(used.statusCode, 200, used.body);
});

test('AU-2: the request log redacts an OAuth code and PKCE verifier sent in the token request\'s query, and any secret-shaped value in the path', async () => {
  const admin = await platformKey(t);
  const application = await newApp(t, admin, { redirect_uris: [REDIRECT] });
  const who = await member(t, admin, application.id);
  const issued = await codeFor(t, who, application.id);
  const query = new URLSearchParams({ grant_type: 'authorization_code', code: issued.code, code_verifier: issued.verifier, redirect_uri: REDIRECT, client_id: application.id });
  const res = await t.app.inject({ method: 'POST', url: `/v1/auth/oauth/token?${query}` });
  assert.equal(res.statusCode, 400, res.body);
  const key = `plat_live_${'A'.repeat(43)}`;
  const byPath = await t.app.inject({ method: 'GET', url: `/v1/api-keys/${key}`, headers: bearer(who.token) });
  assertError(byPath, 404, 'api_key_not_found');

  const log = logText();
  for (const secret of [issued.code, issued.verifier, key]) assert.ok(!log.includes(secret), `logged: ${secret.slice(0, 12)}…`);
  assert.ok(log.includes(`code=[redacted]&code_verifier=[redacted]&redirect_uri=`), 'the non-secret parameters stay');
  assert.ok(log.includes('/v1/api-keys/plat_live_[redacted]'));
  // A PKCE challenge and the sign-in page's other parameters are not secrets and stay readable.
  const p = pkce();
  assert.equal(redactUrl(`/signin?application_id=app_x&code_challenge=${p.challenge}&state=s`), `/signin?application_id=app_x&code_challenge=${p.challenge}&state=s`);
  assert.equal(redactUrl('/verify-email?token=vrf_x&x=1'), '/verify-email?token=[redacted]&x=1');
});

test('AU-2: the request log redacts the billing simulator\'s page ids, "the URL\'s id is their only credential" (docs/decisions.md "Simulator"): opening the checkout and portal pages and pressing their buttons logs neither id, and the path stays readable', async () => {
  const owner = await tenantOwner(t);
  const checkout = await call(t, 'POST', `/v1/tenants/${owner.tenantId}/billing/checkout-sessions`, owner.token,
    { plan: 'team', success_url: 'https://app.example.com/billing/done', cancel_url: 'https://app.example.com/billing' }, { 'idempotency-key': 'log-redaction' });
  assert.equal(checkout.statusCode, 201, checkout.body);
  const checkoutPath = new URL(checkout.json().url).pathname;
  assert.equal((await t.app.inject({ method: 'GET', url: checkoutPath })).statusCode, 200);
  assert.equal((await t.app.inject({ method: 'POST', url: `${checkoutPath}/complete` })).statusCode, 303);
  const portal = await call(t, 'POST', `/v1/tenants/${owner.tenantId}/billing/portal-sessions`, owner.token, { return_url: 'https://app.example.com/settings' });
  assert.equal(portal.statusCode, 201, portal.body);
  const portalPath = new URL(portal.json().url).pathname;
  assert.equal((await t.app.inject({ method: 'GET', url: portalPath })).statusCode, 200);
  assert.equal((await t.app.inject({ method: 'POST', url: `${portalPath}/cancel_at_period_end` })).statusCode, 303);

  const ids = [checkoutPath, portalPath].map((path) => path.split('/').at(-1)!);
  const log = logText();
  for (const id of ids) assert.ok(!log.includes(id), `logged: ${id}`);
  assert.ok(log.includes('/billing/simulator/checkout/cs_sim_[redacted]/complete'), 'the line still shows which page and button');
  assert.ok(log.includes('/billing/simulator/portal/bps_sim_[redacted]/cancel_at_period_end'));
});

test('AU-2: an unexpected database error is logged without the failed statement\'s values: no parameters (the mailed link\'s token), no row in its detail', async () => {
  // A constraint no row meets stands for a write the database refuses (disk full, a corrupted index).
  await sql(t, 'ALTER TABLE emails ADD CONSTRAINT refuse_every_mail CHECK (false) NOT VALID');
  try {
    const email = uniqueEmail('db-error');
    const res = await t.app.inject({ method: 'POST', url: '/v1/auth/signup', payload: { email, password: 'Disk-Refused-Passw0rd-7' } });
    assertError(res, 500, 'internal_error');
    const { line, err } = failureLogged(res);
    assert.equal(err.code, '23514');
    assert.equal(err.constraint, 'refuse_every_mail');
    assert.match(String(err.query ?? 'INSERT INTO emails'), /INSERT INTO emails/, 'the statement text (placeholders only) may stay');
    assert.equal(err.params, undefined, 'no parameter values');
    assert.equal(err.queryOptions, undefined);
    assert.equal(err.detail, 'Failing row contains ([redacted]).');
    const text = JSON.stringify(line);
    assert.ok(!/token=|vrf_/.test(text), `the verification link is not in the log: ${text}`);
    assert.ok(!text.includes(email), 'nor the address');
  } finally {
    await sql(t, 'ALTER TABLE emails DROP CONSTRAINT refuse_every_mail');
  }
});

test('AU-2: the request log redacts every credential query parameter by its name, whatever its value looks like: password, current_password, new_password, mfa_token, recovery_code, client_secret, secret, signing_secret, api_key, id_token; and every secret-shaped value (rtk_, oac_, mfa_, vrf_, pwr_, inv_, whsec_, plat_test_ plus 43 characters, a JWT) anywhere in the URL', async () => {
  const names = ['password', 'current_password', 'new_password', 'mfa_token', 'recovery_code', 'client_secret', 'secret', 'signing_secret', 'api_key', 'id_token'];
  // Values of no secret shape: only the parameter's name tells the logger it is a credential.
  const byName = names.map((name, i) => [name, `Plain-Credential-${i}-${name.length}x`] as const);
  const res = await t.app.inject({ method: 'GET', url: `/v1/users/me?${byName.map(([n, v]) => `${n}=${v}`).join('&')}&page_size=5` });
  assertError(res, 401, 'unauthenticated');
  const shaped = ['rtk_', 'oac_', 'mfa_', 'vrf_', 'pwr_', 'inv_', 'whsec_', 'plat_test_'].map((prefix, i) => `${prefix}${String.fromCharCode(66 + i).repeat(43)}`);
  const jwt = 'eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ1c3JfeCJ9.c2lnbmF0dXJl';
  for (const value of [...shaped, jwt]) {
    const inPath = await t.app.inject({ method: 'GET', url: `/v1/users/${value}?note=${value}` });
    assert.ok([401, 404].includes(inPath.statusCode), inPath.body);
  }

  const log = logText();
  for (const [name, value] of byName) {
    assert.ok(!log.includes(value), `logged: ${name}=${value}`);
    assert.ok(log.includes(`${name}=[redacted]`), `the line still shows that ${name} was sent`);
  }
  assert.ok(log.includes('page_size=5'), 'other parameters stay readable');
  for (const value of [...shaped, jwt]) assert.ok(!log.includes(value), `logged: ${value.slice(0, 12)}…`);
});

test('AU-2: an unexpected unique violation is logged without the key it quotes: the detail keeps "Key (column)=([redacted]) already exists", not the address', async () => {
  // A unique index no second mail to one address meets stands for a constraint the service does not map to an answer.
  await sql(t, 'CREATE UNIQUE INDEX refuse_second_mail ON emails (to_address)');
  try {
    const email = uniqueEmail('db-unique');
    const signup = await t.app.inject({ method: 'POST', url: '/v1/auth/signup', payload: { email, password: 'Unique-Refused-Passw0rd-7' } });
    assert.equal(signup.statusCode, 201, signup.body);
    const res = await t.app.inject({ method: 'POST', url: '/v1/auth/password/forgot', payload: { email } });
    assertError(res, 500, 'internal_error');
    const { line, err } = failureLogged(res);
    assert.equal(err.code, '23505');
    assert.equal(err.constraint, 'refuse_second_mail');
    assert.equal(err.detail, 'Key (to_address)=([redacted]) already exists.');
    assert.ok(!JSON.stringify(line).includes(email), 'the address is not in the log');
  } finally {
    await sql(t, 'DROP INDEX refuse_second_mail');
  }
});

test('AU-2 "credentials in every named query carrier (15)": access_token and token are redacted by name like the others, and a parameter is known by its name as the server reads it (percent-encoded, any case), whatever its value looks like', () => {
  assert.equal(redactUrl('/v1/users/me?access_token=Plain-1&x=1'), '/v1/users/me?access_token=[redacted]&x=1');
  assert.equal(redactUrl('/v1/users/me?token=Plain-2'), '/v1/users/me?token=[redacted]');
  // `pass%77ord` is read as `password`, `refresh%5Ftoken` as `refresh_token`: the name as sent stays, the value goes.
  assert.equal(redactUrl('/v1/auth/login?pass%77ord=Plain-3&email=a%40example.com'), '/v1/auth/login?pass%77ord=[redacted]&email=a%40example.com');
  assert.equal(redactUrl('/v1/auth/token?refresh%5Ftoken=Plain-4'), '/v1/auth/token?refresh%5Ftoken=[redacted]');
  assert.equal(redactUrl('/v1/auth/login?Password=Plain-5'), '/v1/auth/login?Password=[redacted]');
});
