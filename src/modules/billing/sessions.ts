import { createHash } from 'node:crypto';
import type { FastifyBaseLogger } from 'fastify';
import { requestLog, rightMayHaveMoved, type Ctx } from '../../context.js';
import type { Queryable } from '../../db/types.js';
import { ApiError, invalidField } from '../../errors.js';
import { addSeconds } from '../../clock.js';
import { parseUrlAsSent } from '../../http/validation.js';
import { assertTenantWritable, tenantFor } from '../tenancy/service.js';
import { callProcessor, processorClient, Stripe } from './processor.js';
import { CHECKOUT_ALLOWED, lockForCheckout, subscriptionExists, supersedeEarlierCheckouts } from './checkouts.js';
import { createSimulatedSession } from './simulator-store.js';
import { findUserEmail } from './store.js';
import type { CheckoutBody, HostedSession, PortalBody } from './schemas.js';

/** Stripe portal sessions carry no expiry; they are short-lived, so we promise five minutes. */
const PORTAL_SESSION_SECONDS = 300;

function validateUrl(path: string, value: string, protocols: string[]): void {
  const url = parseUrlAsSent(value);
  if (!url) throw invalidField(path, 'must be an absolute URL (no white space or control characters)');
  if (!protocols.includes(url.protocol)) throw invalidField(path, `must use ${protocols.map((p) => p.replace(':', '')).join(' or ')}`);
  if (url.username || url.password) throw invalidField(path, 'must not carry credentials');
}

/**
 * Reads for the billing verbs go through the request's mode connection, not its (idempotency)
 * transaction, so no transaction is open while the processor is called.
 */
const readHandle = (ctx: Ctx): Queryable => ctx.deps.database.scoped(ctx.mode);

async function callerEmail(db: Queryable, ctx: Ctx): Promise<string | null> {
  if (ctx.actor.type !== 'user') return null;
  return findUserEmail(db, ctx.actor.userId);
}

/**
 * POST /v1/tenants/{id}/billing/checkout-sessions (owner; Idempotency-Key required). The plan only
 * changes when the processor's event arrives; a retry with the same key is replayed by the gate.
 */
export async function createCheckoutSession(ctx: Ctx, tenantId: string, body: CheckoutBody, idempotencyKey: string | undefined): Promise<HostedSession> {
  validateUrl('success_url', body.success_url, ['https:']);
  validateUrl('cancel_url', body.cancel_url, ['https:']);
  const db = readHandle(ctx);
  // Who may act comes before what the plan allows: a stranger learns nothing (404), even about Enterprise.
  const { tenant } = await tenantFor(ctx, tenantId, ['owner'], db);
  if (body.plan === 'enterprise') throw new ApiError('plan_requires_sales', { details: { plan: body.plan } });
  // Upgrading mid-migration would change the Tenant under the migration: a write like any other.
  await assertTenantWritable(db, tenant.id);
  if (!CHECKOUT_ALLOWED.has(tenant.subscription_status)) {
    throw subscriptionExists(tenant);
  }
  const email = await callerEmail(db, ctx);
  const stripe = processorClient(ctx.deps.config);
  if (!stripe) {
    // ctx.db is the request's transaction: the right read again under the locks holds to its end.
    await lockForCheckout(ctx.db, ctx, tenant.id);
    return createSimulatedSession(ctx.db, ctx, { kind: 'checkout', tenantId: tenant.id, plan: body.plan, successUrl: body.success_url, cancelUrl: body.cancel_url, customerEmail: email });
  }
  const log = requestLog(ctx.deps, ctx.requestId);
  const prices = await callProcessor(log, 'prices.list', () => stripe.prices.list({ lookup_keys: [body.plan], active: true, limit: 1 }));
  const price = prices.data[0];
  if (!price) {
    log.error({ lookup_key: body.plan }, 'no active processor price has this lookup_key');
    throw new ApiError('billing_unavailable', { message: `No processor price is set up for the ${body.plan} plan.`, details: { operation: 'prices.list', reason: 'processor_error' }, headers: { 'retry-after': '30' } });
  }
  const session = await callProcessor(log, 'checkout.sessions.create', () =>
    stripe.checkout.sessions.create(
      {
        mode: 'subscription',
        line_items: [{ price: price.id, quantity: 1 }],
        success_url: body.success_url,
        cancel_url: body.cancel_url,
        client_reference_id: tenant.id,
        metadata: { tenant_id: tenant.id },
        subscription_data: { metadata: { tenant_id: tenant.id } },
        ...(tenant.stripe_customer_id ? { customer: tenant.stripe_customer_id } : email ? { customer_email: email } : {}),
      },
      idempotencyKey ? { idempotencyKey: processorIdempotencyKey(ctx, tenant.id, idempotencyKey) } : undefined,
    ),
  );
  if (!session.url) throw new ApiError('billing_unavailable', { message: 'The processor returned no checkout URL.', details: { operation: 'checkout.sessions.create', reason: 'processor_error' }, headers: { 'retry-after': '30' } });
  return supersedeEarlierCheckouts(ctx, stripe, log, tenant, session);
}

