// TK-1: the JWT forgery matrix (RFC 8725, ASVS 9.1/9.2). Forged and tampered bearer tokens, built
// with jose (and node:crypto where jose refuses to build them), against an authenticated route.
// Claim-level variants are signed with the service's own private key (read from signing_keys) so
// that each one fails only because of the claim it changes; a clean re-signed token is the control.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHmac, createPublicKey } from 'node:crypto';
import { CompactSign, FlattenedSign, SignJWT, UnsecuredJWT, base64url, decodeJwt, exportJWK, generateKeyPair, importJWK, type JWK, type JWTPayload } from 'jose';
import { assertStatus, buildCapturedApp, call, dbErrorLines, figure, sql, type CapturedApp } from './support.js';
import { grant, newApp, person, platformKey, type Person } from '../../access/support.js';

let t: CapturedApp;
let victim: Person;
let other: Person;
let realKid: string;
let realKey: CryptoKey;
let realPublicJwk: JWK;
let realPrivateJwk: JWK;
/** The service's private key imported for another algorithm (the allowlist must refuse it). */
const sameKeyAs = async (alg: string) => (await importJWK({ ...realPrivateJwk, alg }, alg)) as CryptoKey;
let attacker: { privateKey: CryptoKey; publicJwk: JWK };
/** A genuine access token's claims (the victim's). */
let claims: JWTPayload & { sub: string; sid: string };
let otherSid: string;
/** A real app token (aud = the Application) of the victim. */
let appToken: string;
let appId: string;

const ME = '/v1/users/me';
const b64 = (v: unknown) => base64url.encode(typeof v === 'string' ? v : JSON.stringify(v));
const now = () => Math.floor(t.clock.now().getTime() / 1000);

/** Signs any header and payload with jose (crit is allowed through so it reaches the server). */
async function jws(header: Record<string, unknown>, payload: unknown, key: CryptoKey | Uint8Array): Promise<string> {
  const crit = Array.isArray(header.crit) ? Object.fromEntries((header.crit as string[]).map((c) => [c, true])) : undefined;
  return new CompactSign(new TextEncoder().encode(JSON.stringify(payload)))
    .setProtectedHeader(header as any)
    .sign(key, crit ? { crit } : undefined);
}

/** RFC 7797 unencoded payload (b64: false) in compact form, signed by jose's flattened signer. */
async function unencoded(header: Record<string, unknown>, payload: unknown, key: CryptoKey): Promise<string> {
  const raw = JSON.stringify(payload);
  const out = await new FlattenedSign(new TextEncoder().encode(raw)).setProtectedHeader(header as any).sign(key);
  return `${out.protected}.${raw}.${out.signature}`;
}

/** HMAC-SHA256 over header.payload with raw key bytes (jose refuses an empty HMAC key). */
function hs256(header: Record<string, unknown>, payload: unknown, secret: Buffer | string): string {
  const input = `${b64(header)}.${b64(payload)}`;
  return `${input}.${createHmac('sha256', secret).update(input).digest('base64url')}`;
}

/** The victim's claims re-issued now, with overrides (undefined removes a claim). */
function payload(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  const iat = now();
  const out: Record<string, unknown> = { ...claims, iat, exp: iat + 900, ...overrides };
  for (const [k, v] of Object.entries(out)) if (v === undefined) delete out[k];
  return out;
}

const realHeader = (extra: Record<string, unknown> = {}) => ({ alg: 'RS256', kid: realKid, typ: 'JWT', ...extra });

before(async () => {
  t = await buildCapturedApp();
  const admin = await platformKey(t);
  victim = await person(t);
  other = await person(t);
  claims = decodeJwt(victim.token) as typeof claims;
  otherSid = String(decodeJwt(other.token).sid);
  const [row] = await sql(t, 'SELECT kid, private_jwk, public_jwk FROM signing_keys WHERE retired_at IS NULL ORDER BY created_at DESC LIMIT 1');
  realKid = row.kid;
  // Stored sealed (docs/decisions.md "Secrets at rest"): the test opens it as the service does.
  realPrivateJwk = JSON.parse(t.deps.secrets.open(row.private_jwk, `signing_key:${row.kid}`));
  realKey = (await importJWK(realPrivateJwk, 'RS256')) as CryptoKey;
  realPublicJwk = row.public_jwk;
  const pair = await generateKeyPair('RS256', { extractable: true });
  attacker = { privateKey: pair.privateKey, publicJwk: { ...(await exportJWK(pair.publicKey)), kid: 'attacker-1', alg: 'RS256', use: 'sig' } };
  const app = await newApp(t, admin);
  await grant(t, admin, victim.id, app.id);
  appToken = assertStatus(await call(t, 'POST', '/v1/auth/app-tokens', victim.token, { application_id: app.id }), 200).access_token;
  appId = app.id;
});
after(() => t.close());

