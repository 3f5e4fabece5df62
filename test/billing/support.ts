// A loopback stand-in for the Stripe REST API (the endpoints the billing module calls), and signed
// processor events built with the stripe package, for test/billing/*.test.ts.
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import Stripe from 'stripe';
import type { TestApp } from '../helpers/app.js';
import { toUnixSeconds } from '../../src/clock.js';
import { assertStatus, createApplication, rand, sql, tenantOwner, type Caller } from '../tenancy/support.js';
import { unusedPort } from '../helpers/ports.js';

export interface ProcessorRequest {
  method: string;
  path: string;
  query: URLSearchParams;
  /** The form-encoded body, flattened: `metadata[tenant_id]` → value. */
  form: Record<string, string>;
  headers: IncomingMessage['headers'];
}

export interface FakeProcessor {
  base: string;
  requests: ProcessorRequest[];
  /** Prices by lookup_key the fake knows (team by default). */
  prices: Map<string, string>;
  /** Paths the fake refuses with a 400 invalid_request_error, as the processor refuses a request it will not serve. */
  refuse: Set<string>;
  /** When set, checkout sessions are created without a url (as a processor answer the service cannot use). */
  checkoutWithoutUrl: { on: boolean };
  /** Paths the fake answers 500 api_error with `Stripe-Should-Retry: true`, as the processor answers a passing failure. */
  busy: Set<string>;
  /** The checkout sessions created, by id: `open`, `expired` (POST …/expire) or `complete` (set by a test: paid). */
  checkoutSessions: Map<string, { status: 'open' | 'expired' | 'complete' }>;
  /** Paths whose answer waits for the promise (the request is in `requests` as it arrives): holds the service mid-way. */
  holds: Map<string, Promise<void>>;
  /** The portal configurations, as created; a test may deactivate one (`active = false`), as an operator can in the dashboard. */
  configurations: { id: string; active: boolean; metadata: Record<string, string>; form: Record<string, string> }[];
  close(): Promise<void>;
}

const json = (status: number, body: unknown) => ({ status, body });

/**
 * Answers POST /v1/checkout/sessions, GET /v1/prices, POST /v1/billing_portal/sessions (refused under an
 * inactive configuration), GET and POST /v1/billing_portal/configurations, POST
 * /v1/billing_portal/configurations/{id} (active only) and POST /v1/customers as Stripe does (shape only).
 */
