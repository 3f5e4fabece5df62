import type { Ctx } from '../../context.js';
import { inTx } from '../../context.js';
import { ApiError, invalidField } from '../../errors.js';
import { newId } from '../../ids.js';
import { recordAudit } from '../../audit/record.js';
import { keyset, toPage } from '../../http/pagination.js';
import { tenantFor } from './service.js';
import { DEFAULT_REGION, REGIONS, type CreateTierChangeBody, type TierChangeListQuery, type TierChangeRequest } from './schemas.js';
import { findOpenTierChange, findTierChange, insertTierChange, listTierChangeRows, tierChangeListWhere, toTierChangeRequest } from './tier-change-store.js';

/** The tier ladder: a request must move strictly up it (a new region within dedicated_region counts as up). */
const LADDER = { shared: 0, isolated: 1, dedicated_region: 2 } as const;

export const actorId = (ctx: Ctx): string | null => (ctx.actor.type === 'user' ? ctx.actor.userId : ctx.actor.type === 'api_key' ? ctx.actor.keyId : null);

/** requested_region: required (and on the allow-list) for dedicated_region, absent otherwise. */
function validateRegion(body: CreateTierChangeBody): string | null {
  const region = body.requested_region ?? null;
  if (body.requested_tier !== 'dedicated_region') {
    if (region !== null) throw invalidField('requested_region', `must not be set for ${body.requested_tier}; ${body.requested_tier} Tenants live in ${DEFAULT_REGION}`);
    return null;
  }
  if (region === null) throw invalidField('requested_region', 'is required for dedicated_region');
  if (!(REGIONS as readonly string[]).includes(region)) {
    throw new ApiError('unsupported_region', { details: { requested_region: region, supported_regions: REGIONS } });
  }
  return region;
}

/** POST /v1/tenants/{id}/tier-change-requests (tenants.manage): a pending request; no migration starts. */
export async function createTierChange(ctx: Ctx, tenantId: string, body: CreateTierChangeBody): Promise<TierChangeRequest> {
  if (!body.reason.trim()) throw invalidField('reason', 'must not be blank');
  const region = validateRegion(body);
  return ctx.db.transaction(async (tx) => {
    const c = inTx(ctx, tx);
    // The row lock serializes requests of one Tenant, so the open-request check cannot race.
    const { tenant } = await tenantFor(c, tenantId, ['tenants.manage'], tx, true);
    if (tenant.plan !== 'enterprise') throw new ApiError('plan_does_not_allow_tier', { details: { plan: tenant.plan, requested_tier: body.requested_tier } });
    const up = LADDER[body.requested_tier] > LADDER[tenant.tier] || (body.requested_tier === 'dedicated_region' && tenant.tier === 'dedicated_region' && region !== tenant.region);
    if (!up) {
      throw new ApiError('invalid_tier_transition', { details: { from_tier: tenant.tier, from_region: tenant.region, requested_tier: body.requested_tier, requested_region: region } });
    }
    const open = await findOpenTierChange(tx, tenant.id);
    if (open) throw new ApiError('tier_change_already_pending', { details: { request_id: open.id, status: open.status } });
    const row = await insertTierChange(tx, {
      id: newId('tcr'),
      tenant_id: tenant.id,
      from_tier: tenant.tier,
      from_region: tenant.region,
      requested_tier: body.requested_tier,
      requested_region: region,
      status: 'pending',
      reason: body.reason,
      requested_by: actorId(ctx),
      created_at: ctx.now,
    });
    const out = toTierChangeRequest(row);
    await recordAudit(tx, c, {
      action: 'tenant.tier_change_requested',
      target: { type: 'tier_change_request', id: row.id },
      tenantId: tenant.id,
      organizationId: tenant.owner_organization_id,
      after: out,
    });
    return out;
  });
}

export async function listTierChanges(ctx: Ctx, tenantId: string, q: TierChangeListQuery) {
  const { tenant } = await tenantFor(ctx, tenantId, ['owner', 'tenants.manage']);
  const where = tierChangeListWhere(tenant.id, q.include_inactive);
  const ks = keyset(q, where.params.length + 1, 'r');
  return toPage(await listTierChangeRows(ctx.db, where, ks), ks.limit, toTierChangeRequest);
}

export async function getTierChange(ctx: Ctx, tenantId: string, id: string): Promise<TierChangeRequest> {
  const { tenant } = await tenantFor(ctx, tenantId, ['owner', 'tenants.manage']);
  const row = await findTierChange(ctx.db, tenant.id, id);
  if (!row) throw new ApiError('tier_change_request_not_found');
  return toTierChangeRequest(row);
}
