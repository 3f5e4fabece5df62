// The fixtures the fuzzer aims at: a superadmin actor, a platform API key holding every permission,
// and real rows of every resource (users, Applications, Entitlements, Organizations, Roles, Tenants,
// webhooks, deliveries, API keys, sessions, tier-change requests, simulator sessions, audit events),
// all created through the API so they look like production rows.
import { randomBytes } from 'node:crypto';
import type { TestApp } from '../../helpers/app.js';
import { createApiKey, createUser, uniqueEmail, type TestUser } from '../../helpers/fixtures.js';
import type { InjectResponse } from '../../helpers/http.js';
import { systemCtx } from '../../../src/context.js';
import { issueSession } from '../../../src/modules/auth/sessions.js';
import { bootstrapAdmin } from '../../../src/modules/users/bootstrap.js';
import { PLATFORM_PERMISSIONS } from '../../../src/http/meta.js';
import { stripeSignature } from './signature.js';

export const rand = (n = 4) => randomBytes(n).toString('hex');
export type Pool =
  | 'user' | 'application' | 'entitlement' | 'organization' | 'role' | 'tenant' | 'webhook' | 'delivery' | 'apiKey'
  | 'session' | 'tierRequest' | 'checkout' | 'portal' | 'auditEvent' | 'email' | 'activeEmail' | 'invitedUser' | 'permission' | 'redirectUri' | 'slug';

/** Path parameters that only make sense together (a request of that Tenant, a member of that org …). */
export type Pair = Record<string, string>;

export interface Principal {
  id: string;
  email: string;
  token: string;
  sessionId: string;
  refreshToken: string;
}

export class World {
  actor!: Principal;
  /** An ordinary user who owns the first Application and so its Tenant (subscribed to Team). */
  owner!: Principal;
  /** An ordinary user who owns a Starter Tenant without a subscription (checkout is open to it). */
  starterOwner!: Principal;
  starterTenant!: string;
  key!: { id: string; secret: string };
  readonly pools = new Map<Pool, string[]>();
  /** Related path parameters, keyed by the path template they fill. */
  readonly pairs = new Map<string, Pair[]>();
  /** The latest seed's first Application: the owner holds a grant to it (authorization codes). */
  app!: { id: string; redirectUri: string; grant: string; org: string };
  /** Requests the fixtures themselves cost (not counted as fuzz requests). */
  setupRequests = 0;

  constructor(readonly t: TestApp) {}

  pool(name: Pool): string[] {
    return this.pools.get(name) ?? [];
  }

  private pair(path: string, pair: Pair): void {
    this.pairs.set(path, [...(this.pairs.get(path) ?? []), pair]);
  }

  private add(name: Pool, ...ids: (string | undefined | null)[]): void {
    this.pools.set(name, [...this.pool(name), ...ids.filter((id): id is string => typeof id === 'string' && id.length > 0)]);
  }