/** The client's Idempotency-Key, scoped to the caller and Tenant so keys of different callers never meet at the processor. */
export function processorIdempotencyKey(ctx: Ctx, tenantId: string, key: string): string {
  const caller = ctx.actor.type === 'user' ? ctx.actor.userId : 'anonymous';
  return `checkout_${createHash('sha256').update(`${caller}\u0000${tenantId}\u0000${key}`).digest('hex')}`;
}

/** The metadata value naming the service's portal configuration in the processor account. */
const PORTAL_CONFIGURATION = 'platform_portal_v1';
const portalConfigurations = new WeakMap<Stripe, Promise<string>>();

/**
 * The processor's portal configuration sessions open under, so the hosted portal offers what Part B
 * says it does (payment method update, invoice view, cancel at period end; no plan switching)
 * whatever the account's default portal allows: found by its metadata (reactivated if it was
 * deactivated), else created once; the id is kept per client. A failure is not kept: the next
 * session looks again.
 */
function portalConfiguration(stripe: Stripe, log: FastifyBaseLogger): Promise<string> {
  let pending = portalConfigurations.get(stripe);
  if (!pending) {
    pending = (async () => {
      const { data } = await callProcessor(log, 'billing_portal.configurations.list', () => stripe.billingPortal.configurations.list({ limit: 100 }));
      const ours = data.filter((c) => c.metadata?.platform_portal === PORTAL_CONFIGURATION);
      const found = ours.find((c) => c.active) ?? ours[0];
      if (found && !found.active) {
        await callProcessor(log, 'billing_portal.configurations.update', () => stripe.billingPortal.configurations.update(found.id, { active: true }));
      }
      if (found) return found.id;
      const created = await callProcessor(log, 'billing_portal.configurations.create', () =>
        stripe.billingPortal.configurations.create(
          {
            features: {
              payment_method_update: { enabled: true },
              invoice_history: { enabled: true },
              subscription_cancel: { enabled: true, mode: 'at_period_end' },
              subscription_update: { enabled: false },
              customer_update: { enabled: false },
            },
            metadata: { platform_portal: PORTAL_CONFIGURATION },
          },
          { idempotencyKey: PORTAL_CONFIGURATION },
        ),
      );
      return created.id;
    })();
    portalConfigurations.set(stripe, pending);
    pending.catch(() => portalConfigurations.delete(stripe));
  }
  return pending;
}

/** POST /v1/tenants/{id}/billing/portal-sessions (owner or billing.manage); 409 no_billing_account before a first payment. */
export async function createPortalSession(ctx: Ctx, tenantId: string, body: PortalBody): Promise<HostedSession> {
  validateUrl('return_url', body.return_url, ['https:', 'http:']);
  const db = readHandle(ctx);
  const { tenant } = await tenantFor(ctx, tenantId, ['owner', 'billing.manage'], db);
  if (!tenant.stripe_customer_id) throw new ApiError('no_billing_account', { details: { tenant_id: tenant.id } });
  const stripe = processorClient(ctx.deps.config);
  if (!stripe) {
    return createSimulatedSession(ctx.db, ctx, { kind: 'portal', tenantId: tenant.id, returnUrl: body.return_url, customerEmail: await callerEmail(db, ctx) });
  }
  const customer = tenant.stripe_customer_id;
  const log = requestLog(ctx.deps, ctx.requestId);
  const open = async () => stripe.billingPortal.sessions.create({ customer, return_url: body.return_url, configuration: await portalConfiguration(stripe, log) });
  const session = await callProcessor(log, 'billing_portal.sessions.create', () =>
    open().catch((err) => {
      // The configuration kept may have been deactivated at the processor since it was found: look
      // it up again (which reactivates it) and try once more.
      if (!(err instanceof Stripe.errors.StripeInvalidRequestError)) throw err;
      portalConfigurations.delete(stripe);
      return open();
    }),
  );
  // The owner's right is read again before the URL is handed out: an org_admin demoted or removed while
  // the processor opened the session gets a stranger's answer, and the URL (which could cancel the
  // subscription; the processor cannot expire a portal session) goes to no one.
  if (rightMayHaveMoved(ctx.actor, 'billing.manage')) await tenantFor(ctx, tenant.id, ['owner', 'billing.manage'], db);
  return { url: session.url, expires_at: addSeconds(ctx.now, PORTAL_SESSION_SECONDS).toISOString() };
}
