import type { Ctx } from '../../context.js';
import { hasPermission, inTx, rightMayHaveMoved } from '../../context.js';
import type { Tx } from '../../db/types.js';
import { ApiError, invalidField } from '../../errors.js';
import { newId } from '../../ids.js';
import { recordAudit } from '../../audit/record.js';
import { emit } from '../../outbox/emit.js';
import { withAccessFlips } from '../../access/flips.js';
import { lockApplicationTenants, lockTenantSeats, lockUsersForAccess } from '../../access/locks.js';
import { findLiveUser } from '../users/store.js';
import { resolveUserId } from '../users/service.js';
import { refusalFor, visibleApplication } from '../applications/service.js';
import { findApplicationRow, type ApplicationRow } from '../applications/store.js';
import { PLAN_LIMITS, assertWithinPlan, findTenant } from '../tenancy/plans.js';
import { countSeats, isSeat, releaseSeatLimits } from '../tenancy/seats.js';
import { findEntitlement, findLivePersonal, insertPersonalEntitlement, toEntitlement, type EntitlementRow } from './store.js';
import { expireIfEnded } from './jobs.js';
import { assertMayGrant, confinedApp, rightsOver } from './rights.js';
import type { Entitlement, GrantBody } from './schemas.js';
import { assertTenantWritable } from '../tenancy/writable.js';

/**
 * "At most 1 year ahead" (Part B) is a calendar year: the same instant of the same date a year later
 * (UTC), 366 days when a 29 February lies between, so a starts_at a client computes as "now plus one
 * year" is accepted. From 29 February the year ends on 1 March.
 */
export function latestStart(now: Date): Date {
  const latest = new Date(now);
  latest.setUTCFullYear(latest.getUTCFullYear() + 1);
  return latest;
}

/** Shared term rules of personal and organization grants. */
export function grantTerm(ctx: Ctx, body: { source?: string; starts_at?: string; ends_at?: string | null }): { startsAt: Date; endsAt: Date | null } {
  const startsAt = body.starts_at ? new Date(body.starts_at) : ctx.now;
  if (startsAt > latestStart(ctx.now)) throw invalidField('starts_at', 'must be at most 1 year ahead');
  const endsAt = body.ends_at ? new Date(body.ends_at) : null;
  if (body.source === 'trial' && !endsAt) throw new ApiError('ends_at_required');
  if (endsAt && endsAt <= startsAt) throw invalidField('ends_at', 'must be after starts_at');
  return { startsAt, endsAt };
}

/** The Application a grant targets: visible to the caller (404), approved (409), and the caller allowed to grant for it. */
export async function grantableApplication(ctx: Ctx, applicationId: string): Promise<ApplicationRow> {
  // Platform entitlements.manage grants on every Application, internal and invite_only ones included.
  const platform = hasPermission(ctx.actor, 'entitlements.manage') && !confinedApp(ctx);
  const app = platform ? await findApplicationRow(ctx.db, applicationId) : await visibleApplication(ctx, applicationId);
  if (!app) throw new ApiError('application_not_found');
  assertMayGrant(await rightsOver(ctx, app), app);
  if (app.review_status !== 'approved') throw new ApiError('application_not_available', { details: { review_status: app.review_status } });
  return app;
}

/** 409 entitlement_already_exists naming the live row (Part B: details.existing_entitlement_id and details.status). */
const alreadyExists = (row: Pick<EntitlementRow, 'id' | 'status'>) =>
  new ApiError('entitlement_already_exists', { details: { existing_entitlement_id: row.id, status: row.status } });

/** A new seat on the Tenant: 402 on a restricted Tenant, 409 at Starter's cap. */
export async function assertSeatAvailable(tx: Tx, ctx: Ctx, app: ApplicationRow, userIds: string[]): Promise<void> {
  // In the order of src/access/locks.ts: the Tenant (callers lock it first already), then the users
  // (withAccessFlips locks them again later).
  await lockTenantSeats(tx, [app.tenant_id]);
  // Seats freed by time and not given back yet go to the members marked seat_limit first (oldest mark
  // first, as seat-limit-release would give them), not to the new seat; a marked user granted here
  // keeps their place and takes it through this grant (reason entitlement_granted).
  await releaseSeatLimits(tx, inTx(ctx, tx), app.tenant_id, { seatedByChange: userIds });
  await lockUsersForAccess(tx, userIds);
  const tenant = (await findTenant(tx, app.tenant_id))!;
  // Only a cap or a restriction refuses a new seat: on a Team or Enterprise Tenant nothing is counted
  // (counting every seat read all its grants and members on each grant, under the seats lock).
  if (!tenant.restricted && (PLAN_LIMITS[tenant.plan]?.seats ?? null) === null) return;
  let added = 0;
  for (const userId of userIds) if (!(await isSeat(tx, tenant.id, userId, ctx.now))) added++;
  if (added === 0) return;
  assertWithinPlan(tenant, 'seats', (await countSeats(tx, tenant.id, ctx.now)) + added);
}

/**
 * The Application as a grant's transaction must see it: its Tenant read again under the Application's
 * lock, and that Tenant's seats locked (lockApplicationTenants). Read before the transaction, the
 * Tenant may be one an ownership move is taking it out of, whose cap is not the one the seat counts against.
 * The caller's right is read again under that lock too: an owner who lost the Application to a move
 * committed meanwhile gets what a stranger gets, and nothing is granted.
 */
