import type { FastifyBaseLogger } from 'fastify';
import type { Ctx } from '../../context.js';
import type { Queryable } from '../../db/types.js';
import { ApiError } from '../../errors.js';
import { callProcessor, Stripe } from './processor.js';
import type { HostedSession } from './schemas.js';
import { assertTenantWritable, findTenantRecord, tenantFor } from '../tenancy/service.js';
import {
  closeCheckoutSession, findCurrentCheckoutSession, findSubscribingCheckout, listSupersededCheckoutSessions, lockOwningOrganization, lockTenantCheckouts, recordCheckoutSession,
  recordClosedCheckoutSession, type CheckoutSessionRow,
} from './checkout-store.js';

/** A Tenant may start a checkout only without a live subscription (none, or a lapsed one). */
export const CHECKOUT_ALLOWED = new Set(['none', 'canceled', 'incomplete_expired', 'unpaid']);

/** The refusal of a checkout while an earlier one of the Tenant is paid and its subscription not applied yet. */
const SUBSCRIBING = "An earlier checkout of this Tenant was paid; its subscription applies when the processor's event arrives.";

/** What a checkout's answers name of its Tenant. */
type CheckoutTenant = { id: string; plan: string; subscription_status: string };

/** 409 subscription_exists naming the Tenant's subscription status and plan (the message, when given, says why). */
export const subscriptionExists = (tenant: Pick<CheckoutTenant, 'plan' | 'subscription_status'>, message?: string) =>
  new ApiError('subscription_exists', { ...(message ? { message } : {}), details: { subscription_status: tenant.subscription_status, plan: tenant.plan } });

/**
 * Takes the Tenant's checkout lock (lockTenantCheckouts) with what the checkout began on read again under
 * it, before anything of the Tenant's checkouts changes. The caller's right: checkout is the owner's,
 * and an org_admin demoted or removed since it was first read (the membership write locks the
 * Organization, which this locks first) gets what a stranger gets, 404 tenant_not_found (403 forbidden
 * to a billing.manage or tenants.manage holder). The Tenant's status: a migration that started since
 * (its move to in_progress locks the Tenant FOR UPDATE) is 503, as at the start.
 */
export async function lockForCheckout(tx: Queryable, ctx: Ctx, tenantId: string): Promise<void> {
  await lockOwningOrganization(tx, tenantId);
  await tenantFor(ctx, tenantId, ['owner'], tx);
  await lockTenantCheckouts(tx, tenantId);
  await assertTenantWritable(tx, tenantId);
  await assertNotSubscribed(tx, tenantId, ctx.now);
}

/**
 * Checkout is allowed only without a live subscription, read again under the Tenant's lock (a
 * subscription's event applied while the checkout was under way locks it too), and not while the
 * Tenant is subscribing: an earlier session's completion applied before its subscription's own event
 * (Stripe's events come in any order), within that session's expiry. Both are 409 subscription_exists.
 */
async function assertNotSubscribed(tx: Queryable, tenantId: string, now: Date): Promise<void> {
  const tenant = await findTenantRecord(tx, tenantId);
  if (!tenant) throw new ApiError('tenant_not_found');
  if (!CHECKOUT_ALLOWED.has(tenant.subscription_status)) throw subscriptionExists(tenant);
  if (await findSubscribingCheckout(tx, tenantId, now)) throw subscriptionExists(tenant, SUBSCRIBING);
}

/** Whether `err` is lockForCheckout's refusal (not a failure of the Tenant's checkouts). */
const refusedUnderLock = (err: unknown) => err instanceof ApiError && ['tenant_not_found', 'forbidden', 'service_unavailable', 'subscription_exists'].includes(err.code);

