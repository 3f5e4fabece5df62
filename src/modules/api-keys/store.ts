import type { Queryable } from '../../db/types.js';
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
