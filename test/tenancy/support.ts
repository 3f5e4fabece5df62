// Helpers shared by the tenancy and billing tests (test/tenancy/*.test.ts, test/billing/*.test.ts).
// Everything under test goes through HTTP; direct SQL sets up rows no API creates (Tenants on a
// given plan or tier, organizations) and observes side effects (tenants columns, audit, mails).
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { bearer, createUser, login, userToken, type TestUser } from '../helpers/fixtures.js';
import { newId } from '../../src/ids.js';
import type { Config } from '../../src/config.js';
export { assertError, call, sql, type InjectResponse } from '../helpers/http.js';
import { assertError, call, sql, type InjectResponse } from '../helpers/http.js';

export const rand = (n = 5) => randomBytes(n).toString('hex');

/** The service with the tenancy and billing modules mounted. */
export const buildApp = (overrides: Partial<Config> = {}) => buildTestApp(overrides);

export function assertStatus(res: InjectResponse, status: number): any {
  assert.equal(res.statusCode, status, `expected ${status}, got ${res.statusCode} ${res.body}`);
  return res.body ? res.json() : null;
}

export interface Caller {
  user: TestUser;
  token: string;
}

/** A signed-in user holding these platform roles. */
export const caller = (t: TestApp, roles: string[] = []): Promise<Caller> => userToken(t, { roles });

/** Creates an Application through the API (superadmin), which creates the owner's Tenant; returns the Tenant id. */
export async function createApplication(t: TestApp, admin: Caller, owner: { owner_user_id?: string; owner_organization_id?: string }, extra: Record<string, unknown> = {}): Promise<{ appId: string; tenantId: string }> {
  const slug = `app-${rand()}`;
  const res = await call(t, 'POST', '/v1/applications', admin.token, { slug, name: `App ${slug}`, launch_url: `https://${slug}.example.com`, ...owner, ...extra });
  const body = assertStatus(res, 201);
  return { appId: body.id, tenantId: body.tenant_id };
}

export interface TenantSeed {
  ownerUserId?: string | null;
  ownerOrganizationId?: string | null;
  plan?: 'starter' | 'team' | 'enterprise';
  tier?: 'shared' | 'isolated' | 'dedicated_region';
  region?: string;
  status?: 'active' | 'migrating';
  subscriptionStatus?: string;
  restricted?: boolean;
  stripeCustomerId?: string | null;
  createdAt?: Date;
}

/** A Tenant row as the applications module would leave it, on a chosen plan, tier and subscription state. */
export async function seedTenant(t: TestApp, seed: TenantSeed): Promise<string> {
  const id = newId('tnt');
  const now = seed.createdAt ?? t.clock.now();
  await sql(
    t,
    `INSERT INTO tenants (id, owner_type, owner_user_id, owner_organization_id, tier, plan, region, status, subscription_status, restricted, stripe_customer_id, created_at, updated_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12)`,
    [
      id, seed.ownerOrganizationId ? 'organization' : 'user', seed.ownerUserId ?? null, seed.ownerOrganizationId ?? null, seed.tier ?? 'shared',
      seed.plan ?? 'starter', seed.region ?? 'us-east-1', seed.status ?? 'active', seed.subscriptionStatus ?? 'none', seed.restricted ?? false,
      seed.stripeCustomerId ?? null, now,
    ],
  );
  return id;
}

/** A user who owns a fresh Tenant (seeded directly) and is signed in. */
export async function tenantOwner(t: TestApp, seed: Omit<TenantSeed, 'ownerUserId'> = {}): Promise<Caller & { tenantId: string }> {
  const user = await createUser(t);
  const tenantId = await seedTenant(t, { ...seed, ownerUserId: user.id });
  return { user, token: await login(t, user), tenantId };
}

/** An Organization with these users as active members (the organizations module creates them through the API). */
export async function seedOrganization(t: TestApp, members: { userId: string; role: 'org_admin' | 'member'; status?: 'active' | 'pending' }[]): Promise<string> {
  const id = newId('org');
  const now = t.clock.now();
  await sql(t, `INSERT INTO organizations (id, name, created_by, test_mode, created_at, updated_at) VALUES ($1, $2, $3, false, $4, $4)`, [id, `Org ${rand()}`, members[0]?.userId ?? 'usr_x', now]);
  for (const m of members) {
    await sql(t, `INSERT INTO organization_members (organization_id, user_id, role, membership_status, invited_at, joined_at) VALUES ($1, $2, $3, $4, $5, $5)`, [
      id, m.userId, m.role, m.status ?? 'active', now,
    ]);
  }
  return id;
}

export async function tenantRow(t: TestApp, id: string): Promise<Record<string, any>> {
  return (await sql(t, 'SELECT * FROM tenants WHERE id = $1', [id]))[0];
}

export async function auditRows(t: TestApp, action: string, tenantId: string): Promise<Record<string, any>[]> {
  return sql(t, 'SELECT * FROM audit_events WHERE action = $1 AND tenant_id = $2 ORDER BY created_at, id', [action, tenantId]);
}

export async function mailsTo(t: TestApp, address: string, template: string): Promise<Record<string, any>[]> {
  return sql(t, 'SELECT * FROM emails WHERE lower(to_address) = lower($1) AND template = $2 ORDER BY created_at', [address, template]);
}
