import type { Ctx } from '../../context.js';
import { hasPermission, inTx } from '../../context.js';
import { lockOrganization } from '../../access/locks.js';
import { ApiError } from '../../errors.js';
import { newId } from '../../ids.js';
import { recordAudit } from '../../audit/record.js';
import { requireSlidingQuota } from '../../http/counters.js';
import { keyset, toPage } from '../../http/pagination.js';
import { memberEvent } from './events.js';
import { findMember, findOrg, ORG_COLUMNS, toOrganization, type MemberRow, type OrgRow } from './store.js';
import { ORG_READ_ONLY, type OrgListQuery, type Organization, type PatchOrgBody } from './schemas.js';
import { assertNoReadOnlyFields } from '../../http/patch.js';
import type { Tx } from '../../db/types.js';

export const ORG_CREATION_PER_DAY = 10;

export interface OrgAccess {
  org: OrgRow;
  /** Platform organizations.manage. */
  manage: boolean;
  /** The caller's own membership, if any. */
  membership: MemberRow | null;
  admin: boolean;
}

export const platformOrgManage = (ctx: Ctx) =>
  hasPermission(ctx.actor, 'organizations.manage') && !(ctx.actor.type === 'api_key' && ctx.actor.scope !== 'platform');

/** An Organization the caller may see: active members and organizations.manage; everyone else (pending invitees too) 404. */
export async function orgAccess(ctx: Ctx, id: string): Promise<OrgAccess> {
  const org = await findOrg(ctx.db, id);
  const manage = platformOrgManage(ctx);
  const membership = org && ctx.actor.type === 'user' ? await findMember(ctx.db, id, ctx.actor.userId) : null;
  if (!org || (!manage && membership?.membership_status !== 'active')) throw new ApiError('organization_not_found');
  return { org, manage, membership, admin: membership?.membership_status === 'active' && membership.role === 'org_admin' };
}

/**
 * orgAccess for a write, in its transaction and after the Organization is locked: its status and the
 * caller's own membership are those the previous write left (src/access/locks.ts). Read before the
 * lock, a suspension or a demotion committed while the write waited did not apply to it: an invitation
 * or an acceptance went through into an Organization already suspended, and a just-demoted org admin
 * still invited and changed roles.
 */
export async function lockedOrgAccess(ctx: Ctx, tx: Tx, id: string): Promise<OrgAccess> {
  await lockOrganization(tx, id);
  return orgAccess(inTx(ctx, tx), id);
}

/** Member, entitlement and SSO writes under a suspended Organization: 403 organization_suspended. */
export function assertOrgActive(org: OrgRow): void {
  if (org.status === 'suspended') throw new ApiError('organization_suspended');
}

/** GET /v1/organizations: own Organizations (active and pending) with my_role; everything for organizations.manage. */
export async function listOrganizations(ctx: Ctx, q: OrgListQuery) {
  const manage = platformOrgManage(ctx);
  if (!manage && ctx.actor.type !== 'user') throw new ApiError('forbidden', { details: { required_permission: 'organizations.manage' } });
  const params: unknown[] = [];
  const where: string[] = [];
  let mine = '';
  if (!manage && ctx.actor.type === 'user') {
    params.push(ctx.actor.userId);
    mine = `, my.role AS my_role, my.membership_status AS my_membership_status`;
    where.push(`my.user_id IS NOT NULL`);
  }
  if (q.status) where.push(`o.status = $${params.push(q.status)}`);
  if (q.q) where.push(`lower(o.name) ^@ lower($${params.push(q.q)})`);
  const ks = keyset(q, params.length + 1, 'o');
  const join = mine ? `LEFT JOIN organization_members my ON my.organization_id = o.id AND my.user_id = $1` : '';
  const { rows } = await ctx.db.query<OrgRow & { my_role?: string; my_membership_status?: string }>(
    `SELECT ${ORG_COLUMNS}${mine} FROM organizations o ${join} WHERE ${[...where, ks.condition].join(' AND ')} ${ks.orderLimit}`,
    [...params, ...ks.params],
  );
  return toPage(rows, ks.limit, (r) => ({ ...toOrganization(r), ...(mine ? { my_role: r.my_role ?? null, my_membership_status: r.my_membership_status ?? null } : {}) }));
}

