// Secrets the service must read back (TOTP secrets) are stored sealed, never in plaintext (catalog AU-2),
// with the key of ENCRYPTION_KEY or, without it, the database's own (docs/decisions.md "Secrets at rest").
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { boot } from '../../src/boot.js';
import { SystemClock } from '../../src/clock.js';
import { ConfigError, loadConfig, type Config } from '../../src/config.js';
import { buildTestApp, openTestDatabase, testConfig, type TestApp } from '../helpers/app.js';
import { bearer, createApiKey, createUser, login, PASSWORD, uniqueEmail } from '../helpers/fixtures.js';
import { alignToStep, createMfaUser, latestToken, mfaChallenge, NEW_PASSWORD, post, sql, totpCode } from './support.js';
import { assertStatus, call, platformKey } from '../access/support.js';
import { codeFor, member, oauthApp, signIn } from '../oauth/support.js';

/** Every row of every table of the app's schema, as text. */
async function databaseText(t: TestApp): Promise<string> {
  const tables = await sql<{ table_name: string }>(t, `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'`);
  const parts: string[] = [];
  for (const { table_name } of tables) {
    for (const row of await sql<{ r: string }>(t, `SELECT x::text AS r FROM "${table_name}" x`)) parts.push(row.r);
  }
  return parts.join('\n');
}

async function verifiesWithTotp(t: TestApp, user: Parameters<typeof mfaChallenge>[1], secret: string): Promise<void> {
  alignToStep(t, 5);
  const mfaToken = await mfaChallenge(t, user);
  const res = await post(t, '/v1/auth/mfa/verify', { mfa_token: mfaToken, code: await totpCode(t, secret) });
  assert.equal(res.statusCode, 200, res.body);
}

const sealedWith = (stored: string) => /^enc:v1:([0-9a-f]{12}):/.exec(stored)?.[1] ?? null;

test('AU-2: a TOTP secret is never stored in plaintext: the pending and the confirmed secret are sealed, no table holds it, and TOTP works', async (c) => {
  const t = await buildTestApp({}, c);
  const { user, secret } = await createMfaUser(t);
  const [row] = await sql(t, `SELECT totp_secret FROM identities WHERE user_id = $1 AND method = 'password'`, [user.id]);
  assert.ok(sealedWith(row.totp_secret), `sealed: ${row.totp_secret.slice(0, 20)}`);
  assert.ok(!(await databaseText(t)).includes(secret), 'the confirmed secret appears nowhere in the database');
  await verifiesWithTotp(t, user, secret);

  // A pending secret (enrollment not yet confirmed) is sealed too.
  const other = await createMfaUser(t);
  const disabled = await post(t, '/v1/users/me/mfa/totp/disable', { code: await totpCode(t, other.secret) }, bearer(other.token));
  assert.equal(disabled.statusCode, 204, disabled.body);
  const begin = await t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp', headers: bearer(other.token) });
  assert.equal(begin.statusCode, 200, begin.body);
  const [pending] = await sql(t, `SELECT totp_pending_secret FROM identities WHERE user_id = $1 AND method = 'password'`, [other.user.id]);
  assert.ok(sealedWith(pending.totp_pending_secret), 'the pending secret is sealed');
  assert.ok(!(await databaseText(t)).includes(begin.json().secret), 'the pending secret appears nowhere in the database');
});

test('AU-2: a webhook signing secret is stored sealed, the current and the previous one after a rotation, and appears nowhere in the database, not in the idempotency record that replays it', async (c) => {
  const t = await buildTestApp({ webhookAllowPrivateTargets: true }, c);
  const secretOf = (res: { json: () => any }) => res.json().signing_secret as string;
  const platform = (await createApiKey(t, { permissions: ['webhooks.manage'] })).secret;
  const create = () => t.app.inject({
    method: 'POST', url: '/v1/webhooks', headers: { ...bearer(platform), 'idempotency-key': 'at-rest-1' },
    payload: { scope: 'platform', url: 'http://127.0.0.1:9/hook', events: ['*'] },
  });
  const created = await create();
  assert.equal(created.statusCode, 201, created.body);
  const first = secretOf(created);
  assert.equal(secretOf(await create()), first, 'the replay answers the same secret');
  const rotated = await t.app.inject({ method: 'POST', url: `/v1/webhooks/${created.json().id}/rotate-secret`, headers: { ...bearer(platform), 'idempotency-key': 'at-rest-2' } });
  assert.equal(rotated.statusCode, 200, rotated.body);
  const [row] = await sql(t, 'SELECT signing_secret, previous_secret FROM webhook_subscriptions WHERE id = $1', [created.json().id]);
  assert.ok(sealedWith(row.signing_secret) && sealedWith(row.previous_secret), 'both secrets sealed');
  const text = await databaseText(t);
  for (const secret of [first, secretOf(rotated)]) assert.ok(!text.includes(secret), 'the secret appears nowhere in the database');
});

