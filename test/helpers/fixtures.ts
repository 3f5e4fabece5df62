import { randomBytes } from 'node:crypto';
import type { TestApp } from './app.js';
import { systemCtx } from '../../src/context.js';
import { hashPassword } from '../../src/auth/passwords.js';
import { createUserRecords } from '../../src/modules/users/service.js';
import { hashSecret, newId, newSecret } from '../../src/ids.js';
import { API_KEY_PREFIX } from '../../src/auth/credentials.js';
import type { Mode } from '../../src/db/types.js';

export const PASSWORD = 'violet-harbor-cinnamon-42';
let passwordHash: Promise<string> | null = null;

export const uniqueEmail = (label = 'user') => `${label}-${randomBytes(5).toString('hex')}@example.com`;

export interface TestUser {
  id: string;
  email: string;
  password: string;
  mode: Mode;
}

/** A fresh active user with a password (created through the users service, as signup will). */
export async function createUser(
  t: TestApp,
  opts: { mode?: Mode; roles?: string[]; email?: string; status?: 'active' | 'invited' | 'suspended' } = {},
): Promise<TestUser> {
  const mode = opts.mode ?? 'live';
  const email = opts.email ?? uniqueEmail();
  passwordHash ??= hashPassword(PASSWORD);
  const hash = await passwordHash;
  const ctx = systemCtx(t.deps, mode);
  const row = await ctx.db.transaction((tx) =>
    createUserRecords(tx, ctx, {
      email,
      status: opts.status ?? 'active',
      emailVerified: true,
      passwordHash: opts.status === 'invited' ? null : hash,
      extraRoleIds: opts.roles?.map((r) => (r.startsWith('role_') ? r : `role_platform_${r}`)),
    }),
  );
  return { id: row.id, email, password: PASSWORD, mode };
}

/** Signs in through the API and returns the access token. */
export async function login(t: TestApp, user: Pick<TestUser, 'email' | 'password' | 'mode'>): Promise<string> {
  const res = await t.app.inject({
    method: 'POST',
    url: '/v1/auth/login',
    payload: { email: user.email, password: user.password, test_mode: user.mode === 'test' },
  });
  if (res.statusCode !== 200) throw new Error(`login failed: ${res.statusCode} ${res.body}`);
  return res.json().access_token;
}

export async function userToken(t: TestApp, opts: Parameters<typeof createUser>[1] = {}) {
  const user = await createUser(t, opts);
  return { user, token: await login(t, user) };
}

export interface KeyOptions {
  scope?: string;
  permissions?: string[];
  mode?: Mode;
  intendedUse?: 'service' | 'agent';
  restrictDestructive?: boolean;
  expiresAt?: Date | null;
  createdBy?: string;
}

/** Inserts an API key the way the API keys module stores them (hash only), returning the secret. */
export async function createApiKey(t: TestApp, opts: KeyOptions = {}): Promise<{ id: string; secret: string }> {
  const mode = opts.mode ?? 'live';
  const secret = newSecret(API_KEY_PREFIX[mode]);
  const id = newId('key');
  const now = t.clock.now();
  const intendedUse = opts.intendedUse ?? 'service';
  await t.database.scoped('system').query(
    `INSERT INTO api_keys (id, name, scope, permissions, test_mode, intended_use, restrict_destructive, secret_hash,
       secret_hint, expires_at, created_by_user_id, created_at, updated_at)
     VALUES ($1, 'test key', $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11)`,
    [
      id,
      opts.scope ?? 'platform',
      opts.permissions ?? [],
      mode === 'test',
      intendedUse,
      opts.restrictDestructive ?? intendedUse === 'agent',
      hashSecret(secret),
      secret.slice(-4),
      opts.expiresAt ?? null,
      opts.createdBy ?? 'usr_fixture',
      now,
    ],
  );
  return { id, secret };
}

export const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
