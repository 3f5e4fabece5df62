import { requestLog, type Ctx, type Deps } from '../../context.js';
import type { Tx } from '../../db/types.js';
import { asModeWithin } from '../../db/roles.js';
import { recordAudit } from '../../audit/record.js';
import { releaseSeatLimits } from '../tenancy/seats.js';
import { basePlan, measureUsage, planFits, type Plan } from '../tenancy/plans.js';
import { findTenantRecord, tenantModeOf, type TenantRecord } from '../tenancy/service.js';
import { CHECKOUT_ALLOWED } from './checkouts.js';
import { deleteCheckoutSession, dropCompletedCheckouts, markCheckoutSessionCompleted } from './checkout-store.js';
import { ApiError } from '../../errors.js';
import { isStorableDateTime } from '../../http/validation.js';
import { findTenantIdBy, insertProcessorEvent, updateLastProcessorEventCreated, updateProcessorEventOutcome, updateTenantSubscription } from './store.js';

type Obj = Record<string, any>;
export interface ProcessorEvent {
  id: string;
  type: string;
  /** Unix seconds: the order of events, since the processor does not deliver in order. */
  created: number;
  data: { object: Obj };
}
export type EventOutcome = 'applied' | 'stale' | 'ignored' | 'duplicate';

/** Lapsed subscriptions drop the Tenant to its base plan (basePlan); entitled ones give it the subscription's plan. */
export const LAPSED = new Set(['canceled', 'unpaid', 'incomplete_expired']);
const ENTITLED = new Set(['active', 'trialing', 'past_due']);
/** Final in the processor: a canceled or expired subscription never comes back (a new one is checked out). */
const FINAL = new Set(['canceled', 'incomplete_expired']);
const PLAN_KEYS = new Set(['team', 'enterprise']);
const ADD_ON_KEYS = new Set(['isolated_tenancy', 'dedicated_region_tenancy']);
const SUBSCRIPTION_EVENTS = new Set(['customer.subscription.created', 'customer.subscription.updated', 'customer.subscription.deleted']);
const HANDLED = new Set([...SUBSCRIPTION_EVENTS, 'checkout.session.completed', 'invoice.payment_failed', 'invoice.paid']);

/**
 * Whether a Tenant in `status` stays restricted while its usage exceeds its base plan: a lapse
 * restricts; only an entitled subscription (or usage that fits) lifts it. A subscription not yet paid
 * (incomplete, paused) keeps the Tenant on its base plan, so it keeps an existing restriction.
 */
export const restrictionHolds = (status: string, restricted: boolean): boolean => LAPSED.has(status) || (restricted && !ENTITLED.has(status));

/** The processor's ids are at most 255 characters: a longer one is none of its ids, and could not be stored and indexed. */
export const PROCESSOR_ID_MAX_LENGTH = 255;
/** 400 for a signed event the service cannot take as sent (nothing is applied or recorded). */
export const malformedEvent = (message: string) => new ApiError('bad_request', { message: `The event is malformed: ${message}.` });

const idOf = (v: unknown): string | null => {
  const id = typeof v === 'string' ? v : v && typeof v === 'object' && typeof (v as Obj).id === 'string' ? (v as Obj).id : null;
  if (id !== null && id.length > PROCESSOR_ID_MAX_LENGTH) throw malformedEvent(`an id is longer than ${PROCESSOR_ID_MAX_LENGTH} characters`);
  return id;
};
const str = (v: unknown): string | null => (typeof v === 'string' && v !== '' ? v : null);

/** A subscription status as the processor writes them (lowercase words joined by _); one it adds later is kept. */
function statusOf(v: unknown): string | undefined {
  const status = str(v);
  if (status !== null && !/^[a-z_]{1,64}$/.test(status)) throw malformedEvent('its status is not a processor status');
  return status ?? undefined;
}

/** The currency as the lowercase three-letter code the subscription shows. */
function currencyOf(v: unknown): string | null {
  const currency = str(v)?.toLowerCase() ?? null;
  if (currency !== null && !/^[a-z]{3}$/.test(currency)) throw malformedEvent('its currency is not a three-letter code');
  return currency;
}

/**
 * An add-on item's amount in cents: its price's unit_amount (or unit_amount_decimal, for a price that
 * is not a whole number of cents) times its quantity, rounded to a whole number of cents from 0.
 */
