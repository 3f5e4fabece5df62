import type { Queryable } from '../../db/types.js';
import { includedMemberAmongSql, memberDecisionAmongSql } from '../../access/resolve.js';

/** The live organization-wide grants to the Applications `applications` (an SQL condition on `a`). */
const liveOrgGrants = (applications: string) => `(SELECT e.id, e.member_overrides FROM entitlements e JOIN applications a ON a.id = e.application_id
   WHERE ${applications} AND e.organization_id IS NOT NULL AND e.status = 'active' AND (e.ends_at IS NULL OR e.ends_at > $2))`;

/**
 * Seats of a Tenant: distinct users reached by a live grant (status active, scheduled included: the seat is reserved when the grant is made; not ended) to any
 * of its Applications — personal rows, and members an organization-wide grant includes (a member
 * marked seat_limit is not a seat), decided set-wise (one hash of the grants' member_overrides).
 */
const seatHoldersOf = (applications: string) => `
  SELECT e.user_id FROM entitlements e JOIN applications a ON a.id = e.application_id
   WHERE ${applications} AND e.user_id IS NOT NULL AND e.status = 'active' AND (e.ends_at IS NULL OR e.ends_at > $2)
  UNION
  SELECT m.user_id FROM entitlements e JOIN applications a ON a.id = e.application_id
    JOIN organization_members m ON m.organization_id = e.organization_id
   WHERE ${applications} AND e.organization_id IS NOT NULL AND e.status = 'active' AND (e.ends_at IS NULL OR e.ends_at > $2)
     AND ${includedMemberAmongSql(liveOrgGrants(applications))}`;
export const SEAT_HOLDERS_SQL = seatHoldersOf('a.tenant_id = $1');

export async function countSeats(db: Queryable, tenantId: string, now: Date): Promise<number> {
  const { rows } = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM (${SEAT_HOLDERS_SQL}) s`, [tenantId, now]);
  return rows[0].n;
}

/** The seats the Tenant would hold with the grants of Application `applicationId` (of another Tenant) counted in. */
export async function countSeatsWithApplication(db: Queryable, tenantId: string, applicationId: string, now: Date): Promise<number> {
  const { rows } = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM (${seatHoldersOf('(a.tenant_id = $1 OR a.id = $3)')}) s`, [tenantId, now, applicationId]);
  return rows[0].n;
}

/** The seat holders of the Tenant among `userIds` (no statement for none). */
export async function findSeatHolders(db: Queryable, tenantId: string, userIds: string[], now: Date): Promise<Set<string>> {
  if (userIds.length === 0) return new Set();
  const { rows } = await db.query<{ user_id: string }>(`SELECT s.user_id FROM (${SEAT_HOLDERS_SQL}) s WHERE s.user_id = ANY($3::text[])`, [tenantId, now, userIds]);
  return new Set(rows.map((r) => r.user_id));
}

/** The Applications of an Organization's live (active or disabled) grants. */
export async function listOrgGrantApplications(db: Queryable, orgId: string): Promise<string[]> {
  const { rows } = await db.query<{ application_id: string }>(
    `SELECT DISTINCT e.application_id FROM entitlements e WHERE e.organization_id = $1 AND e.status IN ('active', 'disabled')`,
    [orgId],
  );
  return rows.map((r) => r.application_id);
}

/** Marks `userIds` seat_limit on every live org grant of the Tenant that reaches them as active members. */
export async function insertSeatLimits(db: Queryable, tenantId: string, userIds: string[], now: Date): Promise<void> {
  await db.query(
    `INSERT INTO org_seat_limits (entitlement_id, user_id, created_at)
       SELECT e.id, m.user_id, $3 FROM entitlements e JOIN applications a ON a.id = e.application_id
         JOIN organization_members m ON m.organization_id = e.organization_id AND m.membership_status = 'active'
        WHERE a.tenant_id = $1 AND m.user_id = ANY($2::text[]) AND e.organization_id IS NOT NULL AND e.status IN ('active', 'disabled')
       ON CONFLICT DO NOTHING`,
    [tenantId, userIds, now],
  );
}

/** The users marked seat_limit on the Tenant's grants, oldest mark first, each with whether a marked grant is test-mode. */
export async function listSeatLimitMarks(db: Queryable, tenantId: string): Promise<{ user_id: string; test_mode: boolean }[]> {
  return (await db.query<{ user_id: string; test_mode: boolean }>(
    `SELECT l.user_id, bool_or(e.test_mode) AS test_mode FROM org_seat_limits l JOIN entitlements e ON e.id = l.entitlement_id JOIN applications a ON a.id = e.application_id
      WHERE a.tenant_id = $1 GROUP BY l.user_id ORDER BY min(l.created_at), l.user_id`,
    [tenantId],
  )).rows;
}

/**
 * The marked users among `userIds` whom releasing their marks would make seats, with the Applications
 * of those grants: a marked grant that is live and whose scope includes them (decided set-wise).
 */
export async function listSeatedByRelease(db: Queryable, tenantId: string, userIds: string[], now: Date): Promise<Map<string, string[]>> {
  const { rows } = await db.query<{ user_id: string; application_id: string }>(
    `SELECT DISTINCT l.user_id, e.application_id FROM org_seat_limits l JOIN entitlements e ON e.id = l.entitlement_id JOIN applications a ON a.id = e.application_id
       JOIN organization_members m ON m.organization_id = e.organization_id AND m.user_id = l.user_id AND m.membership_status = 'active'
      WHERE a.tenant_id = $1 AND l.user_id = ANY($3::text[]) AND e.status = 'active' AND (e.ends_at IS NULL OR e.ends_at > $2)
        AND ${memberDecisionAmongSql(liveOrgGrants('a.tenant_id = $1'))} <> 'excluded'`,
    [tenantId, now, userIds],
  );
  const out = new Map<string, string[]>();
  for (const r of rows) out.set(r.user_id, [...(out.get(r.user_id) ?? []), r.application_id]);
  return out;
}

const DELETE_MARKS_SQL = `DELETE FROM org_seat_limits l USING entitlements e, applications a
  WHERE e.id = l.entitlement_id AND a.id = e.application_id AND a.tenant_id = $1 AND l.user_id = ANY($2::text[])`;

/** Removes the seat_limit marks of `userIds` on the Tenant's grants; the number removed. */
export async function deleteSeatLimits(db: Queryable, tenantId: string, userIds: string[]): Promise<number> {
  const { rowCount } = await db.query(DELETE_MARKS_SQL, [tenantId, userIds]);
  return rowCount;
}
