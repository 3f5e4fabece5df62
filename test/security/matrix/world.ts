// Fixtures shared by the AZ-1 and AZ-6 suites: one service instance, the caller credentials of
// callers.ts, the seeded resources the expectations table describes, and cheap throwaway targets for
// calls that may change or destroy what they touch. Setup goes through the API with a superadmin
// where that is cheap; direct SQL only for rows no API creates (tenants) or to skip per-row overhead.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { buildTestApp, type TestApp } from '../../helpers/app.js';
import { createApiKey, createUser, type TestUser } from '../../helpers/fixtures.js';
import { call, sql } from '../../helpers/http.js';
import { systemCtx } from '../../../src/context.js';
import { issueSession } from '../../../src/modules/auth/sessions.js';
import { PLATFORM_PERMISSIONS } from '../../../src/http/meta.js';
import { CALLERS, type Caller } from './callers.js';

export const rand = (n = 5) => randomBytes(n).toString('hex');
export const ALL = [...PLATFORM_PERMISSIONS];

export interface AppFixture {
  id: string;
  slug: string;
  tenantId: string;
  ownerId: string;
  /** The app Role `editor` seeded from available_app_roles. */
  editorRole: string;
}

export interface World {
  t: TestApp;
  /** A superadmin's token: setup and observation only, never a caller class. */
  admin: string;
  /** Credential of each caller class (null: anonymous). */
  cred: Record<string, string | null>;
  /** The user behind each user caller class. */
  userOf: Record<string, string>;
  restrictKeyId: string;
  appA: AppFixture;
  appB: AppFixture;
  subject: TestUser;
  subjectEntitlement: string;
  org: { id: string; adminId: string; memberId: string; grantId: string };
  webhook: { id: string; deliveryId: string };
  tierRequest: string;
  auditEvent: string;
  /** A platform key that is a target, never a caller. */
  targetKey: string;
  /** Well-formed ids of nothing: the target of cells the gate must refuse before any lookup. */
  ghost: { user: string; entitlement: string; role: string; webhook: string; org: string; tenant: string; key: string; session: string; request: string };
}

export function assertOk(res: { statusCode: number; body: string }, status: number, what: string): any {
  assert.equal(res.statusCode, status, `${what}: ${res.statusCode} ${res.body}`);
  return res.body ? JSON.parse(res.body) : null;
}

/** An access token of a new session, started through the sign-in service (no password hash per caller). */
export async function sessionOf(t: TestApp, user: { id: string; mode?: 'live' | 'test' }): Promise<{ token: string; sessionId: string }> {
  const mode = user.mode ?? 'live';
  const ctx = systemCtx(t.deps, mode);
  const auth = await ctx.db.transaction((tx) => issueSession(tx, { ...ctx, db: tx }, { id: user.id, email_verified: true, test_mode: mode === 'test' }, ['pwd']));
  return { token: auth.access_token, sessionId: auth.session_id };
}

async function platformRole(t: TestApp, permissions: string[]): Promise<string> {
  const name = `mx_${rand(4)}`;
  await sql(t, `INSERT INTO roles (id, name, scope, permissions, created_at, updated_at) VALUES ($1, $2, 'platform', $3, now(), now())`, [`role_platform_${name}`, name, permissions]);
  return `role_platform_${name}`;
}

async function application(t: TestApp, admin: string, label: string): Promise<AppFixture> {
  const owner = await createUser(t);
  const slug = `${label}${rand(4)}`;
  const app = assertOk(
    await call(t, 'POST', '/v1/applications', admin, {
      slug,
      name: `Matrix ${label}`,
      launch_url: `https://${slug}.example.com/`,
      owner_user_id: owner.id,
      visibility: 'public',
      redirect_uris: [`https://${slug}.example.com/cb`],
      permissions: [{ key: `app.${slug}.read`, description: 'read' }],
      available_app_roles: ['editor'],
    }),
    201,
    'create application',
  );
  // Enterprise: no cap on webhooks or app roles, and tier changes are allowed.
  await sql(t, `UPDATE tenants SET plan = 'enterprise' WHERE id = $1`, [app.tenant_id]);
  return { id: app.id, slug, tenantId: app.tenant_id, ownerId: owner.id, editorRole: `role_${slug}_editor` };
}

