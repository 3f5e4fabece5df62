// Helpers shared by the access test files (test/access/*.test.ts): Applications, Entitlements, Roles,
// effective permissions, app tokens and AppProfiles. Everything under test goes through HTTP; direct
// SQL only observes side effects (audit_events, outbox_events) or sets up rows no API creates yet
// (organizations, memberships, organization-wide grants, pending_review Applications).
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import type { TestApp } from '../helpers/app.js';
import { createApiKey, createUser, PASSWORD, type TestUser } from '../helpers/fixtures.js';
import type { Mode } from '../../src/db/types.js';
import { systemCtx } from '../../src/context.js';
import { issueSession } from '../../src/modules/auth/sessions.js';
export { assertError, call, sql, type InjectResponse } from '../helpers/http.js';
import { assertError, call, sql, type InjectResponse } from '../helpers/http.js';

export const ALL_PERMISSIONS = [
  'users.list', 'users.manage', 'entitlements.manage', 'applications.manage', 'roles.manage', 'organizations.manage',
  'billing.manage', 'billing.refund', 'audit.view', 'webhooks.manage', 'api_keys.manage', 'tenants.manage',
];

export const HOUR = 3600;
export const DAY = 86400;
export const rand = (n = 4) => randomBytes(n).toString('hex');
export const slugOf = (label = 'a') => `${label}${rand(4)}`;
export const iso = (d: Date) => d.toISOString();
export const inSeconds = (t: TestApp, s: number) => new Date(t.clock.now().getTime() + s * 1000).toISOString();

export function assertStatus(res: InjectResponse, status: number): any {
  assert.equal(res.statusCode, status, `expected ${status}, got ${res.statusCode} ${res.body}`);
  return res.body ? res.json() : null;
}

/** 422 validation_failed naming the field (prefix match on details.fields[].path). */
export function assertInvalid(res: InjectResponse, pathPrefix: string): void {
  const error = assertError(res, 422, 'validation_failed');
  const paths: string[] = (error.details.fields ?? []).map((f: { path: string }) => f.path);
  assert.ok(paths.some((p) => p === pathPrefix || p.startsWith(`${pathPrefix}.`) || p.startsWith(`${pathPrefix}/`)), `expected a field ${pathPrefix}: ${res.body}`);
}

// ---- credentials ---------------------------------------------------------------------------------

/** Signs in and returns the whole AuthSession. */
export async function session(t: TestApp, user: Pick<TestUser, 'email' | 'mode'>): Promise<{ access_token: string; session_id: string }> {
  const res = await t.app.inject({ method: 'POST', url: '/v1/auth/login', payload: { email: user.email, password: PASSWORD, test_mode: user.mode === 'test' } });
  assert.equal(res.statusCode, 200, res.body);
  return res.json();
}

export interface Person extends TestUser {
  token: string;
}

/**
 * A fresh user (roles are platform role names or ids) and an access token of a new session. The
 * session is started through the sign-in service (as a password login does) rather than over HTTP, to
 * skip a password hash check per user; the sign-in endpoint itself is used by `session()`.
 */
export async function person(t: TestApp, opts: Parameters<typeof createUser>[1] = {}): Promise<Person> {
  const user = await createUser(t, opts);
  if (opts.status && opts.status !== 'active') return { ...user, token: '' };
  const ctx = systemCtx(t.deps, user.mode);
  const auth = await ctx.db.transaction((tx) => issueSession(tx, { ...ctx, db: tx }, { id: user.id, email_verified: true, test_mode: user.mode === 'test' }, ['pwd']));
  return { ...user, token: auth.access_token };
}

/** A platform key (never expires, so it survives clock moves) holding these permissions. */
export async function platformKey(t: TestApp, permissions: string[] = ALL_PERMISSIONS, mode: Mode = 'live'): Promise<string> {
  return (await createApiKey(t, { scope: 'platform', permissions, mode })).secret;
}

/** An app-confined key: scope = the Application id. */
export async function appKey(t: TestApp, applicationId: string, permissions: string[] = [], mode: Mode = 'live'): Promise<string> {
  return (await createApiKey(t, { scope: applicationId, permissions, mode })).secret;
}

/** A custom platform Role (inserted; no API needed to set one up) and a user holding it. */
export async function customPlatformRole(t: TestApp, permissions: string[]): Promise<string> {
  const name = `custom${rand(4)}`;
  await sql(t, `INSERT INTO roles (id, name, scope, permissions, created_at, updated_at) VALUES ($1, $2, 'platform', $3, now(), now())`, [`role_platform_${name}`, name, permissions]);
  return `role_platform_${name}`;
}

// ---- Applications --------------------------------------------------------------------------------

