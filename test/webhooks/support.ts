// Helpers shared by the webhook and audit tests (test/webhooks/*.test.ts, test/audit/*.test.ts):
// a loopback receiver that records every delivery, fixtures made through the API (Applications,
// grants), and small SQL observers. Deliveries run with WEBHOOK_ALLOW_PRIVATE_TARGETS on so the
// receiver on 127.0.0.1 may be used; the address rules are tested without it, through a resolver.
import assert from 'node:assert/strict';
import type { TestContext } from 'node:test';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomBytes } from 'node:crypto';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { bearer, createApiKey, createUser, login, type TestUser } from '../helpers/fixtures.js';
import type { Config } from '../../src/config.js';
import type { Mode } from '../../src/db/types.js';
import { systemCtx } from '../../src/context.js';
import { emit } from '../../src/outbox/emit.js';
export { assertError, call, sql, type InjectResponse } from '../helpers/http.js';
import { assertError, call, sql, type InjectResponse } from '../helpers/http.js';

export const DAY = 86400;
/** Part B Delivery semantics 2: the delay before each retry, in seconds (after the first attempt at 0). */
export const RETRY_SCHEDULE = [60, 300, 1800, 7200, 43200];
export const rand = (n = 4) => randomBytes(n).toString('hex');

export const ALL_PERMISSIONS = [
  'users.list', 'users.manage', 'entitlements.manage', 'applications.manage', 'roles.manage', 'organizations.manage',
  'billing.manage', 'billing.refund', 'audit.view', 'webhooks.manage', 'api_keys.manage', 'tenants.manage',
];

/** The service with private webhook targets allowed (the loopback receiver), unless overridden. */
export const buildApp = (overrides: Partial<Config> = {}) => buildTestApp({ webhookAllowPrivateTargets: true, ...overrides });

export function assertStatus(res: InjectResponse, status: number): any {
  assert.equal(res.statusCode, status, `expected ${status}, got ${res.statusCode} ${res.body}`);
  return res.body ? res.json() : null;
}

/** A platform key (never expires, so it survives clock moves). */
export const platformKey = async (t: TestApp, permissions: string[] = ALL_PERMISSIONS, mode: Mode = 'live') =>
  (await createApiKey(t, { scope: 'platform', permissions, mode })).secret;
export const appKey = async (t: TestApp, applicationId: string, permissions: string[] = [], mode: Mode = 'live') =>
  (await createApiKey(t, { scope: applicationId, permissions, mode })).secret;

export interface Person extends TestUser {
  token: string;
}
export async function person(t: TestApp, opts: Parameters<typeof createUser>[1] = {}): Promise<Person> {
  const user = await createUser(t, opts);
  return { ...user, token: await login(t, user) };
}

export interface AppFixture {
  id: string;
  tenantId: string;
  owner: Person;
}

/** POST /v1/applications for a fresh owner (a Starter Tenant of their own). */
export async function newApp(t: TestApp, admin: string, owner?: Person): Promise<AppFixture> {
  const who = owner ?? (await person(t));
  const slug = `wh${rand(5)}`;
  const res = await call(t, 'POST', '/v1/applications', admin, { slug, name: `App ${slug}`, launch_url: `https://${slug}.example.com/`, owner_user_id: who.id });
  const app = assertStatus(res, 201);
  return { id: app.id, tenantId: app.tenant_id, owner: who };
}

/** Grants a personal Entitlement through the API (emits entitlement.granted and access.granted). */
export async function grant(t: TestApp, cred: string, userId: string, applicationId: string): Promise<any> {
  const res = await call(t, 'POST', `/v1/users/${userId}/entitlements`, cred, { application_id: applicationId, source: 'admin_grant' }, { 'idempotency-key': `k-${rand(8)}` });
  return assertStatus(res, 201);
}

export async function createWebhook(t: TestApp, cred: string, body: Record<string, unknown>): Promise<any> {
  return assertStatus(await call(t, 'POST', '/v1/webhooks', cred, { events: ['*'], ...body }), 201);
}

export const runDelivery = (t: TestApp) => t.deps.jobs.runNow('webhook-delivery');

/** What the delivery tests start from: a test app, a platform key holding every permission, a loopback receiver. */
export interface ReceiverApp {
  t: TestApp;
  admin: string;
  receiver: Receiver;
}

