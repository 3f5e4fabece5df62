import type { Queryable } from '../../db/types.js';
import { MEMBER_DECISION_SQL } from '../../access/resolve.js';

/**
 * SQL condition: the user (column `col`, not of an alias `e` or `m`) has any access path to the
 * Application in parameter `$n`: a personal Entitlement in any status, or active membership of an
 * Organization holding a grant that includes the member (the resolver's member decision: a row that
 * excludes the member, by scope or seat limit, is never an access path).
 */
export const accessPathCondition = (col: string, n: number) =>
  `(EXISTS (SELECT 1 FROM entitlements ep WHERE ep.user_id = ${col} AND ep.application_id = $${n})
    OR EXISTS (SELECT 1 FROM entitlements e JOIN organization_members m ON m.organization_id = e.organization_id
                WHERE m.user_id = ${col} AND m.membership_status = 'active' AND e.application_id = $${n}
                  AND ${MEMBER_DECISION_SQL} = 'included'))`;

/** Whether the user has an access path (accessPathCondition) to the Application. */
export async function findAccessPath(db: Queryable, userId: string, applicationId: string): Promise<boolean> {
  const { rowCount } = await db.query(`SELECT 1 FROM users u WHERE u.id = $1 AND ${accessPathCondition('u.id', 2)}`, [userId, applicationId]);
  return rowCount > 0;
}

/** Whether the user holds the Role (any assignment of it). */
export async function holdsRole(db: Queryable, userId: string, roleId: string): Promise<boolean> {
  return (await db.query('SELECT 1 FROM role_assignments WHERE user_id = $1 AND role_id = $2', [userId, roleId])).rowCount > 0;
}

/** The platform permissions the user holds through their platform Roles, sorted. */
export async function platformPermissionsOf(db: Queryable, userId: string): Promise<string[]> {
  const { rows } = await db.query<{ p: string }>(
    `SELECT DISTINCT p FROM role_assignments ra JOIN roles r ON r.id = ra.role_id AND r.scope = 'platform'
       CROSS JOIN LATERAL unnest(r.permissions) AS p WHERE ra.user_id = $1 ORDER BY p`,
    [userId],
  );
  return rows.map((r) => r.p);
}