export async function buildWorld(): Promise<World> {
  // The production configuration, except that private webhook targets are allowed so subscriptions
  // need no DNS (workers are off: nothing is ever dialled).
  const t = await buildTestApp({ webhookAllowPrivateTargets: true });
  const adminUser = await createUser(t, { roles: ['superadmin'] });
  const admin = (await sessionOf(t, adminUser)).token;

  const appA = await application(t, admin, 'mxa');
  const appB = await application(t, admin, 'mxb');

  const cred: Record<string, string | null> = {};
  const userOf: Record<string, string> = {};
  let restrictKeyId = '';
  for (const c of CALLERS) {
    cred[c.id] = await credentialFor(t, c, appA, appB, (id) => (restrictKeyId = id), (id) => (userOf[c.id] = id));
  }

  const subject = await createUser(t);
  const subjectEntitlement = (await grantPersonal(t, admin, subject.id, appA.id)).id;

  const orgAdmin = await createUser(t);
  const orgMember = await createUser(t);
  const org = assertOk(await call(t, 'POST', '/v1/organizations', (await sessionOf(t, orgAdmin)).token, { name: 'Matrix org' }), 201, 'create org');
  assertOk(await call(t, 'POST', `/v1/organizations/${org.id}/members`, admin, { user_id: orgMember.id }), 201, 'add member');
  const orgGrant = assertOk(
    await call(t, 'POST', `/v1/organizations/${org.id}/entitlements`, admin, { application_id: appA.id }, { 'idempotency-key': `mx-${rand()}` }),
    201,
    'org grant',
  );

  const webhook = assertOk(await call(t, 'POST', '/v1/webhooks', admin, { scope: appA.id, url: 'https://127.0.0.1:9/matrix', events: ['*'] }), 201, 'webhook');
  const delivery = assertOk(await call(t, 'POST', `/v1/webhooks/${webhook.id}/test`, admin, {}), 202, 'webhook test');
  const tier = assertOk(
    await call(t, 'POST', `/v1/tenants/${appA.tenantId}/tier-change-requests`, admin, { requested_tier: 'isolated', reason: 'matrix' }),
    201,
    'tier change',
  );
  const events = await sql<{ id: string }>(t, `SELECT id FROM audit_events WHERE application_id = $1 AND action = 'application.created'`, [appA.id]);
  assert.equal(events.length, 1, 'the application.created audit event of A');
  const targetKey = (await createApiKey(t, { permissions: ['users.list'], createdBy: adminUser.id })).id;

  const ghost = {
    user: 'usr_01J0000000000000000000GHST',
    entitlement: 'ent_01J0000000000000000000GHST',
    role: 'role_platform_ghost',
    webhook: 'whk_01J0000000000000000000GHST',
    org: 'org_01J0000000000000000000GHST',
    tenant: 'tnt_01J0000000000000000000GHST',
    key: 'key_01J0000000000000000000GHST',
    session: 'ses_01J0000000000000000000GHST',
    request: 'tcr_01J0000000000000000000GHST',
  };
  return {
    t, admin, cred, userOf, restrictKeyId, appA, appB, subject, subjectEntitlement,
    org: { id: org.id, adminId: orgAdmin.id, memberId: orgMember.id, grantId: orgGrant.id },
    webhook: { id: webhook.id, deliveryId: delivery.id },
    tierRequest: tier.id, auditEvent: events[0].id, targetKey, ghost,
  };
}

async function credentialFor(
  t: TestApp,
  c: Caller,
  appA: AppFixture,
  appB: AppFixture,
  onRestrict: (id: string) => void,
  onUser: (id: string) => void,
): Promise<string | null> {
  switch (c.kind) {
    case 'anonymous':
      return null;
    case 'user': {
      const roles = c.platform.length ? [await platformRole(t, [...c.platform])] : [];
      const user = await createUser(t, { roles });
      onUser(user.id);
      return (await sessionOf(t, user)).token;
    }
    case 'inactive-user': {
      // The session stays live: the 401 must come from the per-request account check itself.
      const user = await createUser(t, { roles: ['superadmin'] });
      const { token } = await sessionOf(t, user);
      if (c.id === 'suspendedUser') await sql(t, `UPDATE users SET status = 'suspended' WHERE id = $1`, [user.id]);
      else await sql(t, `UPDATE users SET status = 'deleted', deleted_at = now() WHERE id = $1`, [user.id]);
      return token;
    }
    case 'key': {
      const app = c.app === 'own' ? appA : c.app === 'other' ? appB : null;
      const key = await createApiKey(t, {
        scope: app ? app.id : 'platform',
        permissions: app ? [...(c.confined ?? []), `app.${app.slug}.read`] : [...c.platform],
        mode: c.test ? 'test' : 'live',
        intendedUse: c.restrictDestructive ? 'agent' : 'service',
        restrictDestructive: !!c.restrictDestructive,
      });
      if (c.restrictDestructive) onRestrict(key.id);
      return key.secret;
    }
  }
}

