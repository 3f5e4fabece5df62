import type { Tx } from '../db/types.js';

/*
 * Access changes run one at a time per user and per Organization. Without this, two concurrent
 * changes (disabling a personal grant while the user leaves the Organization that also grants the
 * Application) each read "before" without the other's change, and the flip is announced twice or
 * not at all. Every mutation that can change access locks, in this order:
 *
 *   1. the Organization whose members or grants it reads (lockOrganization), before reading them;
 *   2. the Tenants whose seats it counts or gives back (lockTenantSeats), before reading any row
 *      below: an entitlement write locks its Application's Tenant up front (lockEntitlementScope),
 *      since giving freed seats back (releaseSeatLimits) counts them and then locks the members it
 *      releases. A change about an Application reads its Tenant under a KEY SHARE lock of the
 *      Application (lockApplicationTenants), which an ownership move's FOR UPDATE waits for: the
 *      move then counts the seats that change added, and a change after it reads the new Tenant.
 *      (The move's PATCH already holds the Application FOR NO KEY UPDATE, which conflicts with
 *      itself, so no two PATCHes of one Application reach that stronger lock at once.)
 *      The move then locks both Tenants (a seat release on the source Tenant takes no Application
 *      lock); a webhook subscription's creation reads its Tenant the same way (the webhooks cap);
 *   3. the entitlement row it changes (the callers' FOR UPDATE reads);
 *   4. the users whose access it resolves (withAccessFlips, the entitlement jobs), by id.
 *
 * Under READ COMMITTED the statements after a lock see what the previous holder committed. Two
 * transactions taking two of these in opposite orders deadlock; PostgreSQL aborts one after
 * deadlock_timeout (a second) and the database layer runs it again (src/db/pg.ts), a safety net, not
 * the design. The jobs that pick rows (entitlement-expiry, scheduled-starts) take one row per
 * transaction, its Organization before the row. Row locks, not advisory
 * ones: an organization-wide grant locks every member, and advisory locks would fill the shared lock
 * table. FOR NO KEY UPDATE does not block the foreign-key checks of rows that reference these.
 * Seats are counted per Tenant across every user and Organization: two changes adding a seat each
 * (members joining two Organizations granted one Application, a personal grant) would otherwise
 * both count the Tenant one below its cap and both take the last seat.
 */

/** Locks the users whose access the caller is about to resolve before and after a change. */
export async function lockUsersForAccess(tx: Tx, userIds: string[]): Promise<void> {
  if (userIds.length === 0) return;
  await tx.query('SELECT 1 FROM users WHERE id = ANY($1::text[]) ORDER BY id FOR NO KEY UPDATE', [userIds]);
}

/** Locks an Organization before its members or grants are read for an access change. */
export async function lockOrganization(tx: Tx, organizationId: string): Promise<void> {
  await tx.query('SELECT 1 FROM organizations WHERE id = $1 FOR NO KEY UPDATE', [organizationId]);
}

/**
 * For a change of one entitlement: locks its Organization (org grants), then its Application's
 * Tenant (lockApplicationTenants), before the row itself is locked.
 */
export async function lockEntitlementScope(tx: Tx, entitlementId: string): Promise<void> {
  const { rows } = await tx.query<{ organization_id: string | null; application_id: string }>(
    'SELECT e.organization_id, e.application_id FROM entitlements e WHERE e.id = $1',
    [entitlementId],
  );
  if (!rows[0]) return;
  if (rows[0].organization_id) await lockOrganization(tx, rows[0].organization_id);
  await lockApplicationTenants(tx, [rows[0].application_id]);
}

/**
 * Locks the Tenants of these Applications before their seats are counted (lockTenantSeats) and
 * returns them, read under a KEY SHARE lock of each Application, held to commit. An ownership move
 * locks its Application FOR UPDATE before it counts the destination's seats (moveOwnership): it waits
 * for a change that read the Application's Tenant this way, and counts what that change added; a
 * change that comes after it reads the Tenant the Application moved to. Read before the transaction
 * (or without the lock), the Tenant may be the one the Application just left: its cap is not the
 * one the new seat counts against.
 */
export async function lockApplicationTenants(tx: Tx, applicationIds: string[]): Promise<string[]> {
  if (applicationIds.length === 0) return [];
  const { rows } = await tx.query<{ tenant_id: string | null }>(
    'SELECT tenant_id FROM applications WHERE id = ANY($1::text[]) ORDER BY id FOR KEY SHARE',
    [applicationIds],
  );
  const tenantIds = [...new Set(rows.map((r) => r.tenant_id).filter((id): id is string => id !== null))];
  await lockTenantSeats(tx, tenantIds);
  return tenantIds;
}

/** Locks Tenants (by id) before their seats are counted for a change that may add one. */
export async function lockTenantSeats(tx: Tx, tenantIds: (string | null)[]): Promise<void> {
  const ids = [...new Set(tenantIds.filter((id): id is string => id !== null))];
  if (ids.length === 0) return;
  await tx.query('SELECT 1 FROM tenants WHERE id = ANY($1::text[]) ORDER BY id FOR NO KEY UPDATE', [ids]);
}
