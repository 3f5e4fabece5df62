import type { Ctx } from '../../context.js';
import { inTx } from '../../context.js';
import type { Tx } from '../../db/types.js';
import { ApiError, invalidField } from '../../errors.js';
import { recordAudit } from '../../audit/record.js';
import { pathApplicationIds } from '../../outbox/emit.js';
import { memberEvent } from './events.js';
import { withAccessFlips } from '../../access/flips.js';
import { lockOrganization } from '../../access/locks.js';
import { lockOrgGrantTenants, releaseSeatLimits, withSeatCap } from '../tenancy/seats.js';
import { keyset, toPage } from '../../http/pagination.js';
import { issueOneTimeToken, ORG_INVITATION_LIFETIME_SECONDS, voidOrganizationInvitation } from '../../auth/one-time-tokens.js';
import { enqueueMail } from '../../mail/outbox.js';
import { requireSlidingQuota } from '../../http/counters.js';
import { RESEND_LIMIT_PER_HOUR } from '../users/invitations.js';
import { findOrCreateInvitedUser, resolveUserId } from '../users/service.js';
import { findLiveUser } from '../users/store.js';
import { isLastActiveAdmin, findMember, findOrg, toMember, type OrgRow } from './store.js';
import {
  deleteMember, deleteMemberSeatLimits, insertActiveMember, insertPendingMember, listMemberRows, memberListFilter, updateMemberActive, updateMemberRole,
} from './members-store.js';
import { lockGrantsNamingMember, updateOverridesWithoutMember } from './grants-store.js';
import { assertOrgActive, lockedOrgAccess, orgAccess } from './service.js';
import { MEMBER_READ_ONLY, type AddMemberBody, type Member, type MemberListQuery, type PatchMemberBody } from './schemas.js';
import { assertNoReadOnlyFields } from '../../http/patch.js';
import type { EntitlementRow } from '../entitlements/store.js';
import { announceScopeChanges } from '../entitlements/grant.js';

/** GET /v1/organizations/{id}/members: active members and organizations.manage. */
export async function listMembers(ctx: Ctx, orgId: string, q: MemberListQuery) {
  await orgAccess(ctx, orgId);
  const filter = memberListFilter(orgId, q);
  const ks = keyset(q, filter.params.length + 1);
  const rows = await listMemberRows(ctx.db, filter, ks);
  return toPage(rows, ks.limit, toMember);
}

/** Membership becomes active: the user's access flips on for each grant that now reaches them. */
async function activate(tx: Tx, ctx: Ctx, org: OrgRow, userId: string, role: string, existing: boolean): Promise<void> {
  // The Tenants before the user (src/access/locks.ts).
  const tenants = await lockOrgGrantTenants(tx, org.id);
  await withAccessFlips(tx, ctx, { userIds: [userId] }, 'org_member_added', () => withSeatCap(tx, ctx, tenants, [userId], async () => {
    if (existing) {
      await updateMemberActive(tx, org.id, userId, ctx.now);
    } else {
      // The user read again under their lock (withAccessFlips): a soft delete or the test purge that held
      // it has committed by now (read before it, the member would be a deleted user, or none: a
      // foreign-key violation, 500).
      if (!(await findLiveUser(tx, userId))) throw new ApiError('user_not_found');
      await insertActiveMember(tx, org.id, userId, role, ctx.now);
    }
  }, { holdRestricted: true }));
  await memberEvent(tx, ctx, 'organization.member_added', { organization_id: org.id, user_id: userId, role });
}

/**
 * POST /v1/organizations/{id}/members: by email (org admin or organizations.manage) a pending
 * membership and an invitation mail, creating an invited User when no live user has the address;
 * by user_id (organizations.manage only) an active membership at once. Same response shape either way.
 */
