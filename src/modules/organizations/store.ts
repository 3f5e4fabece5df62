import type { KeysetSql, Queryable } from '../../db/types.js';
import { selectPage } from '../../db/page.js';
import type { Member, OrgListQuery, Organization } from './schemas.js';

export interface OrgRow {
  id: string;
  name: string;
  status: 'active' | 'suspended';
  member_count: number;
  created_by: string;
  test_mode: boolean;
  created_at: Date;
  updated_at: Date;
}

// member_count leaves out soft-deleted users by probing the small index of deleted users, not by
// reading every member's user row (an Organization of 20k members took 57 ms).
export const ORG_COLUMNS = `o.id, o.name, o.status, o.created_by, o.test_mode, o.created_at, o.updated_at,
  (SELECT count(*)::int FROM organization_members mc
    WHERE mc.organization_id = o.id AND mc.membership_status = 'active'
      AND NOT EXISTS (SELECT 1 FROM users uc WHERE uc.id = mc.user_id AND uc.status = 'deleted')) AS member_count`;

export const toOrganization = (r: OrgRow): Organization => ({
  id: r.id,
  name: r.name,
  status: r.status,
  member_count: r.member_count,
  created_by: r.created_by,
  test_mode: r.test_mode,
  created_at: r.created_at.toISOString(),
  updated_at: r.updated_at.toISOString(),
});

export async function findOrg(db: Queryable, id: string): Promise<OrgRow | null> {
  const { rows } = await db.query<OrgRow>(`SELECT ${ORG_COLUMNS} FROM organizations o WHERE o.id = $1`, [id]);
  return rows[0] ?? null;
}

export async function insertOrganization(db: Queryable, id: string, name: string, createdBy: string, testMode: boolean, now: Date): Promise<void> {
  await db.query(`INSERT INTO organizations (id, name, status, created_by, test_mode, created_at, updated_at) VALUES ($1, $2, 'active', $3, $4, $5, $5)`, [
    id, name, createdBy, testMode, now,
  ]);
}

export async function updateOrganization(db: Queryable, id: string, name: string, status: string, now: Date): Promise<void> {
  await db.query('UPDATE organizations SET name = $2, status = $3, updated_at = $4 WHERE id = $1', [id, name, status, now]);
}

/** An Organization listed, with the caller's own membership when the list is of their Organizations. */
export type OrgListRow = OrgRow & { my_role?: string; my_membership_status?: string };

/** The list's conditions and their parameters, before the keyset page's (numbered after them). */
export interface OrgListFilter {
  params: unknown[];
  where: string[];
  /** The caller's membership columns ('' when the list is not of their own Organizations). */
  mine: string;
}

/** Organizations `memberId` belongs to (active or pending) when given, else every one; then q's filters. */
export function orgListFilter(memberId: string | null, q: OrgListQuery): OrgListFilter {
  const params: unknown[] = [];
  const where: string[] = [];
  let mine = '';
  if (memberId !== null) {
    params.push(memberId);
    mine = `, my.role AS my_role, my.membership_status AS my_membership_status`;
    where.push(`my.user_id IS NOT NULL`);
  }
  if (q.status) where.push(`o.status = $${params.push(q.status)}`);
  if (q.q) where.push(`lower(o.name) ^@ lower($${params.push(q.q)})`);
  return { params, where, mine };
}

export async function listOrgRows(db: Queryable, { params, where, mine }: OrgListFilter, ks: KeysetSql): Promise<OrgListRow[]> {
  const join = mine ? `LEFT JOIN organization_members my ON my.organization_id = o.id AND my.user_id = $1` : '';
  return selectPage<OrgListRow>(db, `SELECT ${ORG_COLUMNS}${mine} FROM organizations o ${join}`, { where, params }, ks);
}

export interface MemberRow {
  organization_id: string;
  user_id: string;
  email: string;
  display_name: string;
  membership_status: 'pending' | 'active';
  role: 'org_admin' | 'member';
  invited_at: Date;
  joined_at: Date | null;
  created_at: Date;
  id: string;
  user_deleted: boolean;
}

/**
 * Members with the keyset columns the list pages on (invited_at, user_id). A pending member's email
 * is shown in lower case: an invitation to an address with an account and one without answer alike
 * (Part B: "the response has the same shape either way so addresses cannot be probed"), and the
 * stored spelling of an existing account would tell them apart.
 */
export const MEMBER_COLUMNS = `m.organization_id, m.user_id,
  CASE WHEN m.membership_status = 'pending' THEN lower(u.email) ELSE u.email END AS email, p.display_name, m.membership_status, m.role, m.invited_at, m.joined_at,
  m.invited_at AS created_at, m.user_id AS id, u.status = 'deleted' AS user_deleted`;
export const MEMBER_FROM = `organization_members m JOIN users u ON u.id = m.user_id JOIN profiles p ON p.user_id = m.user_id`;

export const toMember = (r: MemberRow): Member => ({
  user_id: r.user_id,
  email: r.email,
  display_name: r.membership_status === 'active' ? r.display_name : null,
  membership_status: r.membership_status,
  role: r.role,
  invited_at: r.invited_at.toISOString(),
  joined_at: r.joined_at?.toISOString() ?? null,
});

export async function findMember(db: Queryable, orgId: string, userId: string): Promise<MemberRow | null> {
  const { rows } = await db.query<MemberRow>(`SELECT ${MEMBER_COLUMNS} FROM ${MEMBER_FROM} WHERE m.organization_id = $1 AND m.user_id = $2`, [orgId, userId]);
  return rows[0] ?? null;
}

/**
 * Whether `userId` is the Organization's last active org_admin: the only one left among active,
 * not deleted members. A soft-deleted admin is never the last one (they no longer count).
 */
export async function isLastActiveAdmin(db: Queryable, orgId: string, userId: string): Promise<boolean> {
  const { rows } = await db.query<{ user_id: string }>(
    `SELECT m.user_id FROM organization_members m JOIN users u ON u.id = m.user_id AND u.status <> 'deleted'
      WHERE m.organization_id = $1 AND m.role = 'org_admin' AND m.membership_status = 'active' LIMIT 2`,
    [orgId],
  );
  return rows.length === 1 && rows[0].user_id === userId;
}