  async call(method: string, url: string, token: string | null, payload?: unknown, headers: Record<string, string> = {}): Promise<InjectResponse> {
    this.setupRequests++;
    return this.t.app.inject({
      method: method as any,
      url,
      headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), ...headers },
      ...(payload === undefined ? {} : { payload: payload as any }),
    });
  }

  /** A setup call that must succeed: a failure here is a fixture problem, reported with its body. */
  async must(method: string, url: string, payload?: unknown, headers: Record<string, string> = {}, token = this.actor.token): Promise<any> {
    const res = await this.call(method, url, token, payload, headers);
    if (res.statusCode >= 300) throw new Error(`fuzz fixture ${method} ${url} → ${res.statusCode} ${res.body}`);
    return res.body ? res.json() : null;
  }

  /** A session for a user without a password check (one Argon2 verify per fixture would dominate). */
  async signIn(user: TestUser): Promise<Principal> {
    const ctx = systemCtx(this.t.deps, user.mode);
    const auth = await ctx.db.transaction((tx) => issueSession(tx, { ...ctx, db: tx }, { id: user.id, email_verified: true, test_mode: user.mode === 'test' }, ['pwd']));
    return { id: user.id, email: user.email, token: auth.access_token, sessionId: auth.session_id, refreshToken: auth.refresh_token };
  }

  /** The first actor is made as an operator makes one (BOOTSTRAP_ADMIN_*); replacements hold the same seed Role. */
  async newActor(): Promise<void> {
    let user: TestUser;
    if (this.actor) user = await createUser(this.t, { roles: ['superadmin'] });
    else {
      const email = uniqueEmail('fz-admin');
      user = { id: (await bootstrapAdmin(this.t.deps, email, `fz-${rand(6)}-Cobalt-Meadow!`)).userId, email, password: '', mode: 'live' };
    }
    this.actor = await this.signIn(user);
    this.key = await createApiKey(this.t, { scope: 'platform', permissions: [...PLATFORM_PERMISSIONS], restrictDestructive: false, createdBy: this.actor.id });
  }

  /** A fresh ordinary user (platform role member only) and a session of it. */
  async newPerson(): Promise<Principal> {
    return this.signIn(await createUser(this.t));
  }

  /** Fresh fixtures of every kind. Pools keep growing: earlier ids stay as deleted or changed rows. */
  async seed(): Promise<void> {
    await this.newActor();
    const owner = (this.owner = await this.newPerson());
    const member = await this.newPerson();
    const suspended = await createUser(this.t, { status: 'suspended' });
    const invited = await createUser(this.t, { status: 'invited' });
    this.add('user', owner.id, member.id, suspended.id, invited.id, this.actor.id);
    this.add('invitedUser', invited.id);
    this.add('email', owner.email, member.email, suspended.email, invited.email);
    this.add('activeEmail', owner.email, member.email);
    this.add('session', owner.sessionId, member.sessionId, this.actor.sessionId);
    for (const p of [owner, member, this.actor]) this.pair('/v1/users/{id}/sessions/{sessionId}', { id: p.id, sessionId: p.sessionId });

    const slug = `fz${rand(4)}`;
    const perms = [`app.${slug}.read`, `app.${slug}.write`];
    const app = await this.must('POST', '/v1/applications', {
      slug, name: `Fuzz ${slug}`, launch_url: 'https://app.example.com/launch', owner_user_id: owner.id, visibility: 'public',
      redirect_uris: ['https://app.example.com/callback'], permissions: perms.map((key) => ({ key })), available_app_roles: ['editor', 'viewer'], default_app_role: 'viewer',
    });
    this.add('application', app.id);
    this.add('tenant', app.tenant_id);
    this.add('slug', slug);
    this.add('permission', ...perms, ...PLATFORM_PERMISSIONS);
    this.add('redirectUri', 'https://app.example.com/callback');
    this.app = { id: app.id, redirectUri: 'https://app.example.com/callback', grant: '', org: '' };

    const org = await this.must('POST', '/v1/organizations', { name: `Fuzz org ${slug}` });
    this.add('organization', org.id);
    await this.must('POST', `/v1/organizations/${org.id}/members`, { user_id: member.id, role: 'member' });
    for (const userId of [member.id, this.actor.id]) this.pair('/v1/organizations/{id}/members/{userId}', { id: org.id, userId });
    const orgSlug = `fo${rand(4)}`;
    const orgApp = await this.must('POST', '/v1/applications', {
      slug: orgSlug, name: `Fuzz org app ${orgSlug}`, launch_url: 'https://org.example.com/launch', owner_organization_id: org.id, visibility: 'invite_only',
    });
    this.add('application', orgApp.id);
    this.add('tenant', orgApp.tenant_id);
    const starter = await this.must('POST', '/v1/applications', { slug: `fs${rand(4)}`, name: 'Fuzz starter app', launch_url: 'https://starter.example.com/', owner_user_id: member.id });
    this.add('application', starter.id);
    this.add('tenant', starter.tenant_id);
    this.starterOwner = member;
    this.starterTenant = starter.tenant_id;

    const idem = () => ({ 'idempotency-key': `fz-seed-${rand(8)}` });
    const grant = (userId: string, body: Record<string, unknown>) => this.must('POST', `/v1/users/${userId}/entitlements`, body, idem());
    this.app.grant = (await grant(owner.id, { application_id: app.id, source: 'admin_grant' })).id;
    this.app.org = org.id;
    this.add('entitlement', this.app.grant);
    this.add('entitlement', (await grant(this.actor.id, { application_id: app.id, source: 'admin_grant' })).id);
    this.add('entitlement', (await grant(member.id, { application_id: app.id, source: 'trial', ends_at: new Date(Date.now() + 7 * 86400_000).toISOString(), order_id: `ord_${rand(4)}` })).id);
    this.add('entitlement', (await this.must('POST', `/v1/organizations/${org.id}/entitlements`, { application_id: orgApp.id }, idem())).id);

    // available_app_roles created the app's Roles; a platform Role is made here.
    const appRoles = (await this.must('GET', `/v1/roles?scope=${app.id}`)).data.map((r: { id: string }) => r.id);
    const platformRole = await this.must('POST', '/v1/roles', { name: `fz_${rand(3)}`, scope: 'platform', permissions: ['users.list'] });
    await this.must('POST', `/v1/users/${owner.id}/roles/${appRoles[0]}`, {});
    this.pair('/v1/users/{id}/roles/{roleId}', { id: owner.id, roleId: appRoles[0] });
    this.pair('/v1/users/{id}/roles/{roleId}', { id: member.id, roleId: platformRole.id });
    this.pair('/v1/users/{id}/apps/{appId}/profile', { id: owner.id, appId: app.id });
    this.pair('/v1/users/{id}/apps/{appId}/profile', { id: member.id, appId: app.id });
    this.add('role', ...appRoles, platformRole.id, 'role_platform_superadmin', 'role_platform_member', 'role_platform_support');

    const hook = await this.must('POST', '/v1/webhooks', { url: `https://hooks.example.com/${slug}`, events: ['*'], scope: 'platform' });
    const appHook = await this.must('POST', '/v1/webhooks', { url: `https://hooks.example.com/${slug}/app`, events: ['access.granted'], scope: app.id });
    this.add('webhook', hook.id, appHook.id);
    const delivery = (await this.must('POST', `/v1/webhooks/${hook.id}/test`, {})).id;
    this.add('delivery', delivery);
    this.pair('/v1/webhooks/{id}/deliveries/{deliveryId}/redeliver', { id: hook.id, deliveryId: delivery });

    this.add('apiKey', (await this.must('POST', '/v1/api-keys', { name: 'fuzz managed key', scope: 'platform', permissions: ['users.list'] })).id, this.key.id);
    await this.subscribeEnterprise(orgApp.tenant_id); // only Enterprise allows a tier change
    const tier = await this.call('POST', `/v1/tenants/${orgApp.tenant_id}/tier-change-requests`, this.actor.token, { requested_tier: 'isolated', reason: 'fuzz fixture' });
    if (tier.statusCode === 201) {
      this.add('tierRequest', tier.json().id);
      this.pair('/v1/tenants/{id}/tier-change-requests/{requestId}', { id: orgApp.tenant_id, requestId: tier.json().id });
    }
    await this.seedBilling(app.tenant_id, owner.token);
    const audit = await this.must('GET', '/v1/audit-events?limit=3');
    this.add('auditEvent', ...audit.data.map((e: { id: string }) => e.id));
  }

  /** Enterprise is sold by sales and arrives as a signed processor event, as in production. */
  private async subscribeEnterprise(tenantId: string): Promise<void> {
    const now = Math.floor(Date.now() / 1000);
    const price = { id: 'price_enterprise', lookup_key: 'enterprise', unit_amount: 90000 };
    const subscription = {
      id: `sub_fz_${rand(4)}`, object: 'subscription', customer: `cus_fz_${rand(4)}`, status: 'active', cancel_at_period_end: false, currency: 'usd',
      metadata: { tenant_id: tenantId }, items: { object: 'list', data: [{ id: 'si_fz', quantity: 1, current_period_start: now, current_period_end: now + 30 * 86400, price }] },
    };
    const payload = JSON.stringify({ id: `evt_fz_${rand(6)}`, object: 'event', type: 'customer.subscription.created', created: now, livemode: false, data: { object: subscription } });
    const res = await this.call('POST', '/v1/billing/processor-events', null, payload, { 'content-type': 'application/json', 'stripe-signature': stripeSignature(this.t.config.stripeWebhookSecret ?? '', payload) });
    if (res.statusCode !== 200) throw new Error(`fuzz fixture enterprise subscription → ${res.statusCode} ${res.body}`);
  }

  /** Simulator sessions: one checkout left open, one completed (the Tenant subscribes), one portal. */
  private async seedBilling(tenantId: string, ownerToken: string): Promise<void> {
    const checkout = () =>
      this.must('POST', `/v1/tenants/${tenantId}/billing/checkout-sessions`, { plan: 'team', success_url: 'https://app.example.com/ok', cancel_url: 'https://app.example.com/no' }, { 'idempotency-key': `fz-${rand(8)}` }, ownerToken);
    const simId = (url: string) => new URL(url).pathname.split('/').filter(Boolean)[3];
    const open = simId((await checkout()).url);
    const paid = simId((await checkout()).url);
    this.add('checkout', open, paid);
    const done = await this.call('POST', `/billing/simulator/checkout/${paid}/complete`, null);
    if (done.statusCode !== 303) return;
    const portal = await this.call('POST', `/v1/tenants/${tenantId}/billing/portal-sessions`, ownerToken, { return_url: 'https://app.example.com/billing' });
    if (portal.statusCode === 201) this.add('portal', simId(portal.json().url));
  }

  /** The actor and the key must stay usable; a fuzzed request may have suspended or demoted them. */
  async ensureCallers(): Promise<boolean> {
    const actorOk = (await this.call('GET', '/v1/users?limit=1', this.actor.token)).statusCode === 200;
    const keyOk = (await this.call('GET', '/v1/users?limit=1', this.key.secret)).statusCode === 200;
    if (actorOk && keyOk) return false;
    await this.newActor();
    return true;
  }

  /**
   * Puts back the state later operations rely on (fuzzed PATCHes suspend the Application, the
   * Organization or the owner's grant): through the API, failures ignored (the row may be gone).
   */
  async heal(): Promise<void> {
    const t = this.actor.token;
    await this.call('PATCH', `/v1/applications/${this.app.id}`, t, { review_status: 'approved', review_notes: 'fuzz: restored', visibility: 'public' });
    await this.call('PATCH', `/v1/organizations/${this.app.org}`, t, { status: 'active' });
    await this.call('PATCH', `/v1/entitlements/${this.app.grant}`, t, { status: 'active' });
  }

  fresh(label = 'fz'): string {
    return uniqueEmail(label);
  }
}