test('TK-1 control: the genuine token and the same claims re-signed with the service key are accepted (the harness can forge)', async () => {
  assert.equal(assertStatus(await call(t, 'GET', ME, victim.token), 200).id, victim.id);
  const resigned = await jws(realHeader(), payload(), realKey);
  assert.equal(assertStatus(await call(t, 'GET', ME, resigned), 200).id, victim.id);
  // The JWKS the attacker reads is the key pair used here.
  const jwks = assertStatus(await t.app.inject({ method: 'GET', url: '/.well-known/jwks.json' }), 200);
  const published = jwks.keys.find((k: JWK) => k.kid === realKid);
  assert.equal(published.n, realPublicJwk.n);
  for (const member of ['d', 'p', 'q', 'dp', 'dq', 'qi']) assert.ok(!(member in published), `JWKS leaks ${member}`);
});

test('TK-1 every forged, tampered or mis-addressed token gets 401 unauthenticated (invalid_token) on GET /v1/users/me, with no DB error logged and no key fetched', async () => {
  const jwks = assertStatus(await t.app.inject({ method: 'GET', url: '/.well-known/jwks.json' }), 200);
  const publishedJwk = jwks.keys.find((k: JWK) => k.kid === realKid);
  const publicKey = createPublicKey({ key: publishedJwk, format: 'jwk' });
  const spkiPem = String(publicKey.export({ type: 'spki', format: 'pem' }));
  const publicDer = publicKey.export({ type: 'spki', format: 'der' });
  const genuine = victim.token;
  const [h, p, s] = genuine.split('.');
  const flip = (segment: string, at: number) => segment.slice(0, at) + (segment[at] === 'A' ? 'B' : 'A') + segment.slice(at + 1);
  const attackerKey = attacker.privateKey;
  const evil = 'https://attacker.example';

  const variants: [string, () => Promise<string> | string][] = [
    // alg none, in every spelling, with and without the original signature.
    ['alg none (jose UnsecuredJWT)', () => new UnsecuredJWT(payload()).setIssuer(String(claims.iss)).setAudience('platform').encode()],
    ['alg none, empty signature', () => `${b64({ alg: 'none', typ: 'JWT' })}.${b64(payload())}.`],
    ['alg None + kid', () => `${b64({ alg: 'None', kid: realKid })}.${b64(payload())}.`],
    ['alg NONE, original signature kept', () => `${b64({ alg: 'NONE', kid: realKid })}.${p}.${s}`],
    ['alg nOnE, no signature segment', () => `${b64({ alg: 'nOnE' })}.${b64(payload())}`],
    // RS256 -> HS256 key confusion with the public key taken from the JWKS.
    ['HS256 keyed with the JWKS public key (SPKI PEM)', () => jws({ alg: 'HS256', kid: realKid, typ: 'JWT' }, payload(), new TextEncoder().encode(spkiPem))],
    ['HS256 keyed with the JWKS public key (SPKI DER)', () => jws({ alg: 'HS256', kid: realKid }, payload(), new Uint8Array(publicDer))],
    ['HS256 keyed with the JWKS entry (JSON)', () => jws({ alg: 'HS256', kid: realKid }, payload(), new TextEncoder().encode(JSON.stringify(publishedJwk)))],
    ['HS256 keyed with the modulus n', () => jws({ alg: 'HS256', kid: realKid }, payload(), base64url.decode(publishedJwk.n))],
    ['HS512 keyed with the SPKI PEM', () => jws({ alg: 'HS512', kid: realKid }, payload(), new TextEncoder().encode(spkiPem))],
    // kid games.
    ['unknown kid, attacker key', () => jws({ alg: 'RS256', kid: 'sig_00000000000000000000000000' }, payload(), attackerKey)],
    ['unknown kid, service key', () => jws({ alg: 'RS256', kid: 'sig_00000000000000000000000000' }, payload(), realKey)],
    ['no kid, service key', () => jws({ alg: 'RS256', typ: 'JWT' }, payload(), realKey)],
    ['kid ../../dev/null, HS256 empty key', () => hs256({ alg: 'HS256', kid: '../../dev/null' }, payload(), '')],
    ['kid ../../dev/null, attacker key', () => jws({ alg: 'RS256', kid: '../../dev/null' }, payload(), attackerKey)],
    ['kid ../../dev/null, service key', () => jws({ alg: 'RS256', kid: '../../dev/null' }, payload(), realKey)],
    ["kid ' OR 1=1--, attacker key", () => jws({ alg: 'RS256', kid: "' OR 1=1--" }, payload(), attackerKey)],
    ["kid ' OR 1=1--, HS256 empty key", () => hs256({ alg: 'HS256', kid: "' OR 1=1--" }, payload(), '')],
    ["kid ' OR 1=1--, service key", () => jws({ alg: 'RS256', kid: "' OR 1=1--" }, payload(), realKey)],
    ['kid as an object', () => jws({ alg: 'RS256', kid: { $ne: null } }, payload(), attackerKey)],
    // The key named by the token itself (never trusted).
    ['jku naming the attacker JWKS (attacker kid)', () => jws({ alg: 'RS256', kid: 'attacker-1', jku: `${evil}/jwks.json` }, payload(), attackerKey)],
    ['jku naming the attacker JWKS (service kid)', () => jws({ alg: 'RS256', kid: realKid, jku: `${evil}/jwks.json` }, payload(), attackerKey)],
    ['x5u naming the attacker certificate', () => jws({ alg: 'RS256', kid: 'attacker-1', x5u: `${evil}/cert.pem` }, payload(), attackerKey)],
    ['embedded jwk = attacker key (no kid)', () => jws({ alg: 'RS256', jwk: attacker.publicJwk }, payload(), attackerKey)],
    ['embedded jwk = attacker key (service kid)', () => jws({ alg: 'RS256', kid: realKid, jwk: { ...attacker.publicJwk, kid: realKid } }, payload(), attackerKey)],
    ['attacker key with the service kid', () => jws(realHeader(), payload(), attackerKey)],
    // Time claims, with a genuine signature.
    ['expired exp (service key)', () => jws(realHeader(), payload({ iat: now() - 1000, exp: now() - 1 }), realKey)],
    ['exp missing (service key)', () => jws(realHeader(), payload({ exp: undefined }), realKey)],
    ['exp as a string (service key)', () => jws(realHeader(), payload({ exp: String(now() + 900) }), realKey)],
    ['future nbf (service key)', () => jws(realHeader(), payload({ nbf: now() + 600 }), realKey)],
    // Every access token carries iat and jti (Part A, platform access token claims): one without is not the service's.
    ['iat missing (service key)', () => jws(realHeader(), payload({ iat: undefined }), realKey)],
    ['jti missing (service key)', () => jws(realHeader(), payload({ jti: undefined }), realKey)],
    // Issuer and audience, with a genuine signature.
    ['wrong iss (service key)', () => jws(realHeader(), payload({ iss: evil }), realKey)],
    ['iss with a trailing slash (service key)', () => jws(realHeader(), payload({ iss: `${claims.iss}/` }), realKey)],
    ['iss missing (service key)', () => jws(realHeader(), payload({ iss: undefined }), realKey)],
    ['wrong aud (service key)', () => jws(realHeader(), payload({ aud: 'platform-admin' }), realKey)],
    ['aud = app_x (service key)', () => jws(realHeader(), payload({ aud: 'app_x' }), realKey)],
    ['aud missing (service key)', () => jws(realHeader(), payload({ aud: undefined }), realKey)],
    ['a real app token (aud = application id) as a platform bearer', () => appToken],
    // Tampering with a genuine token.
    ['payload byte flipped', () => `${h}.${flip(p, 12)}.${s}`],
    ['payload byte flipped (last)', () => `${h}.${flip(p, p.length - 2)}.${s}`],
    ['header byte flipped', () => `${flip(h, 5)}.${p}.${s}`],
    ['signature byte flipped', () => `${h}.${p}.${flip(s, 20)}`],
    ['signature truncated', () => `${h}.${p}.${s.slice(0, -4)}`],
    ['signature stripped', () => `${h}.${p}.`],
    ['payload swapped for another user', () => `${h}.${other.token.split('.')[1]}.${s}`],
    // Unknown critical header.
    ['unknown crit header (service key)', () => jws(realHeader({ crit: ['x-attacker'], 'x-attacker': true }), payload(), realKey)],
    ['crit b64=false, unencoded payload (service key)', () => unencoded(realHeader({ crit: ['b64'], b64: false }), payload(), realKey)],
    // Other algorithms with the service's own RSA key.
    ['PS256 with the service key', async () => jws({ alg: 'PS256', kid: realKid }, payload(), await sameKeyAs('PS256'))],
    ['RS512 with the service key', async () => jws({ alg: 'RS512', kid: realKid }, payload(), await sameKeyAs('RS512'))],
    // sub / sid pointing at someone else, re-signed with an attacker key.
    ['sub = other user, attacker key, service kid', () => jws(realHeader(), payload({ sub: other.id }), attackerKey)],
    ['sid = other session, attacker key, service kid', () => jws(realHeader(), payload({ sub: other.id, sid: otherSid }), attackerKey)],
    ['sub/sid = other, attacker key embedded as jwk', () => jws({ alg: 'RS256', jwk: attacker.publicJwk }, payload({ sub: other.id, sid: otherSid }), attackerKey)],
    ['sub/sid = other, jku to attacker', () => jws({ alg: 'RS256', kid: 'attacker-1', jku: `${evil}/jwks.json` }, payload({ sub: other.id, sid: otherSid }), attackerKey)],
    // Claims that disagree with the session, even under the service key.
    ['sub = other user with the victim sid (service key)', () => jws(realHeader(), payload({ sub: other.id }), realKey)],
    ['sid = other user session with the victim sub (service key)', () => jws(realHeader(), payload({ sid: otherSid }), realKey)],
    ["sid = ' OR 1=1-- (service key)", () => jws(realHeader(), payload({ sid: "' OR 1=1--" }), realKey)],
    ['sid missing (service key)', () => jws(realHeader(), payload({ sid: undefined }), realKey)],
    ['sid as an array (service key)', () => jws(realHeader(), payload({ sid: [claims.sid] }), realKey)],
    ['test_mode flipped on a live session (service key)', () => jws(realHeader(), payload({ test_mode: true }), realKey)],
  ];

  // No key may be fetched from a URL the token names (jku / x5u): count every fetch meanwhile.
  const fetched: string[] = [];
  const realFetch = globalThis.fetch;
  globalThis.fetch = (async (input: unknown) => {
    fetched.push(String(input));
    throw new Error('no outbound fetch in TK-1');
  }) as typeof fetch;
  const logStart = t.logs.length;
  const accepted: string[] = [];
  try {
    for (const [name, make] of variants) {
      const token = await make();
      const res = await call(t, 'GET', ME, token);
      if (res.statusCode !== 401) {
        accepted.push(`${name}: ${res.statusCode} ${res.body.slice(0, 200)}`);
        continue;
      }
      const body = res.json();
      assert.equal(body.error.code, 'unauthenticated', `${name}: ${res.body}`);
      assert.match(String(res.headers['www-authenticate']), /error="invalid_token"/, name);
    }
  } finally {
    globalThis.fetch = realFetch;
  }
  figure('TK-1', `variants accepted: ${accepted.length} / ${variants.length}`);
  assert.deepEqual(accepted, [], 'forged tokens accepted');
  assert.deepEqual(fetched, [], 'a key URL named by a token was fetched');
  const logged = dbErrorLines(t.logs.slice(logStart));
  assert.deepEqual(logged, [], 'no DB (or any error-level) log line');
  // The genuine token still works afterwards: nothing above disturbed the session.
  assertStatus(await call(t, 'GET', ME, victim.token), 200);
});

