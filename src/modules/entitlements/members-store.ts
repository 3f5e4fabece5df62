import type { Queryable } from '../../db/types.js';

/** The active members of an Organization (the users an org-wide row reaches). */
export async function listActiveMembers(db: Queryable, organizationId: string | null): Promise<{ user_id: string }[]> {
  const { rows } = await db.query<{ user_id: string }>(
    `SELECT user_id FROM organization_members WHERE organization_id = $1 AND membership_status = 'active'`,
    [organizationId],
  );
  return rows;
}

/** Those of `userIds` who are active members of the Organization. */
export async function listActiveMembersAmong(db: Queryable, organizationId: string, userIds: string[]): Promise<{ user_id: string }[]> {
  const { rows } = await db.query<{ user_id: string }>(
    `SELECT user_id FROM organization_members WHERE organization_id = $1 AND membership_status = 'active' AND user_id = ANY($2::text[])`,
    [organizationId, userIds],
  );
  return rows;
}

/** A user's active membership of an Organization (its role), or null. */
export async function findActiveMembership(db: Queryable, organizationId: string, userId: string): Promise<{ role: string } | null> {
  const { rows } = await db.query<{ role: string }>(
    `SELECT role FROM organization_members WHERE organization_id = $1 AND user_id = $2 AND membership_status = 'active'`,
    [organizationId, userId],
  );
  return rows[0] ?? null;
}

/** An Organization's status, or null when it is gone. */
export async function findOrganizationStatus(db: Queryable, organizationId: string): Promise<{ status: string } | null> {
  const { rows } = await db.query<{ status: string }>('SELECT status FROM organizations WHERE id = $1', [organizationId]);
  return rows[0] ?? null;
}