export interface AppFixture {
  id: string;
  slug: string;
  tenant_id: string;
  owner: Person | null;
  body: any;
}

/**
 * POST /v1/applications with `admin` (applications.manage). A fresh owner user is created unless
 * owner_user_id / owner_organization_id is given (Starter allows one Application per user owner).
 */
export async function newApp(t: TestApp, admin: string, body: Record<string, unknown> = {}, opts: { ownerMode?: Mode } = {}): Promise<AppFixture> {
  let owner: Person | null = null;
  const payload: Record<string, unknown> = { slug: slugOf(), name: 'Test App', launch_url: 'https://app.example.com/launch', visibility: 'public', ...body };
  if (!('owner_user_id' in body) && !('owner_organization_id' in body)) {
    owner = await person(t, { mode: opts.ownerMode ?? 'live' });
    payload.owner_user_id = owner.id;
  }
  const res = await call(t, 'POST', '/v1/applications', admin, payload);
  const app = assertStatus(res, 201);
  return { id: app.id, slug: app.slug, tenant_id: app.tenant_id, owner, body: app };
}

/** Moves an Application's review_status directly (pending_review cannot be reached through the API from approved). */
export async function setReview(t: TestApp, applicationId: string, status: string, createdAt?: Date): Promise<void> {
  await sql(t, `UPDATE applications SET review_status = $2, created_at = COALESCE($3, created_at) WHERE id = $1`, [applicationId, status, createdAt ?? null]);
}

// ---- Entitlements --------------------------------------------------------------------------------

export function grantReq(t: TestApp, cred: string, userId: string, body: Record<string, unknown>, idempotencyKey: string | null = `idem-${rand(8)}`) {
  return call(t, 'POST', `/v1/users/${userId}/entitlements`, cred, body, idempotencyKey ? { 'idempotency-key': idempotencyKey } : {});
}

/** Grants a personal Entitlement (201 asserted) and returns it. */
export async function grant(t: TestApp, cred: string, userId: string, applicationId: string, extra: Record<string, unknown> = {}): Promise<any> {
  return assertStatus(await grantReq(t, cred, userId, { application_id: applicationId, source: 'admin_grant', ...extra }), 201);
}

export function patchEnt(t: TestApp, cred: string, id: string, body: Record<string, unknown>, headers: Record<string, string> = {}) {
  return call(t, 'PATCH', `/v1/entitlements/${id}`, cred, body, headers);
}

export async function entRow(t: TestApp, id: string): Promise<Record<string, any> | undefined> {
  return (await sql(t, 'SELECT * FROM entitlements WHERE id = $1', [id]))[0];
}

// ---- Organizations (no API yet: rows inserted directly) --------------------------------------------

export async function createOrg(
  t: TestApp,
  members: { userId: string; role?: 'org_admin' | 'member'; status?: 'active' | 'pending' }[],
  opts: { mode?: Mode } = {},
): Promise<string> {
  const id = `org_${rand(8)}`;
  const now = t.clock.now();
  await sql(t, `INSERT INTO organizations (id, name, status, created_by, test_mode, created_at, updated_at) VALUES ($1, $2, 'active', $3, $4, $5, $5)`, [
    id, `Org ${id}`, members[0]?.userId ?? 'usr_fixture', (opts.mode ?? 'live') === 'test', now,
  ]);
  for (const m of members) await addMember(t, id, m.userId, m.role ?? 'member', m.status ?? 'active');
  return id;
}

export async function addMember(t: TestApp, organizationId: string, userId: string, role: 'org_admin' | 'member' = 'member', status: 'active' | 'pending' = 'active') {
  const now = t.clock.now();
  await sql(
    t,
    `INSERT INTO organization_members (organization_id, user_id, role, membership_status, invited_at, joined_at) VALUES ($1, $2, $3, $4, $5, $6)`,
    [organizationId, userId, role, status, now, status === 'active' ? now : null],
  );
}

/** An organization-wide grant row (source org_seat, user_id null). */
export async function orgGrant(
  t: TestApp,
  organizationId: string,
  applicationId: string,
  opts: { memberScope?: 'all_members' | 'allowlist' | 'denylist'; overrides?: string[]; mode?: Mode; status?: string; endsAt?: Date | null } = {},
): Promise<string> {
  const id = `ent_${rand(10)}`;
  const now = t.clock.now();
  await sql(
    t,
    `INSERT INTO entitlements (id, user_id, organization_id, application_id, status, source, starts_at, ends_at, member_scope, member_overrides, test_mode,
       created_at, updated_at, start_notified_at)
     VALUES ($1, NULL, $2, $3, $4, 'org_seat', $5, $6, $7, $8, $9, $10, $10, $10)`,
    [id, organizationId, applicationId, opts.status ?? 'active', new Date(now.getTime() - 60_000), opts.endsAt ?? null, opts.memberScope ?? 'all_members',
      opts.overrides ?? [], (opts.mode ?? 'live') === 'test', now],
  );
  return id;
}

