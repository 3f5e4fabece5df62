import type { App } from '../types.js';
import type { Deps } from '../../context.js';
import { ctxOf } from '../../http/gate.js';
import { getUsage } from '../tenancy/service.js';
import { TenantIdParam, Usage } from '../tenancy/schemas.js';
import { CheckoutBody, HostedSession, PortalBody, Received, Subscription } from './schemas.js';
import { getSubscription } from './subscription.js';
import { createCheckoutSession, createPortalSession } from './sessions.js';
import { receiveProcessorEvent } from './events.js';
import { simulatorRoutes } from './simulator-routes.js';

const tags = ['Billing'];

export function billingRoutes(app: App, deps: Deps): void {
  if (deps.config.stripeSecretKey && deps.config.stripeWebhookSecret === null) {
    deps.log.error('STRIPE_SECRET_KEY is set but STRIPE_WEBHOOK_SECRET is not: every processor event is refused (400 invalid_signature) until it is set');
  }
  app.get('/v1/tenants/:id/subscription', {
    schema: { summary: "The Tenant's platform subscription", tags, params: TenantIdParam, response: { 200: Subscription } },
    config: { meta: { auth: 'user', errors: ['tenant_not_found', 'forbidden'] } },
    handler: (request) => getSubscription(ctxOf(deps, request), request.params.id),
  });
  app.get('/v1/tenants/:id/usage', {
    schema: { summary: "The Tenant's usage against its plan's limits, and the plans it fits", tags, params: TenantIdParam, response: { 200: Usage } },
    config: { meta: { auth: 'user', errors: ['tenant_not_found', 'forbidden'] } },
    handler: (request) => getUsage(ctxOf(deps, request), request.params.id),
  });
  app.post('/v1/tenants/:id/billing/checkout-sessions', {
    schema: {
      summary: 'Start a hosted checkout to subscribe to Team',
      description: 'The plan changes when the processor confirms the payment: poll the subscription until plan is team.',
      tags,
      params: TenantIdParam,
      body: CheckoutBody,
      response: { 201: HostedSession },
    },
    config: {
      meta: {
        auth: 'user',
        idempotency: 'required',
        errors: ['tenant_not_found', 'forbidden', 'plan_requires_sales', 'subscription_exists', 'billing_unavailable', 'service_unavailable'],
      },
    },
    handler: async (request, reply) => {
      const key = request.headers['idempotency-key'];
      const session = await createCheckoutSession(ctxOf(deps, request), request.params.id, request.body, Array.isArray(key) ? key[0] : key);
      reply.code(201);
      return session;
    },
  });
  app.post('/v1/tenants/:id/billing/portal-sessions', {
    schema: { summary: 'Open the hosted customer portal (payment method, invoices, cancel)', tags, params: TenantIdParam, body: PortalBody, response: { 201: HostedSession } },
    config: { meta: { auth: 'user', idempotency: 'optional', errors: ['tenant_not_found', 'forbidden', 'no_billing_account', 'billing_unavailable'] } },
    handler: async (request, reply) => {
      const session = await createPortalSession(ctxOf(deps, request), request.params.id, request.body);
      reply.code(201);
      return session;
    },
  });

  // Stripe signs the exact bytes it sends, so this route alone takes its body raw.
  app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', { parseAs: 'buffer' }, (_request, body, done) => done(null, body));
    scope.post('/v1/billing/processor-events', {
      schema: {
        summary: "The payment processor's signed events (Stripe-Signature)",
        description: 'Verified with STRIPE_WEBHOOK_SECRET; applied once per event id; stale events never move a subscription backwards; unknown types are acknowledged.',
        tags,
        response: { 200: Received },
      },
      config: { meta: { auth: 'none', errors: ['invalid_signature', 'malformed_json'] } },
      handler: async (request) => {
        await receiveProcessorEvent(deps, request.body as Buffer | undefined, request.headers['stripe-signature'], request.id);
        return { received: true };
      },
    });
  });

  if (!deps.config.stripeSecretKey) simulatorRoutes(app, deps);
}