test('AU-2: the RSA private signing key is stored sealed, and the service signs and verifies with it', async (c) => {
  const t = await buildTestApp({}, c);
  const rows = await sql<{ private_jwk: unknown }>(t, 'SELECT private_jwk FROM signing_keys');
  assert.ok(rows.length >= 1, 'rows.length >= 1');
  for (const row of rows) assert.ok(typeof row.private_jwk === 'string' && sealedWith(row.private_jwk), `sealed: ${JSON.stringify(row.private_jwk).slice(0, 30)}`);
  assert.ok(!(await databaseText(t)).includes('"d":'), 'no private exponent in any row');
  const { token } = await createMfaUser(t);
  assert.equal((await t.app.inject({ method: 'GET', url: '/v1/users/me', headers: bearer(token) })).statusCode, 200);
});

test('AU-2: a signing key made while the service runs (keys rotate, with and without retire-now) is stored sealed too, and signs and verifies', async (c) => {
  const t = await buildTestApp({}, c);
  const before = await sql<{ kid: string }>(t, 'SELECT kid FROM signing_keys');
  const rotated = await t.deps.keys.rotate();
  const leaked = await t.deps.keys.rotate({ retireNow: true });
  const rows = await sql<{ kid: string; private_jwk: unknown }>(t, 'SELECT kid, private_jwk FROM signing_keys WHERE kid = ANY($1)', [[rotated.kid, leaked.kid]]);
  assert.equal(rows.length, 2);
  for (const row of rows) assert.ok(typeof row.private_jwk === 'string' && sealedWith(row.private_jwk), `${row.kid} sealed: ${JSON.stringify(row.private_jwk).slice(0, 30)}`);
  assert.ok(!(await databaseText(t)).includes('"d":'), 'no private exponent in any row');
  assert.equal(before.length + 2, (await sql(t, 'SELECT kid FROM signing_keys')).length);
  const { token } = await createMfaUser(t);
  assert.equal((await t.app.inject({ method: 'GET', url: '/v1/users/me', headers: bearer(token) })).statusCode, 200);
});