export async function startFakeProcessor(): Promise<FakeProcessor> {
  const requests: ProcessorRequest[] = [];
  const prices = new Map([['team', 'price_team_monthly']]);
  const refuse = new Set<string>();
  const checkoutWithoutUrl = { on: false };
  const busy = new Set<string>();
  const holds = new Map<string, Promise<void>>();
  const byIdempotencyKey = new Map<string, { status: number; body: unknown }>();
  const checkoutSessions = new Map<string, { status: 'open' | 'expired' | 'complete' }>();
  const configurations: FakeProcessor['configurations'] = [];
  let n = 0;
  const answer = (r: ProcessorRequest): { status: number; body: unknown } => {
    const now = Math.floor(Date.now() / 1000);
    if (refuse.has(r.path)) return json(400, { error: { type: 'invalid_request_error', message: `Refused (${r.method}: ${r.path})` } });
    if (r.method === 'GET' && r.path === '/v1/prices') {
      const keys = [...r.query.entries()].filter(([k]) => k.startsWith('lookup_keys')).map(([, v]) => v);
      const data = keys.filter((k) => prices.has(k)).map((k) => ({ id: prices.get(k), object: 'price', lookup_key: k, active: true, currency: 'usd', unit_amount: 2900 }));
      return json(200, { object: 'list', data, has_more: false, url: '/v1/prices' });
    }
    if (r.method === 'POST' && r.path === '/v1/checkout/sessions') {
      const id = `cs_test_${++n}_${rand(4)}`;
      checkoutSessions.set(id, { status: 'open' });
      return json(200, { id, object: 'checkout.session', url: checkoutWithoutUrl.on ? null : `https://checkout.stripe.test/c/pay/${id}`, expires_at: now + 86_400, mode: r.form.mode, status: 'open', client_reference_id: r.form.client_reference_id });
    }
    const session = /^\/v1\/checkout\/sessions\/([^/]+)(\/expire)?$/.exec(r.path);
    if (session) {
      const [, id, expire] = session;
      const found = checkoutSessions.get(id);
      if (!found) return json(404, { error: { type: 'invalid_request_error', code: 'resource_missing', message: `No such checkout.session: '${id}'` } });
      if (r.method === 'POST' && expire) {
        if (found.status !== 'open') return json(400, { error: { type: 'invalid_request_error', message: `Only Checkout Sessions with a status in ["open"] can be expired. This Checkout Session has a status of "${found.status}".` } });
        found.status = 'expired';
      }
      if (r.method === 'GET' || expire) return json(200, { id, object: 'checkout.session', status: found.status });
    }
    if (r.method === 'POST' && r.path === '/v1/billing_portal/sessions') {
      const configuration = configurations.find((c) => c.id === r.form.configuration);
      if (r.form.configuration && !configuration?.active) {
        return json(400, { error: { type: 'invalid_request_error', param: 'configuration', message: `The configuration ${r.form.configuration} is not active.` } });
      }
      const id = `bps_test_${++n}`;
      return json(200, { id, object: 'billing_portal.session', url: `https://billing.stripe.test/p/session/${id}`, created: now, customer: r.form.customer, return_url: r.form.return_url });
    }
    if (r.method === 'POST' && r.path === '/v1/customers') return json(200, { id: `cus_test_${++n}`, object: 'customer', email: r.form.email ?? null });
    if (r.method === 'GET' && r.path === '/v1/billing_portal/configurations') {
      const data = configurations.filter((c) => r.query.get('active') !== 'true' || c.active);
      return json(200, { object: 'list', data, has_more: false, url: '/v1/billing_portal/configurations' });
    }
    if (r.method === 'POST' && r.path === '/v1/billing_portal/configurations') {
      const metadata = Object.fromEntries(Object.entries(r.form).filter(([k]) => k.startsWith('metadata[')).map(([k, v]) => [k.slice(9, -1), v]));
      const configuration = { id: `bpc_test_${++n}`, object: 'billing_portal.configuration', active: true, is_default: false, metadata, form: r.form };
      configurations.push(configuration);
      return json(200, configuration);
    }
    const configurationPath = /^\/v1\/billing_portal\/configurations\/([^/]+)$/.exec(r.path);
    if (r.method === 'POST' && configurationPath) {
      const configuration = configurations.find((c) => c.id === configurationPath[1]);
      if (!configuration) return json(404, { error: { type: 'invalid_request_error', code: 'resource_missing', message: `No such configuration: '${configurationPath[1]}'` } });
      if (r.form.active !== undefined) configuration.active = r.form.active === 'true';
      return json(200, { ...configuration, object: 'billing_portal.configuration' });
    }
    return json(404, { error: { type: 'invalid_request_error', message: `Unrecognized request URL (${r.method}: ${r.path})` } });
  };
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', async () => {
      const url = new URL(req.url ?? '/', 'http://127.0.0.1');
      const form = Object.fromEntries(new URLSearchParams(Buffer.concat(chunks).toString('utf8')));
      const request: ProcessorRequest = { method: req.method ?? 'GET', path: url.pathname, query: url.searchParams, form, headers: req.headers };
      requests.push(request);
      await holds.get(request.path);
      if (busy.has(request.path)) {
        res.writeHead(500, { 'content-type': 'application/json', 'request-id': `req_${rand(6)}`, 'stripe-should-retry': 'true' });
        res.end(JSON.stringify({ error: { type: 'api_error', message: 'An error occurred with our connection to Stripe.' } }));
        return;
      }
      const key = req.headers['idempotency-key'];
      const replay = typeof key === 'string' ? byIdempotencyKey.get(key) : undefined;
      const out = replay ?? answer(request);
      if (typeof key === 'string' && req.method === 'POST') byIdempotencyKey.set(key, out);
      res.writeHead(out.status, { 'content-type': 'application/json', 'request-id': `req_${rand(6)}` });
      res.end(JSON.stringify(out.body));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    base: `http://127.0.0.1:${port}`,
    requests,
    prices,
    refuse,
    checkoutWithoutUrl,
    busy,
    checkoutSessions,
    holds,
    configurations,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** A loopback port nothing listens on (the processor is down). */
export async function closedPort(): Promise<number> {
  // Not one listen(0) handed out: another test process could be given it while the service dials it.
  return unusedPort();
}

export interface EventOptions {
  id?: string;
  /** Unix seconds; defaults to the service clock. */
  created?: number;
}

export function processorEvent(t: TestApp, type: string, object: Record<string, unknown>, opts: EventOptions = {}) {
  return { id: opts.id ?? `evt_test_${rand(8)}`, object: 'event', type, created: opts.created ?? toUnixSeconds(t.clock.now()), livemode: false, data: { object } };
}

export interface SubscriptionShape {
  tenantId?: string | null;
  id?: string;
  customer?: string;
  status?: string;
  plan?: string;
  cancelAtPeriodEnd?: boolean;
  start?: number;
  end?: number;
  addOns?: { code: string; unitAmount: number }[];
}

/** A Stripe subscription object: metadata.tenant_id, and the plan as the lookup_key of its price. */
export function subscription(s: SubscriptionShape): Record<string, unknown> {
  const start = s.start ?? 1_750_000_000;
  const end = s.end ?? start + 30 * 86_400;
  const items = [{ id: 'si_plan', quantity: 1, current_period_start: start, current_period_end: end, price: { id: `price_${s.plan ?? 'team'}`, lookup_key: s.plan ?? 'team', unit_amount: 2900 } }];
  for (const a of s.addOns ?? []) items.push({ id: `si_${a.code}`, quantity: 1, current_period_start: start, current_period_end: end, price: { id: `price_${a.code}`, lookup_key: a.code, unit_amount: a.unitAmount } });
  return {
    id: s.id ?? 'sub_test_1',
    object: 'subscription',
    customer: s.customer ?? 'cus_test_1',
    status: s.status ?? 'active',
    cancel_at_period_end: s.cancelAtPeriodEnd ?? false,
    currency: 'usd',
    metadata: s.tenantId === null ? {} : { tenant_id: s.tenantId },
    items: { object: 'list', data: items },
  };
}

/** Signs a payload as Stripe does (t=…,v1=…), at the service clock unless told otherwise. */
export function sign(t: TestApp, payload: string, opts: { secret?: string; timestamp?: number } = {}): string {
  return Stripe.webhooks.generateTestHeaderString({ payload, secret: opts.secret ?? t.config.stripeWebhookSecret ?? '', timestamp: opts.timestamp ?? toUnixSeconds(t.clock.now()) });
}

export function postEvent(t: TestApp, payload: string, signature: string | null) {
  return t.app.inject({
    method: 'POST',
    url: '/v1/billing/processor-events',
    headers: { 'content-type': 'application/json', ...(signature === null ? {} : { 'stripe-signature': signature }) },
    payload,
  });
}

/** Builds, signs and delivers one event; returns the response. */
export function deliver(t: TestApp, type: string, object: Record<string, unknown>, opts: EventOptions & { secret?: string } = {}) {
  const payload = JSON.stringify(processorEvent(t, type, object, opts));
  return postEvent(t, payload, sign(t, payload, { secret: opts.secret }));
}

/** The service clock in Unix seconds, as a processor event's `created` states it. */
export const unixNow = (t: TestApp) => toUnixSeconds(t.clock.now());

/** The processor_events rows recorded for event `id` (none, or one with its outcome). */
export const processorEventRows = (t: TestApp, id: string) => sql(t, 'SELECT * FROM processor_events WHERE id = $1', [id]);

/**
 * A Team Tenant with two Applications (more than Starter allows) whose subscription `id` was created
 * and then canceled: it dropped to Starter and is restricted.
 */
export async function lapsedTenantOverStarter(t: TestApp, admin: Caller, id: string) {
  const owner = await tenantOwner(t);
  await sql(t, `UPDATE tenants SET plan = 'team' WHERE id = $1`, [owner.tenantId]);
  const apps: { appId: string }[] = [];
  for (let i = 0; i < 2; i++) apps.push(await createApplication(t, admin, { owner_user_id: owner.user.id }));
  const sub = { tenantId: owner.tenantId, id, customer: `cus_${id}` };
  assertStatus(await deliver(t, 'customer.subscription.created', subscription(sub), { created: unixNow(t) - 40 }), 200);
  assertStatus(await deliver(t, 'customer.subscription.deleted', subscription({ ...sub, status: 'canceled' }), { created: unixNow(t) - 30 }), 200);
  return { owner, apps, sub };
}
