import type { Queryable } from '../../db/types.js';

/**
 * Seats of a Tenant: distinct users reached by a live grant (active or scheduled, not ended) to any
 * of its Applications — personal rows, and members included by organization-wide grants.
 */
export const SEAT_HOLDERS_SQL = `
  SELECT e.user_id FROM entitlements e JOIN applications a ON a.id = e.application_id
   WHERE a.tenant_id = $1 AND e.user_id IS NOT NULL AND e.status = 'active' AND (e.ends_at IS NULL OR e.ends_at > $2)
  UNION
  SELECT m.user_id FROM entitlements e JOIN applications a ON a.id = e.application_id
    JOIN organization_members m ON m.organization_id = e.organization_id AND m.membership_status = 'active'
   WHERE a.tenant_id = $1 AND e.organization_id IS NOT NULL AND e.status = 'active' AND (e.ends_at IS NULL OR e.ends_at > $2)
     AND (e.member_scope = 'all_members' OR e.member_scope IS NULL
          OR (e.member_scope = 'allowlist' AND m.user_id = ANY(e.member_overrides))
          OR (e.member_scope = 'denylist' AND NOT (m.user_id = ANY(COALESCE(e.member_overrides, '{}')))))`;

export async function countSeats(db: Queryable, tenantId: string, now: Date): Promise<number> {
  const { rows } = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM (${SEAT_HOLDERS_SQL}) s`, [tenantId, now]);
  return rows[0].n;
}

export async function isSeat(db: Queryable, tenantId: string, userId: string, now: Date): Promise<boolean> {
  const { rowCount } = await db.query(`SELECT 1 FROM (${SEAT_HOLDERS_SQL}) s WHERE s.user_id = $3`, [tenantId, now, userId]);
  return rowCount > 0;
}