export async function lockGrantTenant(tx: Tx, ctx: Ctx, app: ApplicationRow): Promise<ApplicationRow> {
  const [tenantId] = await lockApplicationTenants(tx, [app.id]);
  if (rightMayHaveMoved(ctx.actor, 'entitlements.manage')) {
    const c = inTx(ctx, tx);
    try {
      assertMayGrant(await rightsOver(c, app), app);
    } catch (err) {
      throw await refusalFor(c, app.id, err);
    }
  }
  return { ...app, tenant_id: tenantId ?? app.tenant_id };
}

export async function emitEntitlementEvent(tx: Tx, ctx: Ctx, type: string, row: EntitlementRow, extra: Record<string, unknown> = {}): Promise<void> {
  await emit(tx, ctx, { type, applicationId: row.application_id, data: { entitlement: toEntitlement(row), ...extra } });
}

/**
 * A hard delete of an Entitlement (Part B Resource events: `entitlement.deleted`, "hard-deleted", with
 * its last state): its audit row and webhook event, from DELETE /v1/entitlements/{id}, the erasure
 * cascade and the test-data purge alike.
 */
export async function announceEntitlementDeleted(tx: Tx, ctx: Ctx, row: EntitlementRow): Promise<void> {
  await recordAudit(tx, ctx, {
    action: 'entitlement.deleted', target: { type: 'entitlement', id: row.id }, targetUserId: row.user_id, organizationId: row.organization_id,
    applicationId: row.application_id, before: toEntitlement(row),
  });
  await emitEntitlementEvent(tx, ctx, 'entitlement.deleted', row);
}

/**
 * Org grants whose member_overrides lost a user (a member removed, an erasure, the test purge): each
 * change audited and announced as entitlement.member_scope_changed (Part B Resource events).
 */
export async function announceScopeChanges(tx: Tx, ctx: Ctx, changes: { before: EntitlementRow; after: EntitlementRow }[]): Promise<void> {
  for (const { before, after } of changes) {
    await recordAudit(tx, ctx, {
      action: 'entitlement.member_scope_changed',
      target: { type: 'entitlement', id: after.id },
      targetUserId: null,
      organizationId: after.organization_id,
      applicationId: after.application_id,
      before: toEntitlement(before),
      after: toEntitlement(after),
    });
    await emitEntitlementEvent(tx, ctx, 'entitlement.member_scope_changed', after);
  }
}

/** POST /v1/users/{id}/entitlements: one live personal row per user and Application. */
export async function grantPersonal(ctx: Ctx, idParam: string, body: GrantBody): Promise<Entitlement> {
  if (body.source === 'org_seat') throw new ApiError('invalid_source');
  const userId = resolveUserId(ctx, idParam);
  const found = await grantableApplication(ctx, body.application_id);
  const { startsAt, endsAt } = grantTerm(ctx, body);
  return ctx.db.transaction(async (tx) => {
    // The Tenant before the rows below it (src/access/locks.ts): an ended live row is expired next.
    const app = await lockGrantTenant(tx, ctx, found);
    await assertTenantWritable(tx, app.tenant_id);
    if (!(await findLiveUser(tx, userId))) throw new ApiError('user_not_found');
    // A live row whose ends_at passed is expired first: expired rows do not block a new grant.
    let existing = await findLivePersonal(tx, userId, app.id);
    if (existing?.ends_at && existing.ends_at <= ctx.now) {
      const locked = await findEntitlement(tx, existing.id, true);
      if (locked) await expireIfEnded(tx, ctx, locked);
      existing = await findLivePersonal(tx, userId, app.id);
    }
    if (existing) throw alreadyExists(existing);
    await assertSeatAvailable(tx, ctx, app, [userId]);
    // The user read again under their lock (taken just above): a soft delete or the test purge that
    // held it has committed by now (read before it, the grant would land on a deleted user, or on none:
    // a foreign-key violation, 500).
    if (!(await findLiveUser(tx, userId))) throw new ApiError('user_not_found');
    // Read again under the user's lock too: a concurrent grant that held it has committed its row by
    // now, and answers with its details, not through the unique index's bare 409.
    const winner = await findLivePersonal(tx, userId, app.id);
    if (winner) throw alreadyExists(winner);
    const c = inTx(ctx, tx);
    const row = await withAccessFlips(tx, c, { userIds: [userId], applicationIds: [app.id] }, 'entitlement_granted', () =>
      insertPersonalEntitlement(tx, {
        id: newId('ent'),
        userId,
        applicationId: app.id,
        source: body.source,
        orderId: body.order_id ?? null,
        startsAt,
        endsAt,
        testMode: ctx.mode === 'test',
        now: ctx.now,
        startNotifiedAt: startsAt <= ctx.now ? ctx.now : null,
      }),
    );
    await recordAudit(tx, c, { action: 'entitlement.granted', target: { type: 'entitlement', id: row.id }, targetUserId: userId, applicationId: app.id, tenantId: app.tenant_id, after: toEntitlement(row) });
    await emitEntitlementEvent(tx, c, 'entitlement.granted', row);
    return toEntitlement(row);
  });
}
