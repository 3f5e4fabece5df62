import type { Ctx } from '../../context.js';
import { hasPermission, inTx } from '../../context.js';
import { ApiError } from '../../errors.js';
import { newId } from '../../ids.js';
import { recordAudit } from '../../audit/record.js';
import { withAccessFlips } from '../../access/flips.js';
import { lockOrganization } from '../../access/locks.js';
import { findTenant } from '../tenancy/plans.js';
import { withoutNewSeatsIfRestricted, withSeatCap } from '../tenancy/seats.js';
import { emitEntitlementEvent, grantableApplication, grantTerm, lockGrantTenant } from '../entitlements/grant.js';
import { toEntitlement } from '../entitlements/store.js';
import type { Entitlement } from '../entitlements/schemas.js';
import { findMember, findOrg } from './store.js';
import { listActiveMemberIds } from './members-store.js';
import { insertOrgGrant, lockLiveOrgGrant } from './grants-store.js';
import { includedMemberCount } from '../entitlements/read.js';
import { expireIfEnded } from '../entitlements/jobs.js';
import { assertOrgActive } from './service.js';
import type { OrgGrantBody } from './schemas.js';
import { assertTenantWritable } from '../tenancy/writable.js';
import type { Tx } from '../../db/types.js';

/**
 * An org admin never grants to their own Organization, unless they hold platform entitlements.manage
 * (docs/decisions.md "Org admins and their own grants"). Read under the Organization's lock.
 */
async function assertNotOwnOrgAdmin(tx: Tx, ctx: Ctx, orgId: string): Promise<void> {
  const platform = hasPermission(ctx.actor, 'entitlements.manage') && !(ctx.actor.type === 'api_key' && ctx.actor.scope !== 'platform');
  if (platform || ctx.actor.type !== 'user') return;
  const member = await findMember(tx, orgId, ctx.actor.userId);
  if (member?.role === 'org_admin' && member.membership_status === 'active') {
    throw new ApiError('forbidden', { message: 'Org admins may scope and toggle their Organization grants, never create them.' });
  }
}

/**
 * POST /v1/organizations/{id}/entitlements: grants an Application to an Organization (source
 * org_seat). entitlements.manage (platform or the app's own key) or the Application's owner; an org
 * admin can never create the grant for their own Organization. One live grant per Organization and
 * Application. Each newly included member gets access.granted.
 */
export async function grantOrganization(ctx: Ctx, orgId: string, body: OrgGrantBody): Promise<Entitlement & { included_member_count: number }> {
  // Rights over the Application first: a caller without any learns nothing about the Organization.
  const found = await grantableApplication(ctx, body.application_id);
  if (!(await findOrg(ctx.db, orgId))) throw new ApiError('organization_not_found');
  const scope = body.member_scope ?? 'all_members';
  return ctx.db.transaction(async (tx) => {
    const c = inTx(ctx, tx);
    await lockOrganization(tx, orgId);
    // Read under the lock: a suspension, or the caller's promotion to org admin, committed while this
    // waited applies to it.
    const locked = await findOrg(tx, orgId);
    if (!locked) throw new ApiError('organization_not_found');
    await assertNotOwnOrgAdmin(tx, ctx, orgId);
    assertOrgActive(locked);
    const { startsAt, endsAt } = grantTerm(ctx, { ...body, source: 'org_seat' });
    // The Tenant whose seats the grant takes, before the live row and the members (src/access/locks.ts).
    const app = await lockGrantTenant(tx, ctx, found);
    await assertTenantWritable(tx, app.tenant_id);
    const memberIds = await listActiveMemberIds(tx, orgId);
    // A Set: overrides (up to 10,000) against every member, not one scan of the members per override.
    const members = new Set(memberIds);
    const strangers = (body.member_overrides ?? []).filter((u) => !members.has(u));
    if (strangers.length) throw new ApiError('member_override_not_a_member', { details: { user_ids: strangers } });
    // A live grant whose ends_at passed is expired first, as for personal grants: it does not block.
    const live = await lockLiveOrgGrant(tx, orgId, app.id);
    const existing = live && (await expireIfEnded(tx, c, live));
    if (existing && existing.status !== 'expired') throw new ApiError('entitlement_already_exists', { details: { existing_entitlement_id: existing.id, status: existing.status } });
    const tenant = (await findTenant(tx, app.tenant_id))!;
    // Only members the scope includes take seats: on a restricted Tenant a grant seating anyone new is 402.
    const row = await withAccessFlips(tx, c, { userIds: memberIds, applicationIds: [app.id] }, 'entitlement_granted', () => withoutNewSeatsIfRestricted(tx, tenant.id, memberIds, ctx.now, () => withSeatCap(tx, c, [tenant.id], memberIds, async () => insertOrgGrant(tx, {
      id: newId('ent'), orgId, applicationId: app.id, orderId: body.order_id ?? null, startsAt, endsAt, memberScope: scope,
      memberOverrides: body.member_overrides ?? [], testMode: ctx.mode === 'test', now: ctx.now, startNotifiedAt: startsAt <= ctx.now ? ctx.now : null,
    }))));
    const included = await includedMemberCount(tx, row.id);
    await recordAudit(tx, c, { action: 'entitlement.granted', target: { type: 'entitlement', id: row.id }, organizationId: orgId, applicationId: app.id, tenantId: app.tenant_id, after: toEntitlement(row) });
    await emitEntitlementEvent(tx, c, 'entitlement.granted', row);
    return { ...toEntitlement(row), included_member_count: included };
  });
}
