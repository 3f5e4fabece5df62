import type { Deps } from '../../context.js';
import { countSeats } from '../tenancy/seats.js';
import { tenantModeOf } from '../tenancy/service.js';

/**
 * seat-sync (daily): records each Tenant's seat count and when it was taken (the subscription's
 * seats.last_synced_at); seats.current stays live. Counted in the Tenant's own mode.
 */
export async function runSeatSync(deps: Deps): Promise<Record<string, unknown>> {
  const system = deps.database.scoped('system');
  const now = deps.clock.now();
  const { rows } = await system.query<{ id: string; owner_user_id: string | null; owner_organization_id: string | null }>(
    'SELECT id, owner_user_id, owner_organization_id FROM tenants ORDER BY id',
  );
  for (const tenant of rows) {
    const seats = await countSeats(deps.database.scoped(await tenantModeOf(system, tenant)), tenant.id, now);
    await system.query('UPDATE tenants SET seats_synced = $2, seats_last_synced_at = $3 WHERE id = $1', [tenant.id, seats, now]);
  }
  return { tenants: rows.length };
}
