// Secrets the service must read back (TOTP secrets) are stored sealed, never in plaintext (catalog AU-2),
// with the key of ENCRYPTION_KEY or, without it, the database's own (docs/decisions.md "Secrets at rest").
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { boot } from '../../src/boot.js';
import { SystemClock } from '../../src/clock.js';
import { ConfigError, loadConfig, type Config } from '../../src/config.js';
import { buildTestApp, openTestDatabase, testConfig, type TestApp } from '../helpers/app.js';
import { bearer } from '../helpers/fixtures.js';
import { alignToStep, createMfaUser, mfaChallenge, post, sql, totpCode } from './support.js';

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

test('ENCRYPTION_KEY: secrets stored before it was set (plaintext or sealed with the database key) are resealed with it at start and keep working; a rotated list still opens them', async () => {
  const { database, drop } = await openTestDatabase(null, { migrated: true });
  const clock = new SystemClock();
  const start = async (overrides: Partial<Config>): Promise<TestApp> => {
    const config = testConfig(overrides);
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
    await first.close();

    const keyA = randomBytes(32);
    const second = await start({ encryptionKeys: [keyA] });
    const kidA = sealedWith(await identityOf(second, sealedUser.user.id));
    assert.ok(kidA && kidA !== databaseKid, 'resealed with ENCRYPTION_KEY');
    assert.equal(sealedWith(await identityOf(second, legacyUser.user.id)), kidA, 'the plaintext secret is sealed at start');
    assert.ok(!(await databaseText(second)).includes(legacyUser.secret), 'no plaintext left');
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

test('ENCRYPTION_KEY must be 32-byte keys (64 hex digits or base64), comma-separated; anything else refuses to start', () => {
  const hex = randomBytes(32).toString('hex');
  const b64 = randomBytes(32).toString('base64');
  assert.equal(loadConfig({ ENCRYPTION_KEY: hex }).encryptionKeys.length, 1);
  assert.equal(loadConfig({ ENCRYPTION_KEY: `${b64}, ${hex}` }).encryptionKeys.length, 2);
  assert.equal(loadConfig({}).encryptionKeys.length, 0);
  for (const bad of ['short', hex.slice(2), randomBytes(16).toString('base64'), `${hex},`]) {
    assert.throws(() => loadConfig({ ENCRYPTION_KEY: bad }), (err: unknown) => err instanceof ConfigError && /ENCRYPTION_KEY/.test(err.message), bad);
  }
});
