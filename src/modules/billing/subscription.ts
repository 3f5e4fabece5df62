import type { Ctx } from '../../context.js';
import { PLAN_LIMITS, type Plan } from '../tenancy/plans.js';
import { LAPSED } from './apply.js';
import { countSeats } from '../tenancy/seats.js';
import { tenantFor } from '../tenancy/service.js';
import type { Subscription } from './schemas.js';

/** Billable seats: only Team bills seats beyond those included; Starter caps instead; Enterprise is contracted. */
export function billableSeats(plan: Plan, current: number): number {
  const included = PLAN_LIMITS[plan].seats_included;
  return plan === 'team' && included !== null ? Math.max(0, current - included) : 0;
}

/** GET /v1/tenants/{id}/subscription (owner or billing.manage). seats.current is counted live. */
export async function getSubscription(ctx: Ctx, tenantId: string): Promise<Subscription> {
  const { tenant } = await tenantFor(ctx, tenantId, ['owner', 'billing.manage']);
  const current = await countSeats(ctx.db, tenant.id, ctx.now);
  // Starter has no processor subscription, nor a lapsed one (an Organization's Tenant is back on its
  // base Team plan), so no period, even when the lapse left the old one stored.
  const unsubscribed = tenant.plan === 'starter' || LAPSED.has(tenant.subscription_status);
  return {
    tenant_id: tenant.id,
    plan: tenant.plan,
    subscription_status: tenant.subscription_status,
    restricted: tenant.restricted,
    current_period_start: unsubscribed ? null : (tenant.current_period_start?.toISOString() ?? null),
    current_period_end: unsubscribed ? null : (tenant.current_period_end?.toISOString() ?? null),
    cancel_at_period_end: unsubscribed ? false : tenant.cancel_at_period_end,
    seats: {
      current,
      included: PLAN_LIMITS[tenant.plan].seats_included,
      billable: billableSeats(tenant.plan, current),
      last_synced_at: tenant.seats_last_synced_at?.toISOString() ?? null,
    },
    add_ons: tenant.plan === 'enterprise' ? tenant.add_ons : [],
    currency: tenant.currency,
  };
}
