import type { Deps } from '../../context.js';
import { forEachSkippingFailures } from '../../jobs/each.js';
import { systemCtx } from '../../context.js';
import { countSeats, releaseSeatLimits } from '../tenancy/seats.js';
import { basePlan, measureUsage, planFits } from '../tenancy/plans.js';
import { tenantModeOf } from '../tenancy/service.js';
import { restrictionHolds } from './apply.js';
import { listTenantsForSeatSync, listTenantsWithSeatLimits, updateTenantSeats } from './store.js';

/**
 * seat-sync (daily): records each Tenant's seat count and when it was taken (the subscription's
 * seats.last_synced_at; seats.current stays live), counted in the Tenant's own mode. A lapsed
 * Tenant's restriction follows its usage: lifted once it fits its base plan again, also while a new
 * subscription is not yet paid (restrictionHolds).
 */
export async function runSeatSync(deps: Deps): Promise<Record<string, unknown>> {
  const system = deps.database.scoped('system');
  const now = deps.clock.now();
  const rows = await listTenantsForSeatSync(system);
  let restricted = 0;
  // A Tenant whose sync fails does not hold back the others (those after it in id order).
  await forEachSkippingFailures(deps, 'tenant_id', rows, (tenant) => tenant.id, async (tenant) => {
    const scoped = deps.database.scoped(await tenantModeOf(system, tenant));
    const seats = await countSeats(scoped, tenant.id, now);
    const over = restrictionHolds(tenant.subscription_status, tenant.restricted) && !planFits(basePlan(tenant), await measureUsage(scoped, tenant.id, now));
    if (over) restricted++;
    // restricted is written only if what it was computed from is still the row's (updateTenantSeats).
    await updateTenantSeats(system, tenant.id, seats, now, over, tenant.subscription_status, tenant.restricted);
  });
  return { tenants: rows.length, restricted };
}

/**
 * seat-limit-release (every minute): on each Tenant with members marked seat_limit, gives seats freed
 * since (expiries, erasures, lost memberships) back to them, oldest marks first, with access.granted.
 * Mutations that free seats directly (entitlement PATCH and DELETE, member removal, plan changes) do
 * it in their own transaction; this catches the time-driven ones.
 */
export async function runSeatLimitRelease(deps: Deps): Promise<Record<string, unknown>> {
  const system = deps.database.scoped('system');
  const rows = await listTenantsWithSeatLimits(system);
  let released = 0;
  // A Tenant whose release fails does not hold back the others (those after it in id order).
  await forEachSkippingFailures(deps, 'tenant_id', rows, (tenant) => tenant.id, async (tenant) => {
    const ctx = systemCtx(deps, await tenantModeOf(system, tenant));
    released += await system.transaction((tx) => releaseSeatLimits(tx, { ...ctx, db: tx }, tenant.id));
  });
  return { tenants: rows.length, released };
}
