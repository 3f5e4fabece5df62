import type { Queryable } from '../../db/types.js';
import { accessPathSql } from '../../access/resolve.js';

/** Whether the user has an access path (accessPathSql) to the Application. */
export async function findAccessPath(db: Queryable, userId: string, applicationId: string): Promise<boolean> {
  const { rowCount } = await db.query(`SELECT 1 FROM users u WHERE u.id = $1 AND ${accessPathSql('u.id', '$2')}`, [userId, applicationId]);
  return rowCount > 0;
}

/** Whether the user holds the Role (any assignment of it). */
export async function holdsRole(db: Queryable, userId: string, roleId: string): Promise<boolean> {
  return (await db.query('SELECT 1 FROM role_assignments WHERE user_id = $1 AND role_id = $2', [userId, roleId])).rowCount > 0;
}

/**
 * Holds the user's platform Roles FOR SHARE, which a PATCH of a Role's permissions (FOR NO KEY UPDATE)
 * waits for and waits for: taken after the user (holdUser), whose lock covers the assignments.
 */
export async function holdPlatformRolesOf(db: Queryable, userId: string): Promise<void> {
  await db.query(
    `SELECT 1 FROM roles r WHERE r.scope = 'platform' AND r.id IN (SELECT role_id FROM role_assignments WHERE user_id = $1) ORDER BY r.id FOR SHARE OF r`,
    [userId],
  );
}

/**
 * What decides whether a caller may change the user's account, in one round trip: whether the user and
 * the caller (null: an API key) hold Role `superadmin`, and the platform permissions the user holds
 * through their platform Roles, sorted.
 */
export async function accountRights(db: Queryable, userId: string, callerId: string | null, superadmin: string): Promise<{ target_super: boolean; caller_super: boolean; permissions: string[] }> {
  const { rows } = await db.query<{ target_super: boolean; caller_super: boolean; permissions: string[] }>(
    `SELECT EXISTS (SELECT 1 FROM role_assignments WHERE user_id = $1 AND role_id = $3) AS target_super,
            EXISTS (SELECT 1 FROM role_assignments WHERE user_id = $2 AND role_id = $3) AS caller_super,
            ARRAY(SELECT DISTINCT p FROM role_assignments ra JOIN roles r ON r.id = ra.role_id AND r.scope = 'platform'
                    CROSS JOIN LATERAL unnest(r.permissions) AS p WHERE ra.user_id = $1 ORDER BY p) AS permissions`,
    [userId, callerId, superadmin],
  );
  return rows[0];
}