export async function addMember(ctx: Ctx, orgId: string, body: AddMemberBody): Promise<Member> {
  return ctx.db.transaction(async (tx) => {
    const c = inTx(ctx, tx);
    // Membership writes of one Organization run one at a time (src/access/locks.ts): the status and
    // the caller's role are read once it is locked.
    const { org, manage, admin } = await lockedOrgAccess(ctx, tx, orgId);
    if (!manage && !admin) throw new ApiError('forbidden');
    if (!!body.user_id === !!body.email) throw invalidField('email', 'send exactly one of user_id or email');
    if (body.user_id && !manage) throw new ApiError('forbidden', { message: 'Adding by user_id needs organizations.manage.' });
    assertOrgActive(org);
    const role = body.role ?? 'member';
    if (body.user_id) {
      const user = await findLiveUser(tx, body.user_id);
      if (!user) throw new ApiError('user_not_found');
      if (await findMember(tx, org.id, user.id)) throw new ApiError('already_member');
      await activate(tx, c, org, user.id, role, false);
      return toMember((await findMember(tx, org.id, user.id))!);
    }
    // Another Organization may be inviting the same new address at this moment: both get one User.
    const user = await findOrCreateInvitedUser(tx, c, body.email!);
    if (await findMember(tx, org.id, user.id)) throw new ApiError('already_member');
    await takeOrgInvitationQuota(tx, c, org.id, user.email);
    if (!manage) await takeInviterQuota(tx, c);
    await insertPendingMember(tx, org.id, user.id, role, ctx.now);
    // An invited User's way in: this Organization's link, valid until they accept any invitation.
    const token = user.status === 'invited'
      ? await issueOneTimeToken(tx, c, { kind: 'invitation', userId: user.id, data: { organization_id: org.id }, replacePrevious: true, lifetimeSeconds: ORG_INVITATION_LIFETIME_SECONDS })
      : null;
    await enqueueMail(tx, c, { template: 'organization_invitation', to: user.email, vars: { organizationName: org.name, token }, userId: user.id });
    await recordAudit(tx, c, { action: 'organization.member_invited', target: { type: 'organization', id: org.id }, organizationId: org.id, targetUserId: user.id, after: { user_id: user.id, role } });
    return toMember((await findMember(tx, org.id, user.id))!);
  });
}

/**
 * Each invitation by email mails the address, and a pending one can be withdrawn (DELETE) and sent
 * again at will, so none of its mails is a once-only first: an Organization mails one address at most
 * 3 times per rolling hour (the re-send limit of Part A), the first invitation included. Beyond it the
 * invitation answers 429 rate_limited with Retry-After and changes nothing (the throw rolls the
 * transaction back, the invited User it may have created included). Counted per Organization, so one
 * Organization's invitations never hold up another's, and the answer tells its admins only about
 * their own invitations.
 */
async function takeOrgInvitationQuota(tx: Tx, ctx: Ctx, orgId: string, email: string): Promise<void> {
  await requireSlidingQuota(tx, `mail:org-invitation:${ctx.mode}:${orgId}:${email.toLowerCase()}`, RESEND_LIMIT_PER_HOUR, 3600, ctx.now,
    `At most ${RESEND_LIMIT_PER_HOUR} invitations of one address per organization per hour.`);
}

/** Invitations by email an org admin may send in any rolling 24 hours, across all their Organizations. */
export const INVITATIONS_PER_INVITER_PER_DAY = 100;

/**
 * The per-address limit above leaves the number of addresses open: any signed-in user can create an
 * Organization and, as its org admin, mail an invitation naming it (a name of their choosing) to
 * every address they list, each also creating an `invited` User. An org admin therefore sends at most
 * 100 invitations by email in any rolling 24 hours, counted per inviting user across their
 * Organizations (Organizations are cheap to create: counted per Organization, ten a day would multiply
 * it). Beyond it 429 rate_limited with Retry-After, nothing added or mailed (the throw rolls the
 * count back too). organizations.manage is not counted: platform operators onboard at scale.
 */
async function takeInviterQuota(tx: Tx, ctx: Ctx): Promise<void> {
  if (ctx.actor.type !== 'user') return;
  await requireSlidingQuota(tx, `org-invitations-by:${ctx.actor.userId}`, INVITATIONS_PER_INVITER_PER_DAY, 86400, ctx.now,
    `At most ${INVITATIONS_PER_INVITER_PER_DAY} invitations by email per org admin per day.`);
}

/** POST /v1/organizations/{id}/members/me/accept: pending → active; an active one is returned unchanged. */
export async function acceptMembership(ctx: Ctx, orgId: string): Promise<Member> {
  if (ctx.actor.type !== 'user') throw new ApiError('user_token_required');
  const userId = ctx.actor.userId;
  return ctx.db.transaction(async (tx) => {
    // Locked before it is read: a suspension committed meanwhile is seen (no member joins it).
    await lockOrganization(tx, orgId);
    const org = await findOrg(tx, orgId);
    const member = org ? await findMember(tx, orgId, userId) : null;
    if (!org || !member) throw new ApiError('member_not_found');
    if (member.membership_status === 'active') return toMember(member);
    assertOrgActive(org);
    await activate(tx, inTx(ctx, tx), org, userId, member.role, true);
    return toMember((await findMember(tx, orgId, userId))!);
  });
}

