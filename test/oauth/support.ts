// Helpers shared by the hosted sign-in (OAuth authorization code + PKCE) tests.
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { createLocalJWKSet, decodeJwt, jwtVerify, type JWTPayload } from 'jose';
import { pausedAfter as pausedAfterQuery, type TestApp } from '../helpers/app.js';
import { assertStatus, call, grant, newApp, person, type AppFixture, type InjectResponse, type Person } from '../access/support.js';

export const REDIRECT = 'https://app.example.com/callback';
export const CODES = '/v1/auth/oauth/authorization-codes';
export const TOKEN = '/v1/auth/oauth/token';

export interface Pkce {
  verifier: string;
  challenge: string;
}

export function pkce(): Pkce {
  const verifier = randomBytes(32).toString('base64url');
  return { verifier, challenge: createHash('sha256').update(verifier).digest('base64url') };
}

/** An approved Application with one redirect URI (extra body fields override). */
export const oauthApp = (t: TestApp, admin: string, body: Record<string, unknown> = {}): Promise<AppFixture> =>
  newApp(t, admin, { redirect_uris: [REDIRECT], ...body });

export interface Member extends Person {
  sid: string;
}

/** A fresh user with a session and an active personal Entitlement to the Application. */
export async function member(t: TestApp, admin: string, applicationId: string, opts: Parameters<typeof person>[1] = {}): Promise<Member & { entitlementId: string }> {
  const p = await person(t, opts);
  const ent = await grant(t, admin, p.id, applicationId);
  return { ...p, sid: String(decodeJwt(p.token).sid), entitlementId: ent.id };
}

export const authorize = (t: TestApp, token: string | null, body: Record<string, unknown>) => call(t, 'POST', CODES, token, body);

/** Issues a code for the member (201 asserted) and returns it with its PKCE pair. */
export async function codeFor(t: TestApp, user: Pick<Member, 'token'>, applicationId: string, extra: Record<string, unknown> = {}): Promise<{ code: string } & Pkce> {
  const p = pkce();
  const body = assertStatus(
    await authorize(t, user.token, { application_id: applicationId, redirect_uri: REDIRECT, code_challenge: p.challenge, code_challenge_method: 'S256', ...extra }),
    201,
  );
  return { code: body.code, ...p };
}

/** POST /oauth/token as JSON, or as a form body when `form` is true. */
export function tokenReq(t: TestApp, body: Record<string, unknown>, form = false): Promise<InjectResponse> {
  if (!form) return t.app.inject({ method: 'POST', url: TOKEN, payload: body as any });
  return t.app.inject({
    method: 'POST',
    url: TOKEN,
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    payload: new URLSearchParams(body as Record<string, string>).toString(),
  });
}

export const codeGrant = (c: { code: string; verifier: string }, clientId: string, extra: Record<string, unknown> = {}) => ({
  grant_type: 'authorization_code', code: c.code, code_verifier: c.verifier, redirect_uri: REDIRECT, client_id: clientId, ...extra,
});

export const refreshGrant = (refreshToken: string, clientId: string) => ({ grant_type: 'refresh_token', refresh_token: refreshToken, client_id: clientId });

/** Full code flow for the member: the 200 token response. */
export async function signIn(t: TestApp, user: Pick<Member, 'token'>, applicationId: string): Promise<any> {
  const c = await codeFor(t, user, applicationId);
  return assertStatus(await tokenReq(t, codeGrant(c, applicationId)), 200);
}

/** 400 in the RFC 6749 §5.2 shape (exactly error and error_description), no envelope. */
export function assertOAuthError(res: InjectResponse, error: string): string {
  assert.equal(res.statusCode, 400, `expected 400 ${error}, got ${res.statusCode} ${res.body}`);
  const body = res.json();
  assert.deepEqual(Object.keys(body).sort(), ['error', 'error_description'], res.body);
  assert.equal(body.error, error, res.body);
  assert.equal(typeof body.error_description, 'string');
  return body.error_description;
}

export async function verifyAppToken(t: TestApp, token: string, audience: string): Promise<JWTPayload> {
  const jwks = assertStatus(await t.app.inject({ method: 'GET', url: '/.well-known/jwks.json' }), 200);
  const { payload } = await jwtVerify(token, createLocalJWKSet(jwks), { algorithms: ['RS256'], audience, issuer: t.config.publicUrl, currentDate: t.clock.now() });
  return payload;
}

/** pausedAfter (test/helpers/app.ts) on the system connection, where the OAuth grants run. */
export const pausedAfter = <T>(t: TestApp, fragment: string, meanwhile: () => Promise<void>, request: () => Promise<T>): Promise<T> =>
  pausedAfterQuery(t, fragment, meanwhile, request, 'system');
