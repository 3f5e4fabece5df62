// Helpers shared by the sign-in test files (test/auth/*.test.ts). Everything goes through HTTP
// except the direct SQL used to observe side effects or to set up rows the API cannot create yet.
import assert from 'node:assert/strict';
import { generate } from 'otplib';
import type { TestApp } from '../helpers/app.js';
import { bearer, createUser, PASSWORD, uniqueEmail, type TestUser } from '../helpers/fixtures.js';
import { mailsTo } from '../helpers/mail.js';
export { latestToken, linkToken, mailsTo, type MailRow } from '../helpers/mail.js';

type InjectResponse = Awaited<ReturnType<TestApp['app']['inject']>>;

/** A strong password that is not the fixture PASSWORD. */
export const NEW_PASSWORD = 'amber-lantern-orchard-77';

export async function sql<R = Record<string, any>>(t: TestApp, text: string, params: unknown[] = []): Promise<R[]> {
  return (await t.database.scoped('system').query<R>(text, params)).rows;
}

export function post(t: TestApp, url: string, payload?: object, headers: Record<string, string> = {}): Promise<InjectResponse> {
  return t.app.inject({ method: 'POST', url, payload, headers });
}

export function get(t: TestApp, url: string, token: string): Promise<InjectResponse> {
  return t.app.inject({ method: 'GET', url, headers: bearer(token) });
}

/** Asserts the error envelope {error: {code, message, details}} with this status and code; returns error. */
export function assertError(res: InjectResponse, status: number, code: string): { code: string; message: string; details: Record<string, any> } {
  assert.equal(res.statusCode, status, `expected ${status} ${code}, got ${res.statusCode} ${res.body}`);
  const body = res.json();
  assert.equal(body.error?.code, code, res.body);
  assert.equal(typeof body.error.message, 'string');
  assert.equal(typeof body.error.details, 'object');
  assert.notEqual(body.error.details, null);
  return body.error;
}

/** 422 validation_failed whose details.fields name exactly these paths (order ignored). */
export function assertFields(res: InjectResponse, paths: string[]): void {
  const error = assertError(res, 422, 'validation_failed');
  assert.ok(Array.isArray(error.details.fields), res.body);
  const got = [...new Set(error.details.fields.map((f: { path: string }) => f.path))].sort();
  assert.deepEqual(got, [...paths].sort(), res.body);
}

export const AUTH_SESSION_KEYS = [
  'access_token', 'email_verified', 'expires_in', 'refresh_token', 'refresh_token_expires_in', 'session_id', 'token_type', 'user_id',
].sort();

/** The AuthSession shape of Part A. */
export function assertAuthSession(body: any, userId?: string): void {
  assert.deepEqual(Object.keys(body).sort(), AUTH_SESSION_KEYS);
  assert.equal(body.token_type, 'Bearer');
  assert.equal(body.access_token.split('.').length, 3);
  assert.equal(body.expires_in, 900);
  assert.match(body.refresh_token, /^rtk_/);
  assert.equal(body.refresh_token_expires_in, 2592000);
  assert.match(body.session_id, /^ses_[0-9A-HJKMNP-TV-Z]{26}$/);
  assert.match(body.user_id, /^usr_[0-9A-HJKMNP-TV-Z]{26}$/);
  assert.equal(typeof body.email_verified, 'boolean');
  if (userId) assert.equal(body.user_id, userId);
}

export function jwtPayload(token: string): Record<string, any> {
  return JSON.parse(Buffer.from(token.split('.')[1], 'base64url').toString('utf8'));
}

export function jwtHeader(token: string): Record<string, any> {
  return JSON.parse(Buffer.from(token.split('.')[0], 'base64url').toString('utf8'));
}

export async function auditRows(t: TestApp, action: string, targetUserId: string) {
  return sql<{ id: string; action: string; actor_type: string; actor_id: string | null; target_type: string | null; target_id: string | null; request_id: string | null; test_mode: boolean; created_at: Date; after: any }>(
    t,
    'SELECT id, action, actor_type, actor_id, target_type, target_id, request_id, test_mode, created_at, after FROM audit_events WHERE action = $1 AND target_user_id = $2 ORDER BY created_at, id',
    [action, targetUserId],
  );
}

export function loginRes(t: TestApp, user: Pick<TestUser, 'email' | 'password' | 'mode'>, password = user.password): Promise<InjectResponse> {
  return post(t, '/v1/auth/login', { email: user.email, password, test_mode: user.mode === 'test' });
}

/** Moves the service clock forward so that it sits `secondsInto` seconds into a 30-second TOTP step. */
export function alignToStep(t: TestApp, secondsInto = 5): void {
  const ms = t.clock.now().getTime() % 30_000;
  t.clock.advance((30_000 - ms + secondsInto * 1000) / 1000);
}

/** Moves the service clock forward to `secondsInto` seconds after the start of the next window. */
export function alignToWindow(t: TestApp, windowSeconds: number, secondsInto: number): void {
  const windowMs = windowSeconds * 1000;
  const ms = t.clock.now().getTime() % windowMs;
  t.clock.advance((windowMs - ms + secondsInto * 1000) / 1000);
}

