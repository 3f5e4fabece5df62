import type { Queryable } from '../../db/types.js';

// The Roles of an Application's available_app_roles (role_<slug>_<name>, scoped to the Application).
// A PATCH removing a name locks, counts and deletes its Role with src/modules/roles/store.ts's statements.

/** Seeds the empty Role `id` named `name` of Application `scope`; returns rowCount (0: it existed). */
export async function insertAppRole(db: Queryable, id: string, name: string, scope: string, now: Date): Promise<number> {
  const { rowCount } = await db.query(
    `INSERT INTO roles (id, name, scope, description, permissions, seed, created_at, updated_at)
     VALUES ($1, $2, $3, NULL, '{}', false, $4, $4) ON CONFLICT DO NOTHING`,
    [id, name, scope, now],
  );
  return rowCount;
}

/** The ids of Application `appId`'s Roles that grant any of `permissions`, in id order. */
export async function listRolesUsingPermissions(db: Queryable, appId: string, permissions: string[]): Promise<string[]> {
  const { rows } = await db.query<{ id: string }>('SELECT id FROM roles WHERE scope = $1 AND permissions && $2::text[] ORDER BY id', [appId, permissions]);
  return rows.map((r) => r.id);
}