function addOnAmount(item: Obj): number {
  const price = item.price ?? {};
  const decimal = price.unit_amount_decimal;
  const unit = price.unit_amount ?? (typeof decimal === 'string' && /^\d{1,20}(\.\d{1,12})?$/.test(decimal) ? Number(decimal) : decimal) ?? 0;
  const quantity = item.quantity ?? 1;
  const amount = typeof unit === 'number' && Number.isInteger(quantity) ? Math.round(unit * quantity) : NaN;
  if (!(unit >= 0) || !(quantity >= 0) || !Number.isSafeInteger(amount)) throw malformedEvent('an add-on amount is not a whole number of cents from 0');
  return amount;
}

/** Unix seconds as an instant the database stores (years 0001–9999), or null when it is none. */
export function instantOfSeconds(seconds: number): Date | null {
  const at = new Date(seconds * 1000);
  // NaN, ±Infinity and |ms| beyond 8.64e15 make an invalid Date (toISOString would throw).
  return !Number.isNaN(at.getTime()) && isStorableDateTime(at.toISOString()) ? at : null;
}
const fromSeconds = (v: unknown): Date | null => {
  if (typeof v !== 'number') return null;
  const at = instantOfSeconds(v);
  if (!at) throw malformedEvent('a period start or end is not a date the service stores');
  return at;
};

/** The subscription state an event asks for; absent fields keep their stored values. */
interface NextState {
  status?: string;
  processorPlan?: Plan | null;
  periodStart?: Date | null;
  periodEnd?: Date | null;
  cancelAtPeriodEnd?: boolean;
  addOns?: { code: string; amount: number }[];
  currency?: string | null;
  customerId?: string | null;
  subscriptionId?: string | null;
  /** The subscription whose own event states `status` (subscription events only). */
  statusOf?: string | null;
}

/** Where an event points: the Tenant (metadata.tenant_id / client_reference_id), else its processor ids. */
function locate(event: ProcessorEvent): { tenantId: string | null; subscriptionId: string | null; customerId: string | null } {
  const o = event.data.object;
  if (event.type.startsWith('checkout.session.')) {
    return { tenantId: str(o.metadata?.tenant_id) ?? str(o.client_reference_id), subscriptionId: idOf(o.subscription), customerId: idOf(o.customer) };
  }
  if (event.type.startsWith('invoice.')) {
    const details = o.parent?.subscription_details ?? o.subscription_details;
    return { tenantId: str(details?.metadata?.tenant_id) ?? str(o.metadata?.tenant_id), subscriptionId: idOf(o.subscription) ?? idOf(details?.subscription), customerId: idOf(o.customer) };
  }
  return { tenantId: str(o.metadata?.tenant_id), subscriptionId: idOf(o.id), customerId: idOf(o.customer) };
}

async function findEventTenant(tx: Tx, where: ReturnType<typeof locate>): Promise<TenantRecord | null> {
  if (where.tenantId) {
    const tenant = await findTenantRecord(tx, where.tenantId, true);
    if (tenant) return tenant;
  }
  for (const [column, value] of [['stripe_subscription_id', where.subscriptionId], ['stripe_customer_id', where.customerId]] as const) {
    if (!value) continue;
    const id = await findTenantIdBy(tx, column, value);
    if (id) return findTenantRecord(tx, id, true);
  }
  return null;
}

/** The state a subscription object describes: status, the plan of its price's lookup_key, period, add-ons. */
function fromSubscription(o: Obj, deleted: boolean): NextState {
  const items: Obj[] = Array.isArray(o.items?.data) ? o.items.data : [];
  const keyOf = (item: Obj) => str(item?.price?.lookup_key);
  const planItem = items.find((i) => PLAN_KEYS.has(keyOf(i) ?? ''));
  const periodFrom = planItem ?? items[0];
  return {
    // No status on the object: the status stays as it is (never the text "undefined").
    status: deleted ? 'canceled' : statusOf(o.status),
    processorPlan: planItem ? (keyOf(planItem) as Plan) : null,
    periodStart: fromSeconds(o.current_period_start ?? periodFrom?.current_period_start),
    periodEnd: fromSeconds(o.current_period_end ?? periodFrom?.current_period_end),
    cancelAtPeriodEnd: o.cancel_at_period_end === true,
    addOns: items.filter((i) => ADD_ON_KEYS.has(keyOf(i) ?? '')).map((i) => ({ code: keyOf(i)!, amount: addOnAmount(i) })),
    currency: currencyOf(o.currency),
    customerId: idOf(o.customer),
    subscriptionId: idOf(o.id),
  };
}