/** PATCH /v1/organizations/{id}/members/{userId}: role changes, pending members too; never the last org_admin. */
export async function changeMemberRole(ctx: Ctx, orgId: string, userParam: string, body: PatchMemberBody): Promise<Member> {
  const { role } = body;
  return ctx.db.transaction(async (tx) => {
    const { org, manage, admin } = await lockedOrgAccess(ctx, tx, orgId);
    if (!manage && !admin) throw new ApiError('forbidden');
    assertNoReadOnlyFields(body, MEMBER_READ_ONLY);
    assertOrgActive(org);
    const userId = resolveUserId(ctx, userParam);
    const member = await findMember(tx, orgId, userId);
    if (!member) throw new ApiError('member_not_found');
    if (member.role === role) return toMember(member);
    if (member.role === 'org_admin' && member.membership_status === 'active' && (await isLastActiveAdmin(tx, orgId, userId))) throw new ApiError('last_org_admin');
    await updateMemberRole(tx, orgId, userId, role);
    await recordAudit(tx, inTx(ctx, tx), {
      action: 'organization.member_role_changed',
      target: { type: 'organization', id: orgId },
      organizationId: orgId,
      targetUserId: userId,
      before: { role: member.role },
      after: { role },
    });
    return toMember((await findMember(tx, orgId, userId))!);
  });
}

/**
 * DELETE /v1/organizations/{id}/members/{userId}: remove, withdraw, leave or decline. The user
 * loses every org_seat path (access.revoked only where it was the last one) and leaves the grants'
 * member_overrides; app Role assignments stay.
 */
export async function removeMember(ctx: Ctx, orgId: string, userParam: string): Promise<void> {
  const userId = resolveUserId(ctx, userParam);
  const self = ctx.actor.type === 'user' && ctx.actor.userId === userId;
  await ctx.db.transaction(async (tx) => {
    const c = inTx(ctx, tx);
    // Locked before it is read: a suspension committed meanwhile is seen.
    await lockOrganization(tx, orgId);
    const org = await findOrg(tx, orgId);
    const member = org ? await findMember(tx, orgId, userId) : null;
    if (!self) {
      const access = await orgAccess(c, orgId);
      if (!access.manage && !access.admin) throw new ApiError('forbidden');
    } else if (!org) throw new ApiError('member_not_found');
    if (!member) throw new ApiError('member_not_found');
    // Every member write under a suspended Organization is refused, leaving and declining included.
    assertOrgActive(org!);
    if (member.role === 'org_admin' && member.membership_status === 'active' && (await isLastActiveAdmin(tx, orgId, userId))) throw new ApiError('last_org_admin');
    const active = member.membership_status === 'active';
    // member_removed reaches the Applications the membership was a path to, gone once it is removed.
    const former = active ? await pathApplicationIds(tx, userId) : [];
    // The seats it frees are given back: the Tenants are locked first, then the grants whose
    // member_overrides name the user (the removal changes them: entitlement.member_scope_changed),
    // then the user (src/access/locks.ts).
    const tenants = active ? await lockOrgGrantTenants(tx, orgId) : [];
    const named = await lockGrantsNamingMember(tx, orgId, userId);
    const scoped: { before: EntitlementRow; after: EntitlementRow }[] = [];
    const change = async () => {
      await deleteMember(tx, orgId, userId);
      const after = await updateOverridesWithoutMember(tx, orgId, userId, ctx.now);
      for (const row of named) scoped.push({ before: row, after: after.find((r) => r.id === row.id)! });
      await deleteMemberSeatLimits(tx, orgId, userId);
    };
    if (active) {
      // Within the removal's flips (releaseSeatLimits): a member who takes back, through another
      // Organization's marked grant, the seat this membership held never lost access.
      await withAccessFlips(tx, c, { userIds: [userId] }, 'org_member_removed', async () => {
        await change();
        for (const tenantId of tenants) await releaseSeatLimits(tx, c, tenantId);
      });
    } else {
      await change();
      // A withdrawn (or declined) invitation's link opens no account any more.
      await voidOrganizationInvitation(tx, userId, orgId, ctx.now);
    }
    await memberEvent(tx, c, 'organization.member_removed', member, active, former);
    await announceScopeChanges(tx, c, scoped);
  });
}