/** The TOTP code at the service clock, `steps` steps away from the current one. */
export function totpCode(t: TestApp, secret: string, steps = 0): Promise<string> {
  return generate({ secret, epoch: Math.floor(t.clock.now().getTime() / 1000) + steps * 30 });
}

export interface MfaUser {
  user: TestUser;
  /** The access token of the session used to enroll. */
  token: string;
  secret: string;
  recoveryCodes: string[];
}

/** Begins TOTP enrollment for the signed-in user (200); returns the new secret, not yet confirmed. */
export async function beginTotp(t: TestApp, token: string): Promise<string> {
  const begin = await t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp', headers: bearer(token) });
  assert.equal(begin.statusCode, 200, begin.body);
  return begin.json().secret;
}

/**
 * A user with confirmed TOTP. Afterwards the clock sits 5 s into the step after the confirming
 * code's step, so a fresh code is usable at once.
 */
export async function createMfaUser(t: TestApp, opts: Parameters<typeof createUser>[1] = {}): Promise<MfaUser> {
  const user = await createUser(t, opts);
  const res = await loginRes(t, user);
  assert.equal(res.statusCode, 200, res.body);
  const token = res.json().access_token;
  const secret = await beginTotp(t, token);
  alignToStep(t, 5);
  const confirm = await t.app.inject({
    method: 'POST', url: '/v1/users/me/mfa/totp/confirm', headers: bearer(token), payload: { code: await totpCode(t, secret) },
  });
  assert.equal(confirm.statusCode, 200, confirm.body);
  alignToStep(t, 5);
  return { user, token, secret, recoveryCodes: confirm.json().recovery_codes };
}

/** Login that must answer the MfaChallenge; returns its mfa_token. */
export async function mfaChallenge(t: TestApp, user: TestUser): Promise<string> {
  const res = await loginRes(t, user);
  assert.equal(res.statusCode, 200, res.body);
  assert.equal(res.json().mfa_required, true, res.body);
  return res.json().mfa_token;
}

/** A tenant and an Application row (the applications API arrives later), returning the application id. */
export async function createApplication(t: TestApp, opts: { slug: string; emailFromName?: string | null }): Promise<string> {
  const now = t.clock.now();
  const tenantId = `tnt_01J${opts.slug.toUpperCase().replace(/[^0-9A-Z]/g, '0').padEnd(23, '0').slice(0, 23)}`;
  await sql(t, `INSERT INTO tenants (id, owner_type, plan, created_at, updated_at) VALUES ($1, 'user', 'free', $2, $2)`, [tenantId, now]);
  const id = `app_${opts.slug}`;
  await sql(
    t,
    `INSERT INTO applications (id, slug, name, launch_url, email_from_name, tenant_id, created_at, updated_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $7)`,
    [id, opts.slug, `App ${opts.slug}`, `https://${opts.slug}.example.com/`, opts.emailFromName ?? null, tenantId, now],
  );
  return id;
}

/** mfa/verify: completes an MfaChallenge with `{mfa_token, code}` or `{mfa_token, recovery_code}`. */
export const verifyMfa = (t: TestApp, body: object) => post(t, '/v1/auth/mfa/verify', body);

/** A six-digit code other than `code` (half the code space away): a wrong code for a test. */
export const otherCode = (code: string) => String((Number(code) + 500_000) % 1_000_000).padStart(6, '0');

/** The signed-in user's mfa_enabled, as GET /v1/users/me shows it. */
export const readMfaEnabled = async (t: TestApp, token: string) => (await get(t, '/v1/users/me', token)).json().mfa_enabled;

/** Self-service signup with the fixture PASSWORD; returns the address and the AuthSession. */
export async function signupUser(t: TestApp, email = uniqueEmail('rec')) {
  const res = await post(t, '/v1/auth/signup', { email, password: PASSWORD });
  assert.equal(res.statusCode, 201, res.body);
  return { email, session: res.json() };
}

/** A login that must answer an AuthSession (no MFA); returns its tokens and session id. */
export async function signInSession(t: TestApp, user: Pick<TestUser, 'email' | 'password' | 'mode'>) {
  const res = await loginRes(t, user);
  assert.equal(res.statusCode, 200, res.body);
  return res.json() as { access_token: string; refresh_token: string; session_id: string };
}

/**
 * The support reset of a soft-deleted user's TOTP (docs/decisions.md, MFA enrollment: "a reset … of a
 * soft-deleted user, mails nothing"): 204, TOTP off, one user.mfa_reset audited and no mfa_disabled mail.
 */
export async function assertResetOfDeletedUser(t: TestApp, reset: InjectResponse, user: Pick<TestUser, 'id' | 'email'>): Promise<void> {
  assert.equal(reset.statusCode, 204, reset.body);
  const [identity] = await sql(t, `SELECT totp_confirmed_at FROM identities WHERE user_id = $1 AND method = 'password'`, [user.id]);
  assert.equal(identity.totp_confirmed_at, null, 'TOTP is off');
  assert.equal((await auditRows(t, 'user.mfa_reset', user.id)).length, 1);
  assert.deepEqual(await mailsTo(t, user.email, 'mfa_disabled'), [], 'no notice to a soft-deleted account');
}