test('ENCRYPTION_KEY: secrets stored before it was set (plaintext or sealed with the database key) are resealed with it at start and keep working; a rotated list still opens them', async () => {
  const { database, drop } = await openTestDatabase(null, { migrated: true });
  const clock = new SystemClock();
  const start = async (overrides: Partial<Config>): Promise<TestApp> => {
    const config = testConfig({ webhookAllowPrivateTargets: true, ...overrides });
    const { app, deps } = await boot({ config, database, clock, logger: false });
    await app.ready();
    return { app, deps, clock, database, config, schema: null, close: async () => { await app.close(); await deps.jobs.stop(); } };
  };
  try {
    const first = await start({ encryptionKeys: [] });
    const sealedUser = await createMfaUser(first);
    const legacyUser = await createMfaUser(first);
    const identityOf = async (t: TestApp, userId: string) =>
      (await sql(t, `SELECT totp_secret FROM identities WHERE user_id = $1 AND method = 'password'`, [userId]))[0].totp_secret as string;
    const databaseKid = sealedWith(await identityOf(first, sealedUser.user.id));
    assert.ok(databaseKid, 'sealed with the database key');
    // A row written before sealing existed holds the secret as it is.
    await sql(first, `UPDATE identities SET totp_secret = $2 WHERE user_id = $1 AND method = 'password'`, [legacyUser.user.id, legacyUser.secret]);
    // So do a webhook signing secret and a signing key's private JWK.
    const legacyWebhookSecret = `whsec_${randomBytes(32).toString('base64url')}`;
    await sql(first, `INSERT INTO webhook_subscriptions (id, scope, url, events, status, signing_secret, api_version, test_mode, created_at, updated_at)
                      VALUES ('whk_legacy', 'platform', 'http://127.0.0.1:9/x', '{*}', 'healthy', $1, '2026-01-01', false, now(), now())`, [legacyWebhookSecret]);
    const [keyRow] = await sql<{ kid: string; private_jwk: string }>(first, 'SELECT kid, private_jwk FROM signing_keys WHERE retired_at IS NULL');
    const privateJwk = first.deps.secrets.open(keyRow.private_jwk, `signing_key:${keyRow.kid}`);
    await sql(first, 'UPDATE signing_keys SET private_jwk = $2::jsonb WHERE kid = $1', [keyRow.kid, privateJwk]);
    // And an answer stored for an Idempotency-Key replay (the previous version kept them in the clear).
    const hooks = (await createApiKey(first, { permissions: ['webhooks.manage'] })).secret;
    const createHook = (t: TestApp) => t.app.inject({
      method: 'POST', url: '/v1/webhooks', headers: { ...bearer(hooks), 'idempotency-key': 'legacy-answer' },
      payload: { scope: 'platform', url: 'http://127.0.0.1:9/y', events: ['*'] },
    });
    const answered = await createHook(first);
    assert.equal(answered.statusCode, 201, answered.body);
    await sql(first, `UPDATE idempotency_keys SET response_body = $1 WHERE key = 'legacy-answer'`, [answered.body]);
    // One stored sealed (with the database key) is no plaintext: it is not sealed again, and replays as it was sent.
    const createSealedHook = (t: TestApp) => t.app.inject({
      method: 'POST', url: '/v1/webhooks', headers: { ...bearer(hooks), 'idempotency-key': 'sealed-answer' },
      payload: { scope: 'platform', url: 'http://127.0.0.1:9/z', events: ['*'] },
    });
    const sealedAnswer = await createSealedHook(first);
    assert.equal(sealedAnswer.statusCode, 201, sealedAnswer.body);
    await first.close();

    const keyA = randomBytes(32);
    const second = await start({ encryptionKeys: [keyA] });
    const kidA = sealedWith(await identityOf(second, sealedUser.user.id));
    assert.ok(kidA && kidA !== databaseKid, 'resealed with ENCRYPTION_KEY');
    assert.equal(sealedWith(await identityOf(second, legacyUser.user.id)), kidA, 'the plaintext secret is sealed at start');
    assert.ok(!(await databaseText(second)).includes(legacyUser.secret), 'no plaintext left');
    const [hook] = await sql(second, `SELECT signing_secret FROM webhook_subscriptions WHERE id = 'whk_legacy'`);
    assert.equal(sealedWith(hook.signing_secret), kidA, 'the plaintext webhook secret is sealed at start');
    assert.equal(second.deps.secrets.open(hook.signing_secret, 'webhook:whk_legacy'), legacyWebhookSecret);
    const [stored] = await sql(second, `SELECT response_body FROM idempotency_keys WHERE key = 'legacy-answer'`);
    assert.equal(sealedWith(stored.response_body), kidA, 'the stored answer in the clear is sealed at start');
    const replayed = await createHook(second);
    assert.equal(replayed.headers['idempotent-replayed'], 'true');
    assert.equal(replayed.body, answered.body);
    const sealedReplay = await createSealedHook(second);
    assert.equal(sealedReplay.headers['idempotent-replayed'], 'true');
    assert.equal(sealedReplay.body, sealedAnswer.body, 'the answer sealed before the start replays as it was sent');
    const [key] = await sql<{ private_jwk: unknown }>(second, 'SELECT private_jwk FROM signing_keys WHERE kid = $1', [keyRow.kid]);
    assert.equal(typeof key.private_jwk === 'string' && sealedWith(key.private_jwk), kidA, 'the plaintext private key is sealed at start');
    await verifiesWithTotp(second, sealedUser.user, sealedUser.secret);
    await verifiesWithTotp(second, legacyUser.user, legacyUser.secret);
    await second.close();

    // Rotation: the new key first, the old one kept to open what it sealed (resealed at start anyway).
    const keyB = randomBytes(32);
    const third = await start({ encryptionKeys: [keyB, keyA] });
    const kidB = sealedWith(await identityOf(third, sealedUser.user.id));
    assert.ok(kidB && kidB !== kidA, 'resealed with the first key of the list');
    await verifiesWithTotp(third, sealedUser.user, sealedUser.secret);
    await third.close();
  } finally {
    await database.close();
    await drop();
  }
});

