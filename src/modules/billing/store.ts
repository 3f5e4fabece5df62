import type { Queryable } from '../../db/types.js';

/** A Tenant as the billing jobs read it: enough to find its mode and base plan. */
export interface TenantOwnerRow {
  id: string;
  owner_user_id: string | null;
  owner_organization_id: string | null;
  subscription_status: string;
}

export async function findUserEmail(db: Queryable, userId: string): Promise<string | null> {
  const { rows } = await db.query<{ email: string }>('SELECT email FROM users WHERE id = $1', [userId]);
  return rows[0]?.email ?? null;
}

/** Records a processor event as 'ignored' once per id: 0 when its id is recorded already. */
export async function insertProcessorEvent(db: Queryable, id: string, type: string, created: Date, now: Date): Promise<number> {
  const recorded = await db.query(
    `INSERT INTO processor_events (id, type, created, outcome, received_at) VALUES ($1, $2, $3, 'ignored', $4) ON CONFLICT (id) DO NOTHING RETURNING id`,
    [id, type, created, now],
  );
  return recorded.rowCount;
}

export async function updateProcessorEventOutcome(db: Queryable, id: string, tenantId: string, outcome: string): Promise<void> {
  await db.query('UPDATE processor_events SET tenant_id = $2, outcome = $3 WHERE id = $1', [id, tenantId, outcome]);
}

/** The Tenant a processor id was last linked to (the most recently updated), or null. */
export async function findTenantIdBy(db: Queryable, column: 'stripe_subscription_id' | 'stripe_customer_id', value: string): Promise<string | null> {
  const { rows } = await db.query<{ id: string }>(`SELECT id FROM tenants WHERE ${column} = $1 ORDER BY updated_at DESC LIMIT 1`, [value]);
  return rows[0]?.id ?? null;
}

/** Moves the Tenant's last applied event instant forward to `created` (never back). */
export async function updateLastProcessorEventCreated(db: Queryable, tenantId: string, created: Date): Promise<void> {
  await db.query('UPDATE tenants SET last_processor_event_created = GREATEST(COALESCE(last_processor_event_created, $2), $2) WHERE id = $1', [tenantId, created]);
}

/** The subscription state an event writes; null ids keep the stored ones, a null `created` keeps the order. */
export interface SubscriptionWrite {
  tenantId: string;
  plan: string;
  status: string;
  processorPlan: string | null;
  restricted: boolean;
  customerId: string | null;
  subscriptionId: string | null;
  periodStart: Date | null | undefined;
  periodEnd: Date | null | undefined;
  cancelAtPeriodEnd: boolean | undefined;
  /** JSON text. */
  addOns: string;
  currency: string | null | undefined;
  created: Date | null;
  now: Date;
  statusOf: string | null;
}

export async function updateTenantSubscription(db: Queryable, w: SubscriptionWrite): Promise<void> {
  await db.query(
    `UPDATE tenants SET plan = $2, subscription_status = $3, processor_plan = $4, restricted = $5,
            stripe_customer_id = COALESCE($6, stripe_customer_id), stripe_subscription_id = COALESCE($7, stripe_subscription_id),
            current_period_start = $8, current_period_end = $9, cancel_at_period_end = $10, add_ons = $11, currency = $12,
            last_processor_event_created = CASE WHEN $13::timestamptz IS NULL THEN last_processor_event_created
                                                ELSE GREATEST(COALESCE(last_processor_event_created, $13::timestamptz), $13::timestamptz) END,
            status_subscription_id = COALESCE($15, status_subscription_id), updated_at = $14
      WHERE id = $1`,
    [
      w.tenantId, w.plan, w.status, w.processorPlan, w.restricted, w.customerId, w.subscriptionId,
      w.periodStart, w.periodEnd, w.cancelAtPeriodEnd, w.addOns, w.currency, w.created, w.now, w.statusOf,
    ],
  );
}

/** Every Tenant, in id order, with its restriction (seat-sync). */
export async function listTenantsForSeatSync(db: Queryable): Promise<(TenantOwnerRow & { restricted: boolean })[]> {
  const { rows } = await db.query<TenantOwnerRow & { restricted: boolean }>(
    'SELECT id, owner_user_id, owner_organization_id, subscription_status, restricted FROM tenants ORDER BY id',
  );
  return rows;
}

/**
 * Records the seat count; restricted is written only if what it was computed from is still the row's:
 * a processor event that changed the subscription meanwhile (paid: no longer restricted) must not be
 * overwritten by this run's older reading until the next one.
 */
export async function updateTenantSeats(db: Queryable, tenantId: string, seats: number, now: Date, over: boolean, status: string, restricted: boolean): Promise<void> {
  await db.query(
    `UPDATE tenants SET seats_synced = $2, seats_last_synced_at = $3,
              restricted = CASE WHEN subscription_status = $5 AND restricted = $6 THEN $4 ELSE restricted END
        WHERE id = $1`,
    [tenantId, seats, now, over, status, restricted],
  );
}

/** The Tenants with members marked seat_limit on any of their Applications' grants, in id order. */
export async function listTenantsWithSeatLimits(db: Queryable): Promise<TenantOwnerRow[]> {
  const { rows } = await db.query<TenantOwnerRow>(
    `SELECT DISTINCT t.id, t.owner_user_id, t.owner_organization_id, t.subscription_status
       FROM org_seat_limits l JOIN entitlements e ON e.id = l.entitlement_id JOIN applications a ON a.id = e.application_id
       JOIN tenants t ON t.id = a.tenant_id ORDER BY t.id`,
  );
  return rows;
}
