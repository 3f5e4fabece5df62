import type { KeysetSql, Queryable } from '../../db/types.js';
import { selectPage } from '../../db/page.js';
import type { MemberListQuery } from './schemas.js';
import { MEMBER_COLUMNS, MEMBER_FROM, type MemberRow } from './store.js';

/** The list's conditions (over the member columns) and their parameters, before the keyset page's. */
export interface MemberListFilter {
  params: unknown[];
  where: string[];
}

export function memberListFilter(orgId: string, q: MemberListQuery): MemberListFilter {
  const params: unknown[] = [orgId];
  const where = ['organization_id = $1'];
  // Soft-deleted users are left out unless include_inactive (Part A convention 12).
  if (!q.include_inactive) where.push('NOT user_deleted');
  if (q.role) where.push(`role = $${params.push(q.role)}`);
  if (q.membership_status) where.push(`membership_status = $${params.push(q.membership_status)}`);
  // The name is matched only where it is shown: a pending member's display_name is null until active.
  // `q`: a prefix of the lowered text, both sides lowered in SQL (JavaScript and PostgreSQL lower `İ`
  // and a word-final `Σ` differently), as the users and organizations searches do.
  if (q.q) where.push(`(lower(email) ^@ lower($${params.push(q.q)}) OR (membership_status = 'active' AND lower(display_name) ^@ lower($${params.length})))`);
  return { params, where };
}

export async function listMemberRows(db: Queryable, filter: MemberListFilter, ks: KeysetSql): Promise<MemberRow[]> {
  return selectPage<MemberRow>(db, `SELECT * FROM (SELECT ${MEMBER_COLUMNS} FROM ${MEMBER_FROM}) x`, filter, ks);
}

/** The Organization's creator: its first org_admin, active at once. */
export async function insertCreatorMember(db: Queryable, orgId: string, userId: string, now: Date): Promise<void> {
  await db.query(
    `INSERT INTO organization_members (organization_id, user_id, role, membership_status, invited_at, joined_at) VALUES ($1, $2, 'org_admin', 'active', $3, $3)`,
    [orgId, userId, now],
  );
}

export async function insertActiveMember(db: Queryable, orgId: string, userId: string, role: string, now: Date): Promise<void> {
  await db.query(
    `INSERT INTO organization_members (organization_id, user_id, role, membership_status, invited_at, joined_at) VALUES ($1, $2, $3, 'active', $4, $4)`,
    [orgId, userId, role, now],
  );
}

export async function insertPendingMember(db: Queryable, orgId: string, userId: string, role: string, now: Date): Promise<void> {
  await db.query(
    `INSERT INTO organization_members (organization_id, user_id, role, membership_status, invited_at) VALUES ($1, $2, $3, 'pending', $4)`,
    [orgId, userId, role, now],
  );
}

/** A pending membership accepted: active from `now`. */
export async function updateMemberActive(db: Queryable, orgId: string, userId: string, now: Date): Promise<void> {
  await db.query(`UPDATE organization_members SET membership_status = 'active', joined_at = $3 WHERE organization_id = $1 AND user_id = $2`, [orgId, userId, now]);
}

export async function updateMemberRole(db: Queryable, orgId: string, userId: string, role: string): Promise<void> {
  await db.query('UPDATE organization_members SET role = $3 WHERE organization_id = $1 AND user_id = $2', [orgId, userId, role]);
}

export async function deleteMember(db: Queryable, orgId: string, userId: string): Promise<void> {
  await db.query('DELETE FROM organization_members WHERE organization_id = $1 AND user_id = $2', [orgId, userId]);
}

/** The user ids of the Organization's active members (soft-deleted users included). */
export async function listActiveMemberIds(db: Queryable, orgId: string): Promise<string[]> {
  const { rows: members } = await db.query<{ user_id: string }>(
    `SELECT user_id FROM organization_members WHERE organization_id = $1 AND membership_status = 'active'`,
    [orgId],
  );
  return members.map((m) => m.user_id);
}

/** The user's seat_limit marks on the Organization's grants. */
export async function deleteMemberSeatLimits(db: Queryable, orgId: string, userId: string): Promise<void> {
  await db.query('DELETE FROM org_seat_limits WHERE user_id = $2 AND entitlement_id IN (SELECT id FROM entitlements WHERE organization_id = $1)', [orgId, userId]);
}