test('AU-2: a sealed TOTP secret is bound to its identity: copied onto another user\'s identity it does not open, and the secret\'s codes do not sign that user in', async (c) => {
  const t = await buildTestApp({}, c);
  const owner = await createMfaUser(t);
  const victim = await createMfaUser(t);
  await sql(t, `UPDATE identities SET totp_secret = (SELECT totp_secret FROM identities WHERE user_id = $1 AND method = 'password') WHERE user_id = $2 AND method = 'password'`, [owner.user.id, victim.user.id]);
  const sessions = async () => (await sql(t, 'SELECT count(*)::int AS n FROM sessions WHERE user_id = $1', [victim.user.id]))[0].n;
  const before = await sessions();
  alignToStep(t, 5);
  const mfaToken = await mfaChallenge(t, victim.user);
  const res = await post(t, '/v1/auth/mfa/verify', { mfa_token: mfaToken, code: await totpCode(t, owner.secret) });
  assert.notEqual(res.statusCode, 200, res.body);
  assert.equal(await sessions(), before, 'no session for the victim');
});

test('ENCRYPTION_KEY: a process started without the key that sealed a stored secret refuses to start and names the missing key (docs/decisions.md)', async () => {
  const { database, drop } = await openTestDatabase(null, { migrated: true });
  const clock = new SystemClock();
  const start = async (encryptionKeys: Buffer[]) => {
    const { app, deps } = await boot({ config: testConfig({ encryptionKeys }), database, clock, logger: false });
    await app.ready();
    return async () => { await app.close(); await deps.jobs.stop(); };
  };
  try {
    const keyA = randomBytes(32);
    await (await start([keyA]))();
    const { rows } = await database.scoped('system').query<{ private_jwk: string }>('SELECT private_jwk FROM signing_keys');
    const kidA = sealedWith(rows[0]!.private_jwk);
    assert.ok(kidA, 'the signing key is sealed with ENCRYPTION_KEY');
    await assert.rejects(start([randomBytes(32)]), (err: Error) => err.message.includes(kidA!), 'the error names the missing key');
  } finally {
    await database.close();
    await drop();
  }
});

/** README "Backup and restore", a lost ENCRYPTION_KEY: what only the lost key (kid $1) opens is cleared, word for word. */
const LOST_KEY_SQL = [
  `DELETE FROM signing_keys WHERE private_jwk LIKE 'enc:v1:' || $1 || ':%'`,
  `DELETE FROM recovery_codes WHERE user_id IN (SELECT user_id FROM identities WHERE totp_secret LIKE 'enc:v1:' || $1 || ':%' OR totp_pending_secret LIKE 'enc:v1:' || $1 || ':%')`,
  `UPDATE identities SET totp_secret = NULL, totp_pending_secret = NULL, totp_confirmed_at = NULL, totp_last_step = NULL WHERE totp_secret LIKE 'enc:v1:' || $1 || ':%' OR totp_pending_secret LIKE 'enc:v1:' || $1 || ':%'`,
  `UPDATE webhook_subscriptions SET signing_secret = 'whsec_' || replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), previous_secret = NULL, previous_secret_expires_at = NULL WHERE signing_secret LIKE 'enc:v1:' || $1 || ':%' OR previous_secret LIKE 'enc:v1:' || $1 || ':%'`,
  `DELETE FROM idempotency_keys WHERE response_body LIKE 'enc:v1:' || $1 || ':%'`,
];

