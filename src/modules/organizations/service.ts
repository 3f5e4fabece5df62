import type { Ctx } from '../../context.js';
import { hasPermission, inTx } from '../../context.js';
import { lockOrganization } from '../../access/locks.js';
import { ApiError } from '../../errors.js';
import { newId } from '../../ids.js';
import { recordAudit } from '../../audit/record.js';
import { requireSlidingQuota } from '../../http/counters.js';
import { keyset, toPage } from '../../http/pagination.js';
import { memberEvent } from './events.js';
import { findMember, findOrg, insertOrganization, listOrgRows, orgListFilter, toOrganization, updateOrganization, type MemberRow, type OrgRow } from './store.js';
import { insertCreatorMember } from './members-store.js';
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
  // A user without organizations.manage lists their own Organizations, each with their membership.
  const mine = !manage && ctx.actor.type === 'user' ? ctx.actor.userId : null;
  const filter = orgListFilter(mine, q);
  const ks = keyset(q, filter.params.length + 1, 'o');
  const rows = await listOrgRows(ctx.db, filter, ks);
  return toPage(rows, ks.limit, (r) => ({ ...toOrganization(r), ...(mine !== null ? { my_role: r.my_role ?? null, my_membership_status: r.my_membership_status ?? null } : {}) }));
}

/** POST /v1/organizations: an active user with a User token; the caller becomes the first org_admin. 10 per user per day. */
export async function createOrganization(ctx: Ctx, name: string): Promise<Organization> {
  if (ctx.actor.type !== 'user') throw new ApiError('user_token_required');
  const userId = ctx.actor.userId;
  return ctx.db.transaction(async (tx) => {
    // A rolling 24 hours (not the calendar day: 10 before midnight and 10 after would pass).
    await requireSlidingQuota(tx, `org-create:${userId}`, ORG_CREATION_PER_DAY, 86400, ctx.now, 'At most 10 organizations per user per day.');
    const id = newId('org');
    await insertOrganization(tx, id, name, userId, ctx.mode === 'test', ctx.now);
    await insertCreatorMember(tx, id, userId, ctx.now);
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
    await updateOrganization(tx, id, body.name ?? org.name, body.status ?? org.status, ctx.now);
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
