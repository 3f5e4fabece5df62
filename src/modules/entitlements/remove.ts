import type { Ctx } from '../../context.js';
import { inTx } from '../../context.js';
import { ApiError } from '../../errors.js';
import { withAccessFlips } from '../../access/flips.js';
import { applicationTenant, releaseSeatLimits } from '../tenancy/seats.js';
import { visibleEntitlement } from './read.js';
import { affectedUsers, assertHoldingOrgActive, assertPreconditions } from './patch.js';
import { announceEntitlementDeleted } from './grant.js';
import { expireIfEnded } from './jobs.js';
import { deleteEntitlementRow } from './store.js';
import { assertAppTenantWritable } from '../tenancy/writable.js';
import { lockEntitlementScope } from '../../access/locks.js';
import { assertDestructiveAllowed } from '../../http/gate.js';

/** A hard delete is for grants made in error: refused once the row is older than this (docs/decisions.md). */
export const DELETE_WINDOW_SECONDS = 24 * 3600;

/**
 * DELETE /v1/entitlements/{id}: entitlements.manage (platform or the Application's own key); a
 * restricted key is refused (403) after the refusals that hold for every caller.
 */
export async function deleteEntitlement(ctx: Ctx, id: string, ifMatch?: string, ifNoneMatch?: string): Promise<void> {
  await ctx.db.transaction(async (tx) => {
    const c = inTx(ctx, tx);
    await lockEntitlementScope(tx, id);
    const visible = await visibleEntitlement(c, id, true);
    const { rights } = visible;
    let row = visible.row;
    await assertHoldingOrgActive(tx, row);
    if (!rights.platform && !rights.appKey) throw new ApiError('forbidden', { details: { required_permission: 'entitlements.manage' } });
    if (row.order_id !== null) throw new ApiError('entitlement_order_linked', { details: { order_id: row.order_id } });
    // The route defers the destructive gate to here (destructiveGate: 'service'): an order-linked row is
    // 409 for every caller, a restricted key included; any other row is refused to that key.
    assertDestructiveAllowed(ctx.actor);
    if (ctx.now.getTime() - row.created_at.getTime() > DELETE_WINDOW_SECONDS * 1000) {
      throw new ApiError('entitlement_too_old', { details: { max_age_seconds: DELETE_WINDOW_SECONDS } });
    }
    // Only a removal the caller may make waits for a migration (as a PATCH): anyone else is refused as
    // at any time, not told to retry (503 with Retry-After) a request that would be refused.
    await assertAppTenantWritable(tx, row.application_id);
    // RFC 9110 §13.1.1, §13.1.2: the row's ETag guards a removal as it guards a PATCH, judged once the
    // DELETE would otherwise succeed (§13.2.1: a refused request ignores its preconditions).
    assertPreconditions(row, ifMatch, ifNoneMatch);
    // A row whose ends_at passed is expired already (resolution says so before the sweep): the sweep's
    // work is done first, as a PATCH or a new grant does, so entitlement.expired is announced and
    // entitlement.deleted carries the row's last state, expired.
    row = await expireIfEnded(tx, ctx, row);
    const users = await affectedUsers(tx, row);
    const tenantId = await applicationTenant(tx, row.application_id);
    await withAccessFlips(tx, c, { userIds: users, applicationIds: [row.application_id] }, 'entitlement_deleted', async () => {
      await deleteEntitlementRow(tx, row.id);
      // Freed seats go back within the change (releaseSeatLimits): a holder who takes back their own seat never lost access.
      if (tenantId) await releaseSeatLimits(tx, c, tenantId);
    });
    await announceEntitlementDeleted(tx, c, row);
  });
}
