import type { Queryable } from '../../db/types.js';

/** Locks the Tenant (FOR NO KEY UPDATE) so that its checkouts are recorded one at a time: the later supersedes the earlier. */
export async function lockTenantCheckouts(db: Queryable, tenantId: string): Promise<void> {
  await db.query('SELECT 1 FROM tenants WHERE id = $1 FOR NO KEY UPDATE', [tenantId]);
}

/**
 * Locks the Organization owning the Tenant, if one does, FOR SHARE: a role change or removal of its
 * members locks it FOR NO KEY UPDATE first, so it waits for the checkout holding this, and one that
 * committed first is seen by the reads after it. Taken before the Tenant (src/access/locks.ts order).
 */
export async function lockOwningOrganization(db: Queryable, tenantId: string): Promise<void> {
  await db.query('SELECT 1 FROM organizations WHERE id = (SELECT owner_organization_id FROM tenants WHERE id = $1) FOR SHARE', [tenantId]);
}

/**
 * Records a processor checkout session as the Tenant's one payable checkout: its other sessions are
 * marked superseded (to be expired at the processor), those past their own expiry dropped. A session
 * recorded already (the processor replayed it for the same Idempotency-Key) stays as it is, and
 * supersedes nothing: a later checkout may have superseded it, and the later one stays payable.
 */
export async function recordCheckoutSession(db: Queryable, tenantId: string, session: CheckoutSessionRow, now: Date): Promise<void> {
  await db.query('DELETE FROM checkout_sessions WHERE tenant_id = $1 AND expires_at <= $2', [tenantId, now]);
  const { rowCount } = await db.query(
    'INSERT INTO checkout_sessions (id, tenant_id, created_at, expires_at, url) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (id) DO NOTHING',
    [session.id, tenantId, now, session.expires_at, session.url],
  );
  if (rowCount === 0) return;
  await db.query('UPDATE checkout_sessions SET superseded_at = $3 WHERE tenant_id = $1 AND id <> $2 AND superseded_at IS NULL', [tenantId, session.id, now]);
}

/**
 * Records a session a checkout opened and then refused, expired at the processor, as closed: a retry
 * with the same Idempotency-Key, to which the processor replays it, finds it recorded and supersedes
 * nothing (recordCheckoutSession), as for a session expired by a later checkout.
 */
export async function recordClosedCheckoutSession(db: Queryable, tenantId: string, session: CheckoutSessionRow, now: Date): Promise<void> {
  await db.query(
    'INSERT INTO checkout_sessions (id, tenant_id, created_at, expires_at, url, closed_at) VALUES ($1, $2, $3, $4, $5, $3) ON CONFLICT (id) DO NOTHING',
    [session.id, tenantId, now, session.expires_at, session.url],
  );
}

/** A recorded session; url is null for one recorded before 0040 (by the release before it). */
export interface CheckoutSessionRow {
  id: string;
  url: string | null;
  expires_at: Date;
}

/** The Tenant's payable checkout: its session not superseded and not past its expiry, if any. */
export async function findCurrentCheckoutSession(db: Queryable, tenantId: string, now: Date): Promise<CheckoutSessionRow | null> {
  const { rows } = await db.query<CheckoutSessionRow>(
    'SELECT id, url, expires_at FROM checkout_sessions WHERE tenant_id = $1 AND superseded_at IS NULL AND closed_at IS NULL AND completed_at IS NULL AND expires_at > $2',
    [tenantId, now],
  );
  return rows[0] ?? null;
}

/** The Tenant's superseded sessions not yet expired at the processor (closed), oldest first. */
export async function listSupersededCheckoutSessions(db: Queryable, tenantId: string, now: Date): Promise<string[]> {
  const { rows } = await db.query<{ id: string }>(
    'SELECT id FROM checkout_sessions WHERE tenant_id = $1 AND superseded_at IS NOT NULL AND closed_at IS NULL AND completed_at IS NULL AND expires_at > $2 ORDER BY created_at, id',
    [tenantId, now],
  );
  return rows.map((r) => r.id);
}

/** Marks a session expired at the processor; its row stays until its own expiry (a replay must find it closed). */
export async function closeCheckoutSession(db: Queryable, id: string, now: Date): Promise<void> {
  await db.query('UPDATE checkout_sessions SET closed_at = $2 WHERE id = $1', [id, now]);
}

/** Drops a session: its completion applied, with nothing left to wait for. */
export async function deleteCheckoutSession(db: Queryable, id: string): Promise<void> {
  await db.query('DELETE FROM checkout_sessions WHERE id = $1', [id]);
}

/**
 * Marks a session completed, its subscription's own event not applied yet (the processor's events come
 * in any order): the Tenant is subscribing, and its checkouts are refused (findSubscribingCheckout)
 * until that subscription's event drops it (dropCompletedCheckouts) or its own expiry has passed.
 */
export async function markCheckoutSessionCompleted(db: Queryable, id: string, subscriptionId: string, now: Date): Promise<void> {
  await db.query('UPDATE checkout_sessions SET completed_at = $3, subscription_id = $2 WHERE id = $1', [id, subscriptionId, now]);
}

/** Records a session paid before any row of it was (the simulator's, paid on its own page) as markCheckoutSessionCompleted leaves one. */
export async function recordCompletedCheckoutSession(
  db: Queryable,
  tenantId: string,
  session: { id: string; created_at: Date; expires_at: Date },
  subscriptionId: string,
  now: Date,
): Promise<void> {
  await db.query(
    'INSERT INTO checkout_sessions (id, tenant_id, created_at, expires_at, completed_at, subscription_id) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO NOTHING',
    [session.id, tenantId, session.created_at, session.expires_at, now, subscriptionId],
  );
}

/** Whether the Tenant has a session completed whose subscription's own event is not applied yet, within its expiry. */
export async function findSubscribingCheckout(db: Queryable, tenantId: string, now: Date): Promise<boolean> {
  const { rows } = await db.query('SELECT 1 FROM checkout_sessions WHERE tenant_id = $1 AND completed_at IS NOT NULL AND expires_at > $2 LIMIT 1', [tenantId, now]);
  return rows.length > 0;
}

/** Drops the Tenant's completed sessions of a subscription: an event of that subscription was applied. */
export async function dropCompletedCheckouts(db: Queryable, tenantId: string, subscriptionId: string): Promise<void> {
  await db.query('DELETE FROM checkout_sessions WHERE tenant_id = $1 AND subscription_id = $2 AND completed_at IS NOT NULL', [tenantId, subscriptionId]);
}