// ---- throwaway targets ---------------------------------------------------------------------------

export async function grantPersonal(t: TestApp, cred: string, userId: string, applicationId: string): Promise<{ id: string }> {
  return assertOk(
    await call(t, 'POST', `/v1/users/${userId}/entitlements`, cred, { application_id: applicationId, source: 'admin_grant' }, { 'idempotency-key': `mx-${rand()}` }),
    201,
    'grant',
  );
}

/** A fresh live user, optionally with an active personal Entitlement to A (an access path for A's key). */
export async function freshUser(w: World, opts: { status?: 'active' | 'invited'; accessA?: boolean } = {}): Promise<TestUser & { entitlementId?: string }> {
  const user = await createUser(w.t, { status: opts.status ?? 'active' });
  if (opts.accessA === false) return user;
  return { ...user, entitlementId: (await grantPersonal(w.t, w.admin, user.id, w.appA.id)).id };
}

/** A fresh Application of a fresh owner declaring the app Roles viewer and editor, both unassigned. */
export async function freshAppWithRoles(w: World): Promise<string> {
  const owner = await createUser(w.t);
  const slug = `mxr${rand(4)}`;
  return assertOk(
    await call(w.t, 'POST', '/v1/applications', w.admin, { slug, name: 'Matrix roles', launch_url: `https://${slug}.example.com/`, owner_user_id: owner.id, available_app_roles: ['viewer', 'editor'] }),
    201,
    'application',
  ).id;
}

export async function freshPlatformRole(w: World): Promise<string> {
  return platformRole(w.t, []);
}

export async function freshWebhook(w: World): Promise<string> {
  return assertOk(await call(w.t, 'POST', '/v1/webhooks', w.admin, { scope: w.appA.id, url: 'https://127.0.0.1:9/matrix', events: ['*'] }), 201, 'webhook').id;
}

/** A fresh live Organization (SQL: creation through the API is limited to 10 per user per day) with one org_admin. */
export async function freshOrg(w: World): Promise<string> {
  const id = `org_${rand(8)}`;
  await sql(w.t, `INSERT INTO organizations (id, name, created_by, test_mode, created_at, updated_at) VALUES ($1, 'Matrix fresh org', $2, false, now(), now())`, [id, w.org.adminId]);
  await sql(w.t, `INSERT INTO organization_members (organization_id, user_id, role, membership_status, invited_at, joined_at) VALUES ($1, $2, 'org_admin', 'active', now(), now())`, [id, w.org.adminId]);
  return id;
}

/** A fresh active plain member of the shared Organization. */
export async function freshOrgMember(w: World): Promise<string> {
  const user = await createUser(w.t);
  assertOk(await call(w.t, 'POST', `/v1/organizations/${w.org.id}/members`, w.admin, { user_id: user.id }), 201, 'add member');
  return user.id;
}

/** A fresh Enterprise Tenant of a fresh owner (no API creates Tenants). */
export async function freshTenant(w: World): Promise<string> {
  const id = `tnt_${rand(8)}`;
  const owner = await createUser(w.t);
  await sql(w.t, `INSERT INTO tenants (id, owner_type, owner_user_id, plan, created_at, updated_at) VALUES ($1, 'user', $2, 'enterprise', now(), now())`, [id, owner.id]);
  return id;
}

export async function freshErasureTarget(w: World): Promise<string> {
  const user = await freshUser(w);
  assertOk(await call(w.t, 'POST', `/v1/users/${user.id}/erasure-requests`, w.admin, {}), 202, 'erasure');
  return user.id;
}

/** A fresh user with access to A holding A's app Role editor. */
export async function freshEditor(w: World): Promise<string> {
  const user = await freshUser(w);
  assertOk(await call(w.t, 'POST', `/v1/users/${user.id}/roles/${w.appA.editorRole}`, w.admin, {}), 201, 'assign editor');
  return user.id;
}

export async function freshKey(w: World): Promise<string> {
  return (await createApiKey(w.t, { permissions: ['users.list'] })).id;
}

export async function freshSession(w: World, userId: string): Promise<string> {
  return (await sessionOf(w.t, { id: userId })).sessionId;
}
