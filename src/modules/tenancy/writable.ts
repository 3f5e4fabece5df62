import type { Queryable } from '../../db/types.js';
import { ApiError } from '../../errors.js';
import { lockApplicationTenant, lockTenantStatus } from './store.js';

/** How long a client is told to wait before retrying a write to a migrating Tenant. */
export const MIGRATING_RETRY_AFTER_SECONDS = 60;

/**
 * Part B: while a Tenant is `migrating`, reads work and writes to its data answer 503
 * service_unavailable with Retry-After. Call it in the write's transaction before changing anything:
 * the Tenant row stays locked until the write commits (lockTenantStatus says why).
 */
export async function assertTenantWritable(db: Queryable, tenantId: string): Promise<void> {
  const tenant = await lockTenantStatus(db, tenantId);
  if (tenant?.status === 'migrating') {
    throw new ApiError('service_unavailable', {
      message: 'The tenant is being migrated; writes to its data are paused. Reads keep working.',
      details: { tenant_id: tenantId, reason: 'tenant_migrating' },
      headers: { 'retry-after': String(MIGRATING_RETRY_AFTER_SECONDS) },
    });
  }
}

/**
 * The same, for the Tenant of an Application, read in the write's transaction under a KEY SHARE lock of
 * the Application: an ownership move waits for the write, so the Tenant checked is the one the data is
 * in until the write commits (the Tenant read before the transaction may be one the Application left).
 */
export async function assertAppTenantWritable(db: Queryable, applicationId: string): Promise<void> {
  const app = await lockApplicationTenant(db, applicationId);
  // A null tenant_id is passed on as before: the lock finds no Tenant and the write goes ahead.
  if (app) await assertTenantWritable(db, app.tenant_id as string);
}
