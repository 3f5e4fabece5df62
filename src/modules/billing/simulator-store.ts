import { randomBytes } from 'node:crypto';
import type { Ctx } from '../../context.js';
import type { Queryable } from '../../db/types.js';
import { addSeconds } from '../../clock.js';
import type { HostedSession } from './schemas.js';
import { lockTenantCheckouts, recordCompletedCheckoutSession } from './checkout-store.js';

/** A simulated checkout lives a day, as Stripe's does; a simulated portal an hour (a person clicks around in it). */
const LIFETIME_SECONDS = { checkout: 24 * 3600, portal: 3600 } as const;

export type SimKind = keyof typeof LIFETIME_SECONDS;

export interface SimSessionRow {
  id: string;
  kind: SimKind;
  tenant_id: string;
  plan: string | null;
  success_url: string | null;
  cancel_url: string | null;
  return_url: string | null;
  customer_email: string | null;
  status: 'open' | 'completed' | 'cancelled';
  created_at: Date;
  expires_at: Date;
}

const COLUMNS = 'id, kind, tenant_id, plan, success_url, cancel_url, return_url, customer_email, status, created_at, expires_at';

/** A random, unguessable processor-style id (the URL is the only credential of a hosted page). */
export const simId = (prefix: string) => `${prefix}_sim_${randomBytes(18).toString('base64url')}`;

export const simulatorPath = (kind: SimKind, id: string) => `/billing/simulator/${kind}/${id}`;

export async function createSimulatedSession(
  db: Queryable,
  ctx: Ctx,
  input: { kind: SimKind; tenantId: string; plan?: string; successUrl?: string; cancelUrl?: string; returnUrl?: string; customerEmail: string | null },
): Promise<HostedSession> {
  const id = simId(input.kind === 'checkout' ? 'cs' : 'bps');
  const expiresAt = addSeconds(ctx.now, LIFETIME_SECONDS[input.kind]);
  // One payable checkout per Tenant, as through the processor (src/modules/billing/checkouts.ts): the
  // Tenant's open ones expire now. `db` is the request's transaction: the Tenant's lock holds to its end.
  if (input.kind === 'checkout') {
    await lockTenantCheckouts(db, input.tenantId);
    await db.query(
      `UPDATE billing_simulator_sessions SET expires_at = $2 WHERE tenant_id = $1 AND kind = 'checkout' AND status = 'open' AND expires_at > $2`,
      [input.tenantId, ctx.now],
    );
  }
  await db.query(
    `INSERT INTO billing_simulator_sessions (id, kind, tenant_id, plan, success_url, cancel_url, return_url, customer_email, created_at, expires_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
    [id, input.kind, input.tenantId, input.plan ?? null, input.successUrl ?? null, input.cancelUrl ?? null, input.returnUrl ?? null, input.customerEmail, ctx.now, expiresAt],
  );
  return { url: `${ctx.deps.config.publicUrl}${simulatorPath(input.kind, id)}`, expires_at: expiresAt.toISOString() };
}

/** An open, unexpired session of that kind, or null. */
export async function findOpenSimSession(db: Queryable, kind: SimKind, id: string, now: Date): Promise<SimSessionRow | null> {
  const { rows } = await db.query<SimSessionRow>(
    `SELECT ${COLUMNS} FROM billing_simulator_sessions WHERE id = $1 AND kind = $2 AND status = 'open' AND expires_at > $3`,
    [id, kind, now],
  );
  return rows[0] ?? null;
}

/**
 * Closes an open checkout session exactly once (a double click completes it once). Only a checkout:
 * a portal session (open to billing.manage) must not subscribe the Tenant, as checkout is the owner's.
 */
export async function finishSimSession(db: Queryable, id: string, status: 'completed' | 'cancelled', now: Date): Promise<SimSessionRow | null> {
  const { rows } = await db.query<SimSessionRow>(
    `UPDATE billing_simulator_sessions SET status = $2, finished_at = $3
      WHERE id = $1 AND kind = 'checkout' AND status = 'open' AND expires_at > $3 RETURNING ${COLUMNS}`,
    [id, status, now],
  );
  return rows[0] ?? null;
}

/**
 * Pays an open simulated checkout (finishSimSession) and records it as a processor checkout completed
 * before its subscription's event is applied (checkout_sessions, as src/modules/billing/apply.ts marks
 * one): the Tenant is subscribing, and its checkouts are 409 until that subscription's event drops the
 * row. Locks the Tenant first, the order a checkout takes them in.
 */
export async function completeSimCheckout(tx: Queryable, id: string, subscriptionId: string, now: Date): Promise<SimSessionRow | null> {
  const { rows } = await tx.query<{ tenant_id: string }>(`SELECT tenant_id FROM billing_simulator_sessions WHERE id = $1 AND kind = 'checkout'`, [id]);
  if (!rows[0]) return null;
  await lockTenantCheckouts(tx, rows[0].tenant_id);
  const session = await finishSimSession(tx, id, 'completed', now);
  if (!session) return null;
  await recordCompletedCheckoutSession(tx, session.tenant_id, session, subscriptionId, now);
  return session;
}

/**
 * A checkout already closed with this status, while it is unexpired: a second "Pay and subscribe" or
 * "Cancel" (a double click, back and resubmit) lands where the first one did, and applies nothing.
 */
export async function findFinishedSimCheckout(db: Queryable, id: string, status: 'completed' | 'cancelled', now: Date): Promise<SimSessionRow | null> {
  const { rows } = await db.query<SimSessionRow>(
    `SELECT ${COLUMNS} FROM billing_simulator_sessions WHERE id = $1 AND kind = 'checkout' AND status = $2 AND expires_at > $3`,
    [id, status, now],
  );
  return rows[0] ?? null;
}