test('TK-1 a genuine token past exp (service clock moved 15 min + 1 s) gets 401; an app token is never a platform bearer, before or after', async () => {
  const fresh = await person(t);
  assertStatus(await call(t, 'GET', ME, fresh.token), 200);
  assert.equal((await call(t, 'GET', ME, appToken)).statusCode, 401);
  assert.equal(decodeJwt(appToken).aud, appId);
  const logStart = t.logs.length;
  t.clock.advance(15 * 60 + 1);
  try {
    const res = await call(t, 'GET', ME, fresh.token);
    assert.equal(res.statusCode, 401, res.body);
    assert.equal(res.json().error.code, 'unauthenticated');
  } finally {
    t.clock.advance(-(15 * 60 + 1));
  }
  assert.deepEqual(dbErrorLines(t.logs.slice(logStart)), []);
});

test('TK-1 jose SignJWT: the victim\'s untouched claims under the attacker key (service kid) are refused; under the service key accepted (only the key differs)', async () => {
  const token = await new SignJWT(payload()).setProtectedHeader({ alg: 'RS256', kid: realKid, typ: 'JWT' }).sign(attacker.privateKey);
  assert.equal((await call(t, 'GET', ME, token)).statusCode, 401);
  // The same claims under the service key pass: only the key differs.
  const ok = await new SignJWT(payload()).setProtectedHeader({ alg: 'RS256', kid: realKid, typ: 'JWT' }).sign(realKey);
  assertStatus(await call(t, 'GET', ME, ok), 200);
});