/** POST /v1/organizations: an active user with a User token; the caller becomes the first org_admin. 10 per user per day. */
export async function createOrganization(ctx: Ctx, name: string): Promise<Organization> {
  if (ctx.actor.type !== 'user') throw new ApiError('user_token_required');
  const userId = ctx.actor.userId;
  return ctx.db.transaction(async (tx) => {
    // A rolling 24 hours (not the calendar day: 10 before midnight and 10 after would pass).
    await requireSlidingQuota(tx, `org-create:${userId}`, ORG_CREATION_PER_DAY, 86400, ctx.now, 'At most 10 organizations per user per day.');
    const id = newId('org');
    await tx.query(`INSERT INTO organizations (id, name, status, created_by, test_mode, created_at, updated_at) VALUES ($1, $2, 'active', $3, $4, $5, $5)`, [
      id, name, userId, ctx.mode === 'test', ctx.now,
    ]);
    await tx.query(
      `INSERT INTO organization_members (organization_id, user_id, role, membership_status, invited_at, joined_at) VALUES ($1, $2, 'org_admin', 'active', $3, $3)`,
      [id, userId, ctx.now],
    );
    const org = toOrganization((await findOrg(tx, id))!);
    const c = inTx(ctx, tx);
    await recordAudit(tx, c, { action: 'organization.created', target: { type: 'organization', id }, organizationId: id, after: org });
    // The creator's membership begins active: organization.member_added, like any other.
    await memberEvent(tx, c, 'organization.member_added', { organization_id: id, user_id: userId, role: 'org_admin' });
    return org;
  });
}

export async function getOrganization(ctx: Ctx, id: string): Promise<Organization> {
  return toOrganization((await orgAccess(ctx, id)).org);
}

/** PATCH /v1/organizations/{id}: org admin renames; organizations.manage renames, suspends and reactivates (reason audited). */
export async function patchOrganization(ctx: Ctx, id: string, body: PatchOrgBody): Promise<Organization> {
  // Locked before it is read: of two PATCHes at once the second starts from the first's result.
  return ctx.db.transaction(async (tx) => {
    await lockOrganization(tx, id);
    return patchLockedOrganization(inTx(ctx, tx), id, body);
  });
}

async function patchLockedOrganization(ctx: Ctx, id: string, body: PatchOrgBody): Promise<Organization> {
  const { org, manage, admin } = await orgAccess(ctx, id);
  if (!manage && !admin) throw new ApiError('forbidden');
  assertNoReadOnlyFields(body, ORG_READ_ONLY);
  if ((body.status !== undefined || body.reason !== undefined) && !manage) throw new ApiError('forbidden', { message: 'Only organizations.manage changes an Organization status.' });
  if (!manage) assertOrgActive(org);
  // A PATCH that changes neither name nor status writes nothing (a reason alone changes nothing).
  if ((body.name ?? org.name) === org.name && (body.status ?? org.status) === org.status) return toOrganization(org);
  return ctx.db.transaction(async (tx) => {
    await tx.query('UPDATE organizations SET name = $2, status = $3, updated_at = $4 WHERE id = $1', [id, body.name ?? org.name, body.status ?? org.status, ctx.now]);
    const after = toOrganization((await findOrg(tx, id))!);
    await recordAudit(tx, inTx(ctx, tx), {
      action: 'organization.updated',
      target: { type: 'organization', id },
      organizationId: id,
      before: toOrganization(org),
      after: { ...after, ...(body.reason ? { reason: body.reason } : {}) },
    });
    return after;
  });
}