/**
 * One payable checkout per Tenant (docs/decisions.md): records the processor session just opened,
 * then expires the Tenant's earlier ones at the processor before a URL is handed out, so a second
 * tab, or a retry under a new Idempotency-Key, cannot be paid beside it (twice charged, the second
 * subscription ignored). Recording takes the Tenant's lock: of two checkouts at once, the one
 * recorded last is the payable one, and both hand out its URL (payableCheckout). An earlier session
 * found paid (its completion not applied yet) means the Tenant is subscribing: this one is expired
 * too, 409 subscription_exists. A processor failure is 503 billing_unavailable, and a retry with the
 * same Idempotency-Key finishes the expiry.
 */
export async function supersedeEarlierCheckouts(
  ctx: Ctx,
  stripe: Stripe,
  log: FastifyBaseLogger,
  tenant: CheckoutTenant,
  session: Stripe.Checkout.Session,
): Promise<HostedSession> {
  const db = ctx.deps.database.scoped(ctx.mode);
  const own: CheckoutSessionRow = { id: session.id, url: session.url, expires_at: new Date(session.expires_at * 1000) };
  await db
    .transaction(async (tx) => {
      await lockForCheckout(tx, ctx, tenant.id);
      await recordCheckoutSession(tx, tenant.id, own, ctx.now);
    })
    .catch(async (err: unknown) => {
      // Refused now (the right, the Tenant or its subscription moved while the session was opened): it is not left payable,
      // nor recorded as payable by a retry that gets it back (a 503 releases the Idempotency-Key).
      if (refusedUnderLock(err) && !(await expireUnlessPaid(stripe, log, session.id))) await recordClosedCheckoutSession(db, tenant.id, own, ctx.now);
      throw err;
    });
  for (const id of await listSupersededCheckoutSessions(db, tenant.id, ctx.now)) {
    if (!(await expireUnlessPaid(stripe, log, id))) {
      await closeCheckoutSession(db, id, ctx.now);
      continue;
    }
    // Paid, its completion not applied yet: the Tenant is subscribing. The paid session's row stays
    // until its completion is applied (a checkout after this one is refused too); this one's is closed.
    await expireUnlessPaid(stripe, log, session.id);
    await closeCheckoutSession(db, session.id, ctx.now);
    throw subscriptionExists(tenant, SUBSCRIBING);
  }
  return payableCheckout(db, ctx.now, tenant, own);
}

/**
 * What the client is handed: its own session while it is the Tenant's current one; else a checkout
 * of the Tenant recorded after it, at once, superseded it (expired by this request or that one) and
 * the client gets the current one's URL. Never an expired URL: with no current session whose URL is
 * recorded (one recorded by the release before 0040; or none, the other refused, an earlier session
 * being paid), 409 subscription_exists.
 */
async function payableCheckout(db: Queryable, now: Date, tenant: CheckoutTenant, own: CheckoutSessionRow): Promise<HostedSession> {
  const current = await findCurrentCheckoutSession(db, tenant.id, now);
  const payable = current?.id === own.id ? own : current;
  if (!payable?.url) {
    throw subscriptionExists(tenant, 'A checkout of this Tenant started at the same time superseded this one, and its URL is not known here: pay through that checkout, or start a new one.');
  }
  return { url: payable.url, expires_at: payable.expires_at.toISOString() };
}

/** Expires a checkout session at the processor; true when it is not open because it was paid. */
function expireUnlessPaid(stripe: Stripe, log: FastifyBaseLogger, id: string): Promise<boolean> {
  return callProcessor(log, 'checkout.sessions.expire', async () => {
    try {
      await stripe.checkout.sessions.expire(id);
      return false;
    } catch (err) {
      if (!(err instanceof Stripe.errors.StripeInvalidRequestError)) throw err;
    }
    // Refused: not open any more, paid (complete) or expired already; or unknown to the processor.
    const found = await stripe.checkout.sessions.retrieve(id).catch((err: unknown) => {
      if (err instanceof Stripe.errors.StripeInvalidRequestError) return null;
      throw err;
    });
    return found?.status === 'complete';
  });
}
