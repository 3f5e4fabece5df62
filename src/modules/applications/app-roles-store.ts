import type { Queryable } from '../../db/types.js';

// The Roles of an Application's available_app_roles (role_<slug>_<name>, scoped to the Application).
// The lock, holder count and delete repeat src/modules/roles/store.ts's byte for byte (DELETE /v1/roles/{id}).

/** The reader's mode, as row-level security reads it (an assignment carries its user's mode: migration 0031). */
const READER_MODE = `(current_setting('app.test_mode', true) = 'on')`;

/**
 * A Role's holders of both modes (`n`: held in either, it stays) and of the reader's (`visible`: the
 * count reported; the other mode's is not theirs to see), of Role $1.
 */
const ROLE_HOLDERS_SQL = `SELECT count(*)::int AS n, (count(*) FILTER (WHERE ra.test_mode = ${READER_MODE}))::int AS visible
  FROM role_assignments ra WHERE ra.role_id = $1`;

/** Seeds the empty Role `id` named `name` of Application `scope`; returns rowCount (0: it existed). */
export async function insertAppRole(db: Queryable, id: string, name: string, scope: string, now: Date): Promise<number> {
  const { rowCount } = await db.query(
    `INSERT INTO roles (id, name, scope, description, permissions, seed, created_at, updated_at)
     VALUES ($1, $2, $3, NULL, '{}', false, $4, $4) ON CONFLICT DO NOTHING`,
    [id, name, scope, now],
  );
  return rowCount;
}

export async function lockRole(db: Queryable, roleId: string): Promise<void> {
  await db.query('SELECT 1 FROM roles WHERE id = $1 FOR UPDATE', [roleId]);
}

export async function countRoleHolders(db: Queryable, roleId: string): Promise<{ n: number; visible: number }> {
  const { rows } = await db.query<{ n: number; visible: number }>(ROLE_HOLDERS_SQL, [roleId]);
  return rows[0];
}

export async function deleteRole(db: Queryable, roleId: string): Promise<void> {
  await db.query('DELETE FROM roles WHERE id = $1', [roleId]);
}

/** The ids of Application `appId`'s Roles that grant any of `permissions`, in id order. */
export async function listRolesUsingPermissions(db: Queryable, appId: string, permissions: string[]): Promise<string[]> {
  const { rows } = await db.query<{ id: string }>('SELECT id FROM roles WHERE scope = $1 AND permissions && $2::text[] ORDER BY id', [appId, permissions]);
  return rows.map((r) => r.id);
}
