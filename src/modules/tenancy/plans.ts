import type { Queryable } from '../../db/types.js';
import { ApiError } from '../../errors.js';
import { newId } from '../../ids.js';
import { countSeats } from './seats-store.js';
import { insertOwnerTenant, lockOwnerTenant, type TenantRow } from './store.js';
import { countTenantWebhookSubscriptions, listWebhookTargetColumns, measureTenantApplications } from './usage-store.js';

export { findTenant, type TenantRow } from './store.js';
export { countTenantApplications } from './usage-store.js';

export type Plan = 'starter' | 'team' | 'enterprise';
export type LimitedResource = 'applications' | 'seats' | 'app_roles' | 'webhooks';

/**
 * Enterprise audit windows are negotiated (Part B Limits); without a negotiated figure on record, two
 * years. Usage reports it as the limit, since it is the window the audit log enforces.
 */
export const ENTERPRISE_HOT_WINDOW_DAYS = 730;

/** The plan catalog (Part B Limits). null = unlimited. Seats: Starter caps at 1,000; Team includes 25 and bills extra. */
export const PLAN_LIMITS: Record<Plan, Record<LimitedResource, number | null> & { seats_included: number | null; audit_hot_window_days: number }> = {
  starter: { applications: 1, app_roles: 3, webhooks: 1, seats: 1000, seats_included: 1000, audit_hot_window_days: 30 },
  team: { applications: 5, app_roles: null, webhooks: 10, seats: null, seats_included: 25, audit_hot_window_days: 365 },
  enterprise: { applications: null, app_roles: null, webhooks: null, seats: null, seats_included: null, audit_hot_window_days: ENTERPRISE_HOT_WINDOW_DAYS },
};

/**
 * The plan a Tenant has without a paid subscription, and drops to when one lapses ("what the Tenant
 * can drop to", Part B): Team for an Organization's Tenant (it begins there), Starter for a user's.
 */
export const basePlan = (tenant: { owner_organization_id: string | null }): Plan => (tenant.owner_organization_id ? 'team' : 'starter');

/** The owner's Tenant, created with its first Application: tier shared in us-east-1, starter for a user, team for an Organization. */
export async function resolveOwnerTenant(db: Queryable, owner: { userId?: string | null; organizationId?: string | null }, now: Date): Promise<TenantRow> {
  const byUser = !!owner.userId;
  const ownerType = byUser ? 'user' : 'organization';
  const value = byUser ? owner.userId : owner.organizationId;
  await insertOwnerTenant(
    db,
    { id: newId('tnt'), owner_type: ownerType, owner_user_id: byUser ? value : null, owner_organization_id: byUser ? null : value, plan: basePlan({ owner_organization_id: byUser ? null : value! }) },
    now,
  );
  // Locked (lockOwnerTenant): the caller counts its Applications against the plan cap.
  return lockOwnerTenant(db, ownerType, value);
}

/**
 * The one place plan caps are enforced: 402 subscription_required on a restricted Tenant, 409
 * plan_limit_reached (details name the resource) when `wanted` would exceed the plan's cap.
 * `current` is the usage now (by default one below `wanted`: one more Application, seat or webhook);
 * an Application's app roles pass the names it declares now, whatever length the request asks for.
 */
export function assertWithinPlan(tenant: TenantRow, resource: LimitedResource, wanted: number, current = wanted - 1): void {
  if (tenant.restricted) throw new ApiError('subscription_required', { details: { tenant_id: tenant.id, resource } });
  const limit = PLAN_LIMITS[tenant.plan]?.[resource] ?? null;
  if (limit !== null && wanted > limit) {
    throw new ApiError('plan_limit_reached', { details: { resource, limit, current, plan: tenant.plan, tenant_id: tenant.id } });
  }
}

export const PLANS: readonly Plan[] = ['starter', 'team', 'enterprise'];

/** What a Tenant uses of each capped resource (Part B Usage). */
export interface TenantUsage {
  applications: number;
  seats: number;
  /** The highest length of available_app_roles on any one of its Applications. */
  app_roles: number;
  webhooks: number;
}

/** Webhook subscriptions of the Tenant's Applications; 0 until the webhooks table exists. */
async function countTenantWebhooks(db: Queryable, tenantId: string): Promise<number> {
  const rows = await listWebhookTargetColumns(db);
  const column = rows.some((r) => r.column_name === 'application_id') ? 'application_id' : rows.some((r) => r.column_name === 'scope') ? 'scope' : null;
  if (!column) return 0;
  return countTenantWebhookSubscriptions(db, tenantId, column);
}

export async function measureUsage(db: Queryable, tenantId: string, now: Date): Promise<TenantUsage> {
  const applications = await measureTenantApplications(db, tenantId);
  return { ...applications, seats: await countSeats(db, tenantId, now), webhooks: await countTenantWebhooks(db, tenantId) };
}

/** The usage fits the plan when no capped resource is above the plan's limit (null = unlimited). */
export function planFits(plan: Plan, usage: TenantUsage): boolean {
  return (['applications', 'seats', 'app_roles', 'webhooks'] as const).every((r) => {
    const limit = PLAN_LIMITS[plan][r];
    return limit === null || usage[r] <= limit;
  });
}

export const fittingPlans = (usage: TenantUsage): Plan[] => PLANS.filter((p) => planFits(p, usage));