/** The event names a subscription other than the Tenant's current one. */
const ofOtherSubscription = (tenant: TenantRecord, where: ReturnType<typeof locate>): boolean =>
  !!where.subscriptionId && !!tenant.stripe_subscription_id && where.subscriptionId !== tenant.stripe_subscription_id;

/** What the event asks of this Tenant, or null when it does not concern its current subscription. */
function nextStateOf(event: ProcessorEvent, tenant: TenantRecord, where: ReturnType<typeof locate>): NextState | null {
  const o = event.data.object;
  const other = ofOtherSubscription(tenant, where);
  // Another subscription may replace the current one only when the current one is not live.
  const replaceable = CHECKOUT_ALLOWED.has(tenant.subscription_status);
  switch (event.type) {
    case 'checkout.session.completed':
      // A second checkout paid while the current subscription is live names a subscription that is
      // ignored: its customer is not the Tenant's either (the portal must stay on the live one).
      if (other && !replaceable) return { customerId: null, subscriptionId: null };
      return { customerId: where.customerId, subscriptionId: replaceable ? where.subscriptionId : null };
    case 'customer.subscription.created':
    case 'customer.subscription.updated':
    case 'customer.subscription.deleted': {
      if (other && (event.type === 'customer.subscription.deleted' || !replaceable)) return null;
      const next = fromSubscription(o, event.type === 'customer.subscription.deleted');
      // An unpaid subscription may still be paid (invoice.paid brings it back): only a subscription
      // that entitles replaces it, never one that lapsed or is not yet paid.
      if (other && tenant.subscription_status === 'unpaid' && !ENTITLED.has(next.status ?? '')) return null;
      return next.status === undefined ? next : { ...next, statusOf: where.subscriptionId };
    }
    // An invoice of no subscription (a one-off invoice to the same customer) says nothing about it.
    case 'invoice.payment_failed':
      if (!where.subscriptionId || other || !['active', 'trialing'].includes(tenant.subscription_status)) return null;
      return { status: 'past_due' };
    case 'invoice.paid':
      if (!where.subscriptionId || other || !['past_due', 'unpaid', 'incomplete'].includes(tenant.subscription_status)) return null;
      return { status: 'active' };
  }
  return null;
}

/**
 * An invoice event of the current subscription that finds the status it states already in place
 * (paid while active, failed while past_due) confirms that status as of its created: an older event
 * arriving later is stale, as it would be had this one changed the status.
 */
function confirmsState(event: ProcessorEvent, tenant: TenantRecord, where: ReturnType<typeof locate>): boolean {
  if (!where.subscriptionId || ofOtherSubscription(tenant, where)) return false;
  return (event.type === 'invoice.paid' && tenant.subscription_status === 'active')
    || (event.type === 'invoice.payment_failed' && tenant.subscription_status === 'past_due');
}

/**
 * An event of the subscription whose own event set the Tenant's status that cannot be newer than that
 * status, whatever its created says (whole seconds: the events of one checkout or one cancellation
 * often share a second): customer.subscription.created is the first word on a subscription, and
 * canceled and incomplete_expired are final in the processor.
 */
function supersededBySameSubscription(event: ProcessorEvent, tenant: TenantRecord, where: ReturnType<typeof locate>): boolean {
  if (!SUBSCRIPTION_EVENTS.has(event.type) || !where.subscriptionId || where.subscriptionId !== tenant.status_subscription_id) return false;
  return event.type === 'customer.subscription.created' || FINAL.has(tenant.subscription_status);
}

/**
 * Applies one processor event exactly once (its id is recorded in the same transaction) and never
 * moves a subscription backwards: an event created before the last applied (or confirming) one is stale,
 * and so is one its own subscription's state has already superseded.
 */
