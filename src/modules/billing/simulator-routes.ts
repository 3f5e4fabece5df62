import { Type } from '@sinclair/typebox';
import type { FastifyReply } from 'fastify';
import type { App } from '../types.js';
import type { Deps } from '../../context.js';
import { PORTAL_ACTIONS, cancelSimulatedCheckout, completeSimulatedCheckout, openSimSession, runPortalAction } from './simulator.js';
import { simulatorPath } from './simulator-store.js';
import { publicPathBase } from '../signin/browser.js';

// The simulator's hosted pages are part of the service only while STRIPE_SECRET_KEY is unset. They
// are listed in the OpenAPI document under their own tag so the description matches what is served.
const tags = ['Billing simulator'];
const description = 'Local payment-processor simulator, served only without STRIPE_SECRET_KEY. A hosted page for people, not part of the API.';
const SessionParam = Type.Object({ id: Type.String({ minLength: 1, maxLength: 100 }) });
const ActionParam = Type.Object({ id: Type.String({ minLength: 1, maxLength: 100 }), action: Type.Union(PORTAL_ACTIONS.map((a) => Type.Literal(a))) });
const Html = Type.String({ description: 'text/html' });
const SeeOther = Type.Null({ description: 'See Other: Location is the next page.' });
// Pages for people: every answer but the 422 envelope is text/html (or a bodyless 303).
const produces = ['text/html'];

const escape = (s: unknown) => String(s ?? '').replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

function page(reply: FastifyReply, status: number, title: string, body: string) {
  return reply
    .code(status)
    .header('cache-control', 'no-store')
    .header('content-security-policy', "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'")
    .header('x-frame-options', 'DENY')
    // The URL's session id is the page's only credential: never in a Referer (the Return link, success_url).
    .header('referrer-policy', 'no-referrer')
    .header('x-content-type-options', 'nosniff')
    .type('text/html; charset=utf-8')
    .send(
      `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>${escape(title)}</title>` +
        `<style>body{font:16px system-ui,sans-serif;max-width:36rem;margin:3rem auto;padding:0 1rem}form{display:inline-block;margin:.25rem .5rem .25rem 0}` +
        `button{font-size:1rem;padding:.5rem 1rem}.note{color:#555;font-size:.9rem}</style></head><body><h1>${escape(title)}</h1>${body}` +
        `<p class="note">Local payment-processor simulator: no STRIPE_SECRET_KEY is set, so no card is taken and no money moves.</p></body></html>`,
    );
}

const button = (action: string, label: string) => `<form method="post" action="${escape(action)}"><button type="submit">${escape(label)}</button></form>`;
/** The 303 after a button: the next page's request carries no Referer naming this session either. */
const seeOther = (reply: FastifyReply, location: string) => reply.header('referrer-policy', 'no-referrer').redirect(location, 303);
const gone = (reply: FastifyReply) => page(reply, 404, 'Session not found', '<p>This session does not exist, has expired or is already finished.</p>');

export function simulatorRoutes(app: App, deps: Deps): void {
  const meta = { auth: 'none' as const };
  // The buttons and the portal's 303 name the page as the browser reaches it: under PUBLIC_URL's path, if any.
  const base = publicPathBase(deps.config.publicUrl);
  const pagePath = (kind: 'checkout' | 'portal', id: string) => `${base}${simulatorPath(kind, id)}`;
  app.get('/billing/simulator/checkout/:id', {
    schema: { summary: 'Simulated hosted checkout page', description, tags, params: SessionParam, produces, response: { 200: Html, 404: Html } },
    config: { meta },
    handler: async (request, reply) => {
      const open = await openSimSession(deps, 'checkout', request.params.id);
      if (!open) return gone(reply);
      const path = pagePath('checkout', open.session.id);
      return page(
        reply,
        200,
        `Subscribe to the ${open.session.plan} plan`,
        `<p>Tenant <code>${escape(open.tenant.id)}</code> (now on ${escape(open.tenant.plan)}).</p>` +
          button(`${path}/complete`, 'Pay and subscribe') +
          button(`${path}/cancel`, 'Cancel'),
      );
    },
  });
  app.post('/billing/simulator/checkout/:id/complete', {
    schema: { summary: 'Complete a simulated checkout (signs and delivers the processor events)', description, tags, params: SessionParam, produces, response: { 303: SeeOther, 404: Html } },
    config: { meta },
    handler: async (request, reply) => {
      const next = await completeSimulatedCheckout(deps, request.params.id, request.id);
      return next ? seeOther(reply, next) : gone(reply);
    },
  });
  app.post('/billing/simulator/checkout/:id/cancel', {
    schema: { summary: 'Abandon a simulated checkout', description, tags, params: SessionParam, produces, response: { 303: SeeOther, 404: Html } },
    config: { meta },
    handler: async (request, reply) => {
      const next = await cancelSimulatedCheckout(deps, request.params.id);
      return next ? seeOther(reply, next) : gone(reply);
    },
  });
  app.get('/billing/simulator/portal/:id', {
    schema: { summary: 'Simulated customer portal page', description, tags, params: SessionParam, produces, response: { 200: Html, 404: Html } },
    config: { meta },
    handler: async (request, reply) => {
      const open = await openSimSession(deps, 'portal', request.params.id);
      if (!open) return gone(reply);
      const { tenant, session } = open;
      const path = pagePath('portal', session.id);
      const actions: [string, string][] = [
        [tenant.cancel_at_period_end ? 'resume' : 'cancel_at_period_end', tenant.cancel_at_period_end ? 'Keep the subscription' : 'Cancel at period end'],
        ['cancel_now', 'Cancel now'],
        ['payment_failed', 'Simulate a failed payment'],
        ['payment_succeeded', 'Simulate a paid invoice'],
      ];
      return page(
        reply,
        200,
        'Manage your subscription',
        `<p>Tenant <code>${escape(tenant.id)}</code>: plan <b>${escape(tenant.plan)}</b>, subscription ${escape(tenant.subscription_status)}` +
          (tenant.current_period_end ? `, period ends ${escape(tenant.current_period_end.toISOString())}` : '') +
          (tenant.cancel_at_period_end ? ' (cancels at period end)' : '') +
          '.</p>' +
          (tenant.stripe_subscription_id ? actions.map(([a, label]) => button(`${path}/${a}`, label)).join('') : '') +
          `<p><a href="${escape(session.return_url)}">Return</a></p>`,
      );
    },
  });
  app.post('/billing/simulator/portal/:id/:action', {
    schema: { summary: 'Act in the simulated customer portal', description, tags, params: ActionParam, produces, response: { 303: SeeOther, 404: Html } },
    config: { meta },
    handler: async (request, reply) => {
      const done = await runPortalAction(deps, request.params.id, request.params.action, request.id);
      return done ? seeOther(reply, pagePath('portal', request.params.id)) : gone(reply);
    },
  });
}
