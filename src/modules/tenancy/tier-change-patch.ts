import type { Ctx } from '../../context.js';
import { inTx } from '../../context.js';
import type { Tx } from '../../db/types.js';
import { assertNoReadOnlyFields } from '../../http/patch.js';
import { ApiError, invalidField } from '../../errors.js';
import { recordAudit } from '../../audit/record.js';
import { enqueueMail } from '../../mail/outbox.js';
import { tenantFor } from './service.js';
import { tenantOwnerEmails, type TenantRecord } from './store.js';
import { DEFAULT_REGION, TIER_CHANGE_READ_ONLY, type PatchTierChangeBody, type TierChangeRequest } from './schemas.js';
import { findTierChange, toTierChangeRequest, updateTenantPlacement, updateTierChange, type TierChangeRow } from './tier-change-store.js';

type Status = TierChangeRow['status'];

/** The tier-change request state table of Part B. Other moves: 409 invalid_request_transition. */
const MOVES: Record<Status, readonly Status[]> = {
  pending: ['scheduled', 'in_progress', 'cancelled'],
  scheduled: ['in_progress', 'cancelled'],
  in_progress: ['completed', 'cancelled'],
  completed: [],
  cancelled: [],
};

/**
 * PATCH /v1/tenants/{id}/tier-change-requests/{requestId} (tenants.manage): status moves with their
 * Tenant side effects, scheduled_for (to schedule, or to reschedule a scheduled request) and notes.
 */
export async function patchTierChange(ctx: Ctx, tenantId: string, id: string, body: PatchTierChangeBody): Promise<TierChangeRequest> {
  assertNoReadOnlyFields(body, TIER_CHANGE_READ_ONLY);
  return ctx.db.transaction(async (tx) => {
    const c = inTx(ctx, tx);
    const { tenant } = await tenantFor(c, tenantId, ['tenants.manage'], tx, true);
    const row = await findTierChange(tx, tenant.id, id, true);
    if (!row) throw new ApiError('tier_change_request_not_found');

    const to = body.status ?? row.status;
    const moving = to !== row.status;
    if ((moving && !MOVES[row.status].includes(to)) || MOVES[row.status].length === 0) {
      throw new ApiError('invalid_request_transition', { details: { from: row.status, to } });
    }
    let scheduledFor = row.scheduled_for;
    if (body.scheduled_for !== undefined) {
      if (to !== 'scheduled') throw invalidField('scheduled_for', 'can only be set when scheduling (status scheduled)');
      scheduledFor = new Date(body.scheduled_for);
      if (scheduledFor.getTime() <= ctx.now.getTime()) throw invalidField('scheduled_for', 'must be in the future');
    } else if (moving && to === 'scheduled') {
      throw invalidField('scheduled_for', 'is required to schedule a request');
    }
    const notes = body.notes !== undefined ? body.notes : row.notes;
    if (moving && to === 'cancelled' && !notes?.trim()) throw invalidField('notes', 'is required to cancel a request');
    const rescheduled = scheduledFor?.getTime() !== row.scheduled_for?.getTime();
    if (!moving && !rescheduled && notes === row.notes) return toTierChangeRequest(row);

    const updated = await updateTierChange(
      tx,
      row.id,
      {
        status: to,
        scheduled_for: scheduledFor,
        notes,
        started_at: moving && to === 'in_progress' ? ctx.now : row.started_at,
        completed_at: moving && to === 'completed' ? ctx.now : row.completed_at,
      },
      ctx.now,
    );
    if (moving) await moveTenant(tx, c, tenant, row, to);
    if (to === 'scheduled' && rescheduled) await mailSchedule(tx, c, tenant, updated);
    const out = toTierChangeRequest(updated);
    await recordAudit(tx, c, {
      action: 'tenant.tier_change_request_updated',
      target: { type: 'tier_change_request', id: row.id },
      tenantId: tenant.id,
      organizationId: tenant.owner_organization_id,
      before: toTierChangeRequest(row),
      after: out,
    });
    return out;
  });
}

/** The Tenant side of a move: migrating while in progress; the new placement on completion; rollback on cancel. */
async function moveTenant(tx: Tx, ctx: Ctx, tenant: TenantRecord, row: TierChangeRow, to: Status): Promise<void> {
  const before = { tier: tenant.tier, region: tenant.region, status: tenant.status };
  let after: typeof before;
  if (to === 'in_progress') after = { ...before, status: 'migrating' };
  else if (to === 'completed') after = { tier: row.requested_tier, region: row.requested_region ?? DEFAULT_REGION, status: 'active' };
  else if (to === 'cancelled' && row.status === 'in_progress') after = { tier: row.from_tier, region: row.from_region, status: 'active' };
  else return;
  await updateTenantPlacement(tx, tenant.id, after, ctx.now);
  if (to === 'completed') {
    await recordAudit(tx, ctx, {
      action: 'tenant.tier_changed',
      target: { type: 'tenant', id: tenant.id },
      tenantId: tenant.id,
      organizationId: tenant.owner_organization_id,
      before: { tier: before.tier, region: before.region },
      after: { tier: after.tier, region: after.region, tier_change_request_id: row.id },
    });
  }
}

/** The owner (owner user, or every org_admin) is told the migration window. */
async function mailSchedule(tx: Tx, ctx: Ctx, tenant: TenantRecord, row: TierChangeRow): Promise<void> {
  for (const to of await tenantOwnerEmails(tx, tenant)) {
    await enqueueMail(tx, ctx, {
      template: 'tier_change_scheduled',
      to,
      vars: { tenantId: tenant.id, tier: row.requested_tier, region: row.requested_region ?? DEFAULT_REGION, scheduledFor: row.scheduled_for!.toISOString() },
    });
  }
}