test('a lost ENCRYPTION_KEY (README "Backup and restore"): after the documented clean-up the service starts with a new key; tokens signed before are refused, a TOTP user signs in with the password alone, a webhook owner rotates its secret', async () => {
  const { database, drop } = await openTestDatabase(null, { migrated: true });
  const clock = new SystemClock();
  const start = async (encryptionKeys: Buffer[]): Promise<TestApp> => {
    const config = testConfig({ encryptionKeys, webhookAllowPrivateTargets: true });
    const { app, deps } = await boot({ config, database, clock, logger: false });
    await app.ready();
    return { app, deps, clock, database, config, schema: null, close: async () => { await app.close(); await deps.jobs.stop(); } };
  };
  try {
    const first = await start([randomBytes(32)]);
    const mfa = await createMfaUser(first);
    const plain = await createUser(first);
    const oldToken = await login(first, plain);
    const hooks = (await createApiKey(first, { permissions: ['webhooks.manage'] })).secret;
    const hook = assertStatus(await call(first, 'POST', '/v1/webhooks', hooks, { scope: 'platform', url: 'http://127.0.0.1:9/lost', events: ['*'] }, { 'idempotency-key': 'lost-key' }), 201);
    const [{ private_jwk }] = await sql<{ private_jwk: string }>(first, 'SELECT private_jwk FROM signing_keys WHERE retired_at IS NULL');
    const lostKid = sealedWith(private_jwk)!;
    await first.close();

    const newKey = randomBytes(32);
    await assert.rejects(start([newKey]), (err: Error) => err.message.includes(lostKid), 'refused, naming the lost key');
    await database.scoped('system').transaction(async (tx) => {
      for (const text of LOST_KEY_SQL) await tx.query(text, [lostKid]);
    });

    const second = await start([newKey]);
    try {
      assert.equal((await call(second, 'GET', '/v1/users/me', oldToken)).statusCode, 401, 'a token signed with a dropped signing key is refused');
      assert.equal((await call(second, 'GET', '/v1/users/me', await login(second, plain))).statusCode, 200, 'a new sign-in works');
      const signedIn = assertStatus(await call(second, 'POST', '/v1/auth/login', null, { email: mfa.user.email, password: mfa.user.password }), 200);
      assert.equal(signedIn.mfa_required, undefined, 'no MFA challenge: TOTP is off');
      assert.equal(assertStatus(await call(second, 'GET', '/v1/users/me', signedIn.access_token), 200).mfa_enabled, false);
      assert.equal((await sql(second, 'SELECT 1 FROM recovery_codes WHERE user_id = $1', [mfa.user.id])).length, 0, 'its recovery codes went with it');
      const rotated = assertStatus(await call(second, 'POST', `/v1/webhooks/${hook.id}/rotate-secret`, hooks, {}), 200);
      assert.match(rotated.signing_secret, /^whsec_/);
      const [row] = await sql(second, 'SELECT signing_secret, previous_secret FROM webhook_subscriptions WHERE id = $1', [hook.id]);
      assert.ok(sealedWith(row.signing_secret) && sealedWith(row.previous_secret), 'both secrets sealed with the new key');
      assert.equal(sealedWith(row.signing_secret), sealedWith(row.previous_secret));
    } finally {
      await second.close();
    }
  } finally {
    await database.close();
    await drop();
  }
});

test('ENCRYPTION_KEY must be 32-byte keys (64 hex digits or base64), comma-separated; anything else refuses to start', () => {
  const hex = randomBytes(32).toString('hex');
  const b64 = randomBytes(32).toString('base64');
  assert.equal(loadConfig({ ENCRYPTION_KEY: hex }).encryptionKeys.length, 1);
  assert.equal(loadConfig({ ENCRYPTION_KEY: `${b64}, ${hex}` }).encryptionKeys.length, 2);
  assert.equal(loadConfig({}).encryptionKeys.length, 0);
  for (const bad of ['short', hex.slice(2), randomBytes(16).toString('base64'), `${hex},`, `${hex}0`, `0${hex}`, `${b64}A`, `A${b64}`]) {
    assert.throws(() => loadConfig({ ENCRYPTION_KEY: bad }), (err: unknown) => err instanceof ConfigError && /ENCRYPTION_KEY/.test(err.message), bad);
  }
});