export async function applyProcessorEvent(deps: Deps, event: ProcessorEvent, requestId: string | null): Promise<EventOutcome> {
  return deps.database.scoped('system').transaction(async (tx) => {
    const now = deps.clock.now();
    const created = new Date(event.created * 1000);
    if ((await insertProcessorEvent(tx, event.id, event.type, created, now)) === 0) return 'duplicate';
    if (!HANDLED.has(event.type)) return 'ignored';
    const where = locate(event);
    const tenant = await findEventTenant(tx, where);
    // After the Tenant is locked: a checkout takes the Tenant, then its sessions' rows.
    if (event.type === 'checkout.session.completed' && typeof event.data.object.id === 'string') await settleCompletedCheckout(tx, event.data.object.id, tenant, where, now);
    if (!tenant) {
      requestLog(deps, requestId).warn({ event_id: event.id, event_type: event.type, ...where }, 'processor event for no known Tenant');
      return 'ignored';
    }
    const stale = (!!tenant.last_processor_event_created && created.getTime() < tenant.last_processor_event_created.getTime())
      || supersededBySameSubscription(event, tenant, where);
    const next = stale ? null : nextStateOf(event, tenant, where);
    // An invoice event stating the status already in place changes nothing but is applied for the
    // order: older events arriving after it are stale.
    const confirms = !stale && !next && confirmsState(event, tenant, where);
    const outcome: EventOutcome = stale ? 'stale' : next || confirms ? 'applied' : 'ignored';
    if (next) {
      const ctx: Ctx = { deps, actor: { type: 'system' }, mode: await tenantModeOf(tx, tenant), db: tx, requestId, ip: null, userAgent: null, now };
      // Linking ids says nothing about the subscription's state, so it does not advance the order.
      await writeState(tx, ctx, tenant, next, event.type === 'checkout.session.completed' ? null : created);
      // The subscription's own event is applied: a checkout completed for it no longer makes the Tenant subscribing.
      if (SUBSCRIPTION_EVENTS.has(event.type) && where.subscriptionId) await dropCompletedCheckouts(tx, tenant.id, where.subscriptionId);
    } else if (confirms) {
      await updateLastProcessorEventCreated(tx, tenant.id, created);
    }
    await updateProcessorEventOutcome(tx, event.id, tenant.id, outcome);
    return outcome;
  });
}

/**
 * A completed checkout session is no longer one a later checkout expires (src/modules/billing/checkouts.ts).
 * Its row goes once its subscription's own event has set the Tenant's status (or it names none to wait
 * for); else, the completion applied first (Stripe's events come in any order), it stays marked
 * completed: the Tenant is subscribing, and a checkout meanwhile is 409 subscription_exists.
 */
async function settleCompletedCheckout(tx: Tx, id: string, tenant: TenantRecord | null, where: ReturnType<typeof locate>, now: Date): Promise<void> {
  if (!tenant || !where.subscriptionId || tenant.status_subscription_id === where.subscriptionId) await deleteCheckoutSession(tx, id);
  else await markCheckoutSessionCompleted(tx, id, where.subscriptionId, now);
}

async function writeState(tx: Tx, ctx: Ctx, tenant: TenantRecord, next: NextState, created: Date | null): Promise<void> {
  const status = next.status ?? tenant.subscription_status;
  const processorPlan = next.processorPlan !== undefined ? next.processorPlan : tenant.processor_plan;
  const lapsed = LAPSED.has(status);
  const plan: Plan = ENTITLED.has(status) ? (processorPlan ?? tenant.plan) : lapsed ? basePlan(tenant) : tenant.plan;
  // Usage as the Tenant's own mode counts it (GET usage, seat-sync): the other mode's rows are not its own.
  const usage = restrictionHolds(status, tenant.restricted)
    ? await asModeWithin(tx, await tenantModeOf(tx, tenant), () => measureUsage(tx, tenant.id, ctx.now))
    : null;
  const restricted = usage !== null && !planFits(basePlan(tenant), usage);
  const keep = <K extends keyof NextState>(key: K, stored: NextState[K]) => (next[key] !== undefined ? next[key] : stored);
  await updateTenantSubscription(tx, {
    tenantId: tenant.id, plan, status, processorPlan, restricted, customerId: next.customerId ?? null, subscriptionId: next.subscriptionId ?? null,
    periodStart: keep('periodStart', tenant.current_period_start), periodEnd: keep('periodEnd', tenant.current_period_end),
    cancelAtPeriodEnd: keep('cancelAtPeriodEnd', tenant.cancel_at_period_end), addOns: JSON.stringify(keep('addOns', tenant.add_ons)),
    currency: keep('currency', tenant.currency) ?? tenant.currency, created, now: ctx.now, statusOf: next.statusOf ?? null,
  });
  const audit = { target: { type: 'tenant', id: tenant.id }, tenantId: tenant.id, organizationId: tenant.owner_organization_id };
  if (plan !== tenant.plan) {
    await recordAudit(tx, ctx, { action: 'tenant.plan_changed', ...audit, before: { plan: tenant.plan }, after: { plan } });
    await releaseSeatLimits(tx, ctx, tenant.id);
  }
  if (status !== tenant.subscription_status) {
    await recordAudit(tx, ctx, {
      action: 'tenant.subscription_status_changed',
      ...audit,
      before: { subscription_status: tenant.subscription_status, restricted: tenant.restricted },
      after: { subscription_status: status, restricted },
    });
  }
}
