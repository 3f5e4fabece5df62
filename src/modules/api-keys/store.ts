import type { KeysetSql, Queryable } from '../../db/types.js';
import { type Conditions, conditions, selectPage } from '../../db/page.js';
import { OWNED_APPLICATIONS_SQL } from '../../access/ownership.js';
import type { ApiKey } from './schemas.js';

export interface KeyRow {
  id: string;
  name: string;
  scope: string;
  permissions: string[];
  test_mode: boolean;
  intended_use: 'service' | 'agent';
  restrict_destructive: boolean;
  secret_hint: string;
  expires_at: Date | null;
  created_by_user_id: string;
  last_used_at: Date | null;
  created_at: Date;
  revoked_at: Date | null;
}

export const KEY_COLUMNS = `id, name, scope, permissions, test_mode, intended_use, restrict_destructive, secret_hint, expires_at,
  created_by_user_id, last_used_at, created_at, revoked_at`;

export function toApiKey(r: KeyRow): ApiKey {
  return {
    id: r.id,
    name: r.name,
    scope: r.scope,
    permissions: r.permissions,
    mode: r.test_mode ? 'test' : 'live',
    intended_use: r.intended_use,
    restrict_destructive: r.restrict_destructive,
    secret_hint: r.secret_hint,
    expires_at: r.expires_at?.toISOString() ?? null,
    created_by: { type: 'user', id: r.created_by_user_id },
    last_used_at: r.last_used_at?.toISOString() ?? null,
    created_at: r.created_at.toISOString(),
    revoked_at: r.revoked_at?.toISOString() ?? null,
  };
}

export async function findKey(db: Queryable, id: string): Promise<KeyRow | null> {
  const { rows } = await db.query<KeyRow>(`SELECT ${KEY_COLUMNS} FROM api_keys WHERE id = $1`, [id]);
  return rows[0] ?? null;
}

/** The columns of a new key, in the order the INSERT takes them; created_at and updated_at are both `now`. */
export interface NewKey {
  id: string;
  name: string;
  scope: string;
  permissions: string[];
  testMode: boolean;
  intendedUse: 'service' | 'agent';
  restrictDestructive: boolean;
  secretHash: string;
  secretHint: string;
  expiresAt: Date | null;
  createdByUserId: string;
  now: Date;
}

export async function insertKey(db: Queryable, k: NewKey): Promise<KeyRow> {
  const { rows } = await db.query<KeyRow>(
    `INSERT INTO api_keys (id, name, scope, permissions, test_mode, intended_use, restrict_destructive, secret_hash, secret_hint,
         expires_at, created_by_user_id, created_at, updated_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12) RETURNING ${KEY_COLUMNS}`,
    [k.id, k.name, k.scope, k.permissions, k.testMode, k.intendedUse, k.restrictDestructive,
      k.secretHash, k.secretHint, k.expiresAt, k.createdByUserId, k.now],
  );
  return rows[0];
}

/** What GET /v1/api-keys narrows to; each condition is added only when its value is set. */
export interface KeyListFilter {
  /** Only keys of Applications this user owns (a caller without api_keys.manage); null: no such limit. */
  ownedBy: string | null;
  scope?: string;
  mode?: 'live' | 'test';
  /** A test-mode caller sees test keys only. */
  testOnly: boolean;
  intendedUse?: 'service' | 'agent';
  /** Only keys neither revoked nor expired at this instant; null: inactive ones too. */
  activeAt: Date | null;
}

/** The list's conditions and their parameters ($1 on); the keyset's parameters follow them. */
export function keyListConditions(f: KeyListFilter): Conditions {
  const { where, params, add } = conditions();
  if (f.ownedBy !== null) add((n) => `scope IN (${OWNED_APPLICATIONS_SQL(n)})`, f.ownedBy);
  if (f.scope) add((n) => `scope = $${n}`, f.scope);
  if (f.mode) add((n) => `test_mode = $${n}`, f.mode === 'test');
  if (f.testOnly) add((n) => `test_mode = $${n}`, true);
  if (f.intendedUse) add((n) => `intended_use = $${n}`, f.intendedUse);
  if (f.activeAt !== null) add((n) => `revoked_at IS NULL AND (expires_at IS NULL OR expires_at > $${n})`, f.activeAt);
  return { where, params };
}

/** One keyset page of keys; `ks` numbered after the conditions' parameters. */
export async function listKeyRows(db: Queryable, filter: Conditions, ks: KeysetSql): Promise<KeyRow[]> {
  return selectPage<KeyRow>(db, `SELECT ${KEY_COLUMNS} FROM api_keys`, filter, ks);
}

export async function lockKey(db: Queryable, id: string): Promise<KeyRow | undefined> {
  const { rows } = await db.query<KeyRow>(`SELECT ${KEY_COLUMNS} FROM api_keys WHERE id = $1 FOR UPDATE`, [id]);
  return rows[0];
}

/** name, permissions, restrict_destructive: null keeps the stored value. */
export async function updateKey(
  db: Queryable, id: string, change: { name: string | null; permissions: string[] | null; restrictDestructive: boolean | null }, now: Date,
): Promise<KeyRow> {
  const { rows } = await db.query<KeyRow>(
    `UPDATE api_keys SET name = COALESCE($2, name), permissions = COALESCE($3, permissions),
              restrict_destructive = COALESCE($4, restrict_destructive), updated_at = $5
        WHERE id = $1 RETURNING ${KEY_COLUMNS}`,
    [id, change.name, change.permissions, change.restrictDestructive, now],
  );
  return rows[0];
}

export async function updateKeySecret(db: Queryable, id: string, secretHash: string, secretHint: string, now: Date): Promise<KeyRow> {
  const { rows } = await db.query<KeyRow>(
    `UPDATE api_keys SET secret_hash = $2, secret_hint = $3, updated_at = $4 WHERE id = $1 RETURNING ${KEY_COLUMNS}`,
    [id, secretHash, secretHint, now],
  );
  return rows[0];
}

/** Revokes a key not revoked yet; the number of rows revoked (0 or 1). */
export async function updateKeyRevoked(db: Queryable, id: string, now: Date): Promise<number> {
  const { rowCount } = await db.query('UPDATE api_keys SET revoked_at = $2, updated_at = $2 WHERE id = $1 AND revoked_at IS NULL', [id, now]);
  return rowCount;
}