test('AU-2 "hash string starts $argon2id$v=19$m=19456,t=2,p=1$; salts unique for identical passwords; no plaintext rtk_, plat_*, reset, invite or MFA secrets anywhere in a DB dump" (after signup, key creation and rotation, refresh, reset, invitation, MFA and the hosted flow; the mail outbox, which keeps links until sent, aside)', async (c) => {
  const t = await buildTestApp({}, c);
  const secrets: Record<string, string> = {};
  const [e1, e2] = [uniqueEmail('au2a'), uniqueEmail('au2b')];
  const first = assertStatus(await post(t, '/v1/auth/signup', { email: e1, password: PASSWORD }), 201);
  assertStatus(await post(t, '/v1/auth/signup', { email: e2, password: PASSWORD }), 201);
  const hashes = await sql<{ password_hash: string }>(
    t, `SELECT i.password_hash FROM identities i JOIN users u ON u.id = i.user_id WHERE lower(u.email) IN (lower($1), lower($2))`, [e1, e2],
  );
  assert.equal(hashes.length, 2);
  for (const { password_hash } of hashes) assert.ok(password_hash.startsWith('$argon2id$v=19$m=19456,t=2,p=1$'), password_hash);
  assert.notEqual(hashes[0].password_hash.split('$')[4], hashes[1].password_hash.split('$')[4], 'one password, two salts');
  assert.notEqual(hashes[0].password_hash, hashes[1].password_hash);

  secrets.signup_refresh_token = first.refresh_token;
  secrets.verification = await latestToken(t, e1, 'email_verification');
  secrets.rotated_refresh_token = assertStatus(await post(t, '/v1/auth/token/refresh', { refresh_token: first.refresh_token }), 200).refresh_token;
  assert.equal((await post(t, '/v1/auth/password/forgot', { email: e2 })).statusCode, 202);
  secrets.reset = await latestToken(t, e2, 'password_reset');
  const admin = await platformKey(t);
  const invited = assertStatus(await call(t, 'POST', '/v1/users', admin, { email: uniqueEmail('au2i') }), 201);
  secrets.invitation = await latestToken(t, invited.email, 'invitation');
  const keyAdmin = await login(t, await createUser(t, { roles: ['superadmin'] }));
  const key = assertStatus(await call(t, 'POST', '/v1/api-keys', keyAdmin, { name: 'au2', scope: 'platform', permissions: ['users.list'] }), 201);
  secrets.key = key.secret;
  secrets.rotated_key = assertStatus(await call(t, 'POST', `/v1/api-keys/${key.id}/rotate`, keyAdmin, {}), 200).secret;
  const mfa = await createMfaUser(t);
  secrets.mfa_token = await mfaChallenge(t, mfa.user);
  secrets.totp_secret = mfa.secret;
  mfa.recoveryCodes.forEach((code, i) => { secrets[`recovery_code_${i}`] = code; });
  const app = await oauthApp(t, admin);
  const holder = await member(t, admin, app.id);
  secrets.authorization_code = (await codeFor(t, holder, app.id)).code;
  secrets.app_refresh_token = (await signIn(t, holder, app.id)).refresh_token;
  assert.equal((await post(t, '/v1/auth/password/reset', { token: secrets.reset, password: NEW_PASSWORD })).statusCode, 204);

  const tables = await sql<{ table_name: string }>(t, `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'`);
  const found: string[] = [];
  for (const { table_name } of tables) {
    if (table_name === 'emails') continue; // docs/decisions.md "Sent mail keeps no live link"
    const text = (await sql<{ r: string }>(t, `SELECT x::text AS r FROM "${table_name}" x`)).map((row) => row.r).join('\n');
    for (const [name, secret] of Object.entries(secrets)) {
      const random = secret.replace(/^[a-z]+_(live_|test_)?/, ''); // the secret without its prefix
      if (text.includes(secret) || (random.length >= 16 && text.includes(random))) found.push(`${name} in ${table_name}`);
    }
  }
  assert.deepEqual(found, [], 'plaintext secrets found');
});