export async function startReceiverApp(): Promise<ReceiverApp> {
  const t = await buildApp();
  return { t, admin: await platformKey(t), receiver: await Receiver.start() };
}

export async function stopReceiverApp({ t, receiver }: Pick<ReceiverApp, 't' | 'receiver'>): Promise<void> {
  await receiver.close();
  await t.close();
}

let receiverPaths = 0;
/** A platform subscription to `events` on its own path of `receiver`, deleted after the test. */
export async function subscribePlatform(c: TestContext, t: TestApp, admin: string, receiver: Receiver, events: string[], path = `/s${++receiverPaths}`): Promise<{ id: string; secret: string; path: string; api_version: string }> {
  const res = assertStatus(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url: receiver.url(path), events }), 201);
  c.after(() => sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [res.id]).then(() => undefined));
  return { id: res.id, secret: res.signing_secret, path, api_version: res.api_version };
}

/** Writes one outbox event in its own committed transaction, as any mutation would. */
export async function emitEvent(t: TestApp, type: string, data: Record<string, unknown>, opts: { applicationId?: string | null; mode?: Mode } = {}): Promise<string> {
  const ctx = systemCtx(t.deps, opts.mode ?? 'live');
  return ctx.db.transaction((tx) => emit(tx, { ...ctx, db: tx }, { type, applicationId: opts.applicationId ?? null, data }));
}

/** Emails written to the mail outbox for an address. */
export const mailsTo = (t: TestApp, to: string) => sql<{ template: string; subject: string; text_body: string; test_mode: boolean }>(
  t, 'SELECT template, subject, text_body, test_mode FROM emails WHERE to_address = $1 ORDER BY created_at, id', [to]);

// ---- the receiver ----------------------------------------------------------------------------------

export interface Received {
  path: string;
  headers: IncomingMessage['headers'];
  raw: string;
  body: any;
  at: number;
}

export type Responder = (req: IncomingMessage, res: ServerResponse, raw: string) => void;

/** A loopback HTTP server recording each request; `respond` decides the answer (default 200). */
export class Receiver {
  readonly received: Received[] = [];
  connections = 0;
  /** Per-path answers; other paths get 200 ok. */
  readonly routes = new Map<string, Responder>();
  respond: Responder = (req, res, raw) => {
    const route = this.routes.get(req.url ?? '/');
    if (route) route(req, res, raw);
    else res.writeHead(200).end('ok');
  };
  private readonly server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks).toString('utf8');
      let body: any = null;
      try {
        body = JSON.parse(raw);
      } catch {
        /* not JSON */
      }
      this.received.push({ path: req.url ?? '/', headers: req.headers, raw, body, at: Date.now() });
      this.respond(req, res, raw);
    });
  });

  static async start(t?: { after(fn: () => Promise<void>): void }): Promise<Receiver> {
    const r = new Receiver();
    r.server.on('connection', (socket) => {
      r.connections++;
      socket.on('error', () => undefined);
    });
    await new Promise<void>((resolve) => r.server.listen(0, '127.0.0.1', resolve));
    t?.after(() => r.close());
    return r;
  }

  get port(): number {
    return (this.server.address() as AddressInfo).port;
  }

  url(path = '/hook'): string {
    return `http://127.0.0.1:${this.port}${path}`;
  }

  /** Requests to one path (each subscription gets its own path). */
  at(path: string): Received[] {
    return this.received.filter((r) => r.path === path);
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

export interface DeliveryRow {
  id: string;
  subscription_id: string;
  event_id: string;
  event_type: string;
  kind: string;
  status: string;
  attempt: number;
  next_attempt_at: Date | null;
  response_status: number | null;
  error: string | null;
}

export async function deliveriesOf(t: TestApp, subscriptionId: string): Promise<DeliveryRow[]> {
  return sql<DeliveryRow>(
    t,
    `SELECT id, subscription_id, event_id, event_type, kind, status, attempt, next_attempt_at, response_status, error
       FROM webhook_deliveries WHERE subscription_id = $1 ORDER BY created_at, id`,
    [subscriptionId],
  );
}

/** Waits (real time) until cond holds, polling; fails after ms. */
export async function until(cond: () => boolean | Promise<boolean>, ms = 5000, label = 'condition'): Promise<void> {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${label}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

export type { TestApp };
