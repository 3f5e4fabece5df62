import type { Queryable } from '../../db/types.js';
import { ApiError } from '../../errors.js';

/** How long a client is told to wait before retrying a write to a migrating Tenant. */
export const MIGRATING_RETRY_AFTER_SECONDS = 60;

/**
 * Part B: while a Tenant is `migrating`, reads work and writes to its data answer 503
 * service_unavailable with Retry-After. Call it in the write's transaction before changing anything.
 * The Tenant row is read FOR KEY SHARE and so held until the write commits: a tier-change move to
 * in_progress (the Tenant FOR UPDATE) waits for writes that found it active, and a write arriving
 * while that move is committing waits for it and reads `migrating`. (A plain read let a write that
 * had found the Tenant active commit after the migration had started.) KEY SHARE conflicts with no
 * other Tenant lock the writes take (FOR NO KEY UPDATE for seats and Application counts).
 */
export async function assertTenantWritable(db: Queryable, tenantId: string): Promise<void> {
  const { rows } = await db.query<{ status: string }>('SELECT status FROM tenants WHERE id = $1 FOR KEY SHARE', [tenantId]);
  if (rows[0]?.status === 'migrating') {
    throw new ApiError('service_unavailable', {
      message: 'The tenant is being migrated; writes to its data are paused. Reads keep working.',
      details: { tenant_id: tenantId, reason: 'tenant_migrating' },
      headers: { 'retry-after': String(MIGRATING_RETRY_AFTER_SECONDS) },
    });
  }
}

/** The same, for the Tenant of an Application. */
export async function assertAppTenantWritable(db: Queryable, applicationId: string): Promise<void> {
  const { rows } = await db.query<{ tenant_id: string }>('SELECT tenant_id FROM applications WHERE id = $1', [applicationId]);
  if (rows[0]) await assertTenantWritable(db, rows[0].tenant_id);
}