// ---- side effects --------------------------------------------------------------------------------

export interface OutboxRow {
  id: string;
  type: string;
  application_id: string | null;
  test_mode: boolean;
  data: any;
}

/** Outbox rows of these types, oldest first, optionally about one user / Application / entitlement. */
export async function outbox(t: TestApp, filter: { types?: string[]; userId?: string; applicationId?: string; entitlementId?: string } = {}): Promise<OutboxRow[]> {
  const where: string[] = [];
  const params: unknown[] = [];
  const add = (cond: (n: number) => string, v: unknown) => {
    params.push(v);
    where.push(cond(params.length));
  };
  if (filter.types) add((n) => `type = ANY($${n}::text[])`, filter.types);
  if (filter.userId) add((n) => `data->>'user_id' = $${n}`, filter.userId);
  if (filter.applicationId) add((n) => `application_id = $${n}`, filter.applicationId);
  if (filter.entitlementId) add((n) => `data->'entitlement'->>'id' = $${n}`, filter.entitlementId);
  return sql<OutboxRow>(t, `SELECT id, type, application_id, test_mode, data FROM outbox_events ${where.length ? `WHERE ${where.join(' AND ')}` : ''} ORDER BY seq`, params);
}

/** access.granted / access.revoked rows for one (user, Application) pair, as [type, reason, entitlement_status]. */
export async function accessEvents(t: TestApp, userId: string, applicationId: string): Promise<[string, string, string][]> {
  const rows = await outbox(t, { types: ['access.granted', 'access.revoked'], userId, applicationId });
  for (const r of rows) {
    assert.equal(r.data.user_id, userId);
    assert.equal(r.data.application_id, applicationId);
  }
  return rows.map((r) => [r.type, r.data.reason, r.data.entitlement_status]);
}

/** entitlement.* event types written about one entitlement, oldest first. */
export async function entitlementEvents(t: TestApp, entitlementId: string): Promise<string[]> {
  return (await outbox(t, { entitlementId })).map((r) => r.type);
}

export interface AuditRow {
  id: string;
  action: string;
  actor_type: string;
  actor_id: string | null;
  target_type: string | null;
  target_id: string | null;
  target_user_id: string | null;
  application_id: string | null;
  tenant_id: string | null;
  before: any;
  after: any;
}

export async function auditOf(t: TestApp, targetId: string, action?: string): Promise<AuditRow[]> {
  return sql<AuditRow>(
    t,
    `SELECT id, action, actor_type, actor_id, target_type, target_id, target_user_id, application_id, tenant_id, before, after
       FROM audit_events WHERE target_id = $1 ${action ? 'AND action = $2' : ''} ORDER BY created_at, id`,
    action ? [targetId, action] : [targetId],
  );
}

export async function effective(t: TestApp, cred: string, userId: string, applicationId: string): Promise<any> {
  return assertStatus(await call(t, 'GET', `/v1/users/${userId}/apps/${applicationId}/effective-permissions`, cred), 200);
}

// ---- Roles ---------------------------------------------------------------------------------------

/**
 * The calls of the Role tests (test/access/roles-*.test.ts) on the file's test app and admin key, read
 * when called (before() builds them).
 */
export function roleCalls(file: () => { t: TestApp; admin: string }) {
  const createRole = (cred: string, body: Record<string, unknown>) => call(file().t, 'POST', '/v1/roles', cred, body);
  const assign = (cred: string, userId: string, roleId: string) => call(file().t, 'POST', `/v1/users/${userId}/roles/${roleId}`, cred, {});
  const unassign = (cred: string, userId: string, roleId: string) => call(file().t, 'DELETE', `/v1/users/${userId}/roles/${roleId}`, cred);
  const roleEvents = async (userId: string, type: string) => (await outbox(file().t, { userId, types: [type] })).map((e) => e.data);
  const heldRoles = async (userId: string) => (await sql(file().t, 'SELECT role_id FROM role_assignments WHERE user_id = $1 ORDER BY role_id', [userId])).map((r) => r.role_id);

  /** An Application declaring app.<slug>.read / write and the given role names. */
  async function appWith(roles: string[], extra: Record<string, unknown> = {}): Promise<AppFixture> {
    const slug = slugOf('r');
    return newApp(file().t, file().admin, {
      slug,
      available_app_roles: roles,
      permissions: [{ key: `app.${slug}.read`, description: 'read' }, { key: `app.${slug}.write`, description: 'write' }],
      ...extra,
    });
  }

  return { createRole, assign, unassign, roleEvents, heldRoles, appWith };
}
