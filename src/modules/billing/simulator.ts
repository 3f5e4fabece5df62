// The local payment-processor simulator (no STRIPE_SECRET_KEY): hosted checkout and portal pages
// whose buttons build processor events, sign them with STRIPE_WEBHOOK_SECRET exactly as Stripe
// does, and hand them to the same receiver as POST /v1/billing/processor-events.
import type { Deps } from '../../context.js';
import { addSeconds, toUnixSeconds } from '../../clock.js';
import { SIMULATOR_WEBHOOK_SECRET } from '../../config.js';
import { findTenantRecord, type TenantRecord } from '../tenancy/service.js';
import { Stripe } from './processor.js';
import { receiveProcessorEvent } from './events.js';
import type { EventOutcome } from './apply.js';
import { completeSimCheckout, findFinishedSimCheckout, findOpenSimSession, finishSimSession, simId, type SimSessionRow } from './simulator-store.js';

export const PORTAL_ACTIONS = ['cancel_at_period_end', 'resume', 'cancel_now', 'payment_failed', 'payment_succeeded'] as const;
export type PortalAction = (typeof PORTAL_ACTIONS)[number];

const PERIOD_SECONDS = 30 * 24 * 3600;

/** Signs an event with the webhook secret at the service clock and delivers it through the real receiver. */
export async function deliverSimulatedEvent(deps: Deps, type: string, object: Record<string, unknown>, requestId: string | null): Promise<EventOutcome> {
  const created = toUnixSeconds(deps.clock.now());
  const payload = JSON.stringify({ id: simId('evt'), object: 'event', api_version: null, created, livemode: false, type, data: { object } });
  const header = Stripe.webhooks.generateTestHeaderString({ payload, secret: deps.config.stripeWebhookSecret ?? SIMULATOR_WEBHOOK_SECRET, timestamp: created });
  return receiveProcessorEvent(deps, payload, header, requestId);
}

interface SimSubscription {
  id: string;
  customer: string;
  tenantId: string;
  plan: string;
  status: string;
  start: Date;
  end: Date;
  cancelAtPeriodEnd: boolean;
}

/** A subscription object shaped like Stripe's: metadata.tenant_id, and the plan as its price's lookup_key. */
function subscriptionObject(s: SimSubscription): Record<string, unknown> {
  const period = { current_period_start: toUnixSeconds(s.start), current_period_end: toUnixSeconds(s.end) };
  return {
    id: s.id,
    object: 'subscription',
    status: s.status,
    customer: s.customer,
    cancel_at_period_end: s.cancelAtPeriodEnd,
    currency: 'usd',
    metadata: { tenant_id: s.tenantId },
    ...period,
    items: { object: 'list', data: [{ id: `si_${s.id}`, object: 'subscription_item', quantity: 1, ...period, price: { id: `price_sim_${s.plan}`, lookup_key: s.plan, currency: 'usd' } }] },
  };
}

function currentSubscription(tenant: TenantRecord, now: Date): SimSubscription {
  return {
    id: tenant.stripe_subscription_id!,
    customer: tenant.stripe_customer_id!,
    tenantId: tenant.id,
    plan: tenant.processor_plan ?? tenant.plan,
    status: tenant.subscription_status,
    start: tenant.current_period_start ?? now,
    end: tenant.current_period_end ?? addSeconds(now, PERIOD_SECONDS),
    cancelAtPeriodEnd: tenant.cancel_at_period_end,
  };
}

/** Pays a simulated checkout: the subscription starts (active) and the session completes; returns success_url. */
export async function completeSimulatedCheckout(deps: Deps, id: string, requestId: string | null): Promise<string | null> {
  const db = deps.database.scoped('system');
  const now = deps.clock.now();
  const subscription = simId('sub');
  // Paid and recorded as subscribing at once: a checkout before the subscription's event is applied is 409.
  const session = await db.transaction((tx) => completeSimCheckout(tx, id, subscription, now));
  // Paid already (a double click, back and resubmit): where the first click went, nothing applied again.
  if (!session) return (await findFinishedSimCheckout(db, id, 'completed', now))?.success_url ?? null;
  const tenant = await findTenantRecord(db, session.tenant_id);
  if (!tenant) return null;
  const customer = tenant.stripe_customer_id ?? simId('cus');
  const sub = { id: subscription, customer, tenantId: tenant.id, plan: session.plan ?? 'team', status: 'active', start: now, end: addSeconds(now, PERIOD_SECONDS), cancelAtPeriodEnd: false };
  await deliverSimulatedEvent(deps, 'customer.subscription.created', subscriptionObject(sub), requestId);
  await deliverSimulatedEvent(
    deps,
    'checkout.session.completed',
    {
      id: session.id,
      object: 'checkout.session',
      mode: 'subscription',
      status: 'complete',
      payment_status: 'paid',
      client_reference_id: tenant.id,
      metadata: { tenant_id: tenant.id },
      customer,
      customer_email: session.customer_email,
      subscription,
    },
    requestId,
  );
  return session.success_url;
}

/** Abandons a simulated checkout; nothing changes. Returns cancel_url. */
export async function cancelSimulatedCheckout(deps: Deps, id: string): Promise<string | null> {
  const db = deps.database.scoped('system');
  const now = deps.clock.now();
  const session = (await finishSimSession(db, id, 'cancelled', now)) ?? (await findFinishedSimCheckout(db, id, 'cancelled', now));
  return session?.cancel_url ?? null;
}

export async function openSimSession(deps: Deps, kind: 'checkout' | 'portal', id: string): Promise<{ session: SimSessionRow; tenant: TenantRecord } | null> {
  const db = deps.database.scoped('system');
  const session = await findOpenSimSession(db, kind, id, deps.clock.now());
  const tenant = session && (await findTenantRecord(db, session.tenant_id));
  return session && tenant ? { session, tenant } : null;
}

/** What the simulated customer portal can do: cancel at period end (or undo), cancel now, and fail or pay an invoice. */
export async function runPortalAction(deps: Deps, id: string, action: PortalAction, requestId: string | null): Promise<boolean> {
  const open = await openSimSession(deps, 'portal', id);
  if (!open) return false;
  const { tenant } = open;
  if (!tenant.stripe_subscription_id || !tenant.stripe_customer_id) return true;
  const now = deps.clock.now();
  const sub = currentSubscription(tenant, now);
  const invoice = {
    id: simId('in'),
    object: 'invoice',
    customer: sub.customer,
    subscription: sub.id,
    parent: { type: 'subscription_details', subscription_details: { subscription: sub.id, metadata: { tenant_id: tenant.id } } },
  };
  if (action === 'cancel_at_period_end' || action === 'resume') {
    await deliverSimulatedEvent(deps, 'customer.subscription.updated', subscriptionObject({ ...sub, cancelAtPeriodEnd: action === 'cancel_at_period_end' }), requestId);
  } else if (action === 'cancel_now') {
    await deliverSimulatedEvent(deps, 'customer.subscription.deleted', { ...subscriptionObject({ ...sub, status: 'canceled' }), canceled_at: toUnixSeconds(now) }, requestId);
  } else {
    await deliverSimulatedEvent(deps, action === 'payment_failed' ? 'invoice.payment_failed' : 'invoice.paid', invoice, requestId);
  }
  return true;
}
