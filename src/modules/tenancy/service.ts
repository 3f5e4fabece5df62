import type { Ctx } from '../../context.js';
import { hasPermission } from '../../context.js';
import type { Queryable } from '../../db/types.js';
import { ApiError } from '../../errors.js';
import { keyset, toPage } from '../../http/pagination.js';
import { PLAN_LIMITS, fittingPlans, measureUsage } from './plans.js';
import { findTenantRecord, isTenantOwner, listTenantRecords, tenantListWhere, toTenant, type TenantRecord } from './store.js';
import type { Tenant, TenantListQuery, Usage } from './schemas.js';

export { assertTenantWritable } from './writable.js';
export { findTenantRecord, tenantModeOf, tenantOwnerEmails, type TenantRecord } from './store.js';

/** Who may do something with a Tenant: its owner, or a platform permission. */
export type TenantRight = 'owner' | 'tenants.manage' | 'billing.manage';

export interface TenantAccess {
  tenant: TenantRecord;
  owner: boolean;
}

/**
 * The Tenant if the caller may see it (owner, tenants.manage or billing.manage), else 404
 * tenant_not_found; then 403 forbidden unless the caller holds one of `rights`.
 */
export async function tenantFor(ctx: Ctx, id: string, rights: readonly TenantRight[], db: Queryable = ctx.db, forUpdate = false): Promise<TenantAccess> {
  const tenant = await findTenantRecord(db, id, forUpdate);
  const owner = !!tenant && ctx.actor.type === 'user' && (await isTenantOwner(db, ctx.actor.userId, tenant.id));
  const held = (right: TenantRight) => (right === 'owner' ? owner : hasPermission(ctx.actor, right));
  if (!tenant || !(['owner', 'tenants.manage', 'billing.manage'] as const).some(held)) throw new ApiError('tenant_not_found');
  if (!rights.some(held)) throw new ApiError('forbidden', { details: { allowed: rights } });
  return { tenant, owner };
}

/** GET /v1/tenants: the caller's own Tenants; every Tenant (with filters) for tenants.manage. */
export async function listTenants(ctx: Ctx, q: TenantListQuery) {
  let ownerUserId: string | null = null;
  if (!hasPermission(ctx.actor, 'tenants.manage')) {
    // Nothing to list, but the cursor is still checked (docs/conventions.md, Pagination).
    if (ctx.actor.type !== 'user') return toPage([], keyset(q, 1).limit, toTenant);
    ownerUserId = ctx.actor.userId;
  }
  const where = tenantListWhere(ownerUserId, q);
  const ks = keyset(q, where.params.length + 1, 't');
  return toPage(await listTenantRecords(ctx.db, where, ks), ks.limit, toTenant);
}

export async function getTenant(ctx: Ctx, id: string): Promise<Tenant> {
  const { tenant } = await tenantFor(ctx, id, ['owner', 'tenants.manage', 'billing.manage']);
  return toTenant(tenant);
}

/** GET /v1/tenants/{id}/usage: each capped resource against the plan, and the plans the usage fits. */
export async function getUsage(ctx: Ctx, id: string): Promise<Usage> {
  const { tenant } = await tenantFor(ctx, id, ['owner', 'billing.manage', 'tenants.manage']);
  const usage = await measureUsage(ctx.db, tenant.id, ctx.now);
  const limits = PLAN_LIMITS[tenant.plan];
  return {
    tenant_id: tenant.id,
    plan: tenant.plan,
    limits: {
      applications: { limit: limits.applications, current: usage.applications },
      seats: { limit: limits.seats, current: usage.seats, included: limits.seats_included },
      app_roles: { limit: limits.app_roles, current: usage.app_roles },
      webhooks: { limit: limits.webhooks, current: usage.webhooks },
      audit_hot_window_days: { limit: limits.audit_hot_window_days },
    },
    fits_plans: fittingPlans(usage),
  };
}
