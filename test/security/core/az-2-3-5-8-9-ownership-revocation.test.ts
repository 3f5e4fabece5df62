// AZ-2, AZ-3, AZ-5, AZ-8, AZ-9: what the generated matrix (one caller per class) and the module tests
// leave open. Owners, org admins and Tenant owners of one side against the other side's ids; an
// app-confined key filtering for foreign rows; pending invitees; role and access changes seen on the
// very next request; read-only fields on Organizations and at signup (Users: test/users/status.test.ts).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../../helpers/app.js';
import { PASSWORD } from '../../helpers/fixtures.js';
import {
  appKey, assertError, assertStatus, call, customPlatformRole, grant, newApp, person, platformKey, rand, sql, type AppFixture, type Person,
} from '../../access/support.js';
import { figure } from './support.js';

let t: TestApp;
let admin: string;
before(async () => {
  t = await buildTestApp({ webhookAllowPrivateTargets: true });
  admin = await platformKey(t);
});
after(() => t.close());

const idem = () => ({ 'idempotency-key': `k${rand(6)}` });

interface Side {
  owner: Person; app: AppFixture; orgId: string; member: Person; entId: string; hookId: string; deliveryId: string; keyId: string; sessionId: string; tierRequestId: string; auditId: string;
}

/** One owner's world: an Application (and its Tenant), an Organization they admin, a webhook with a delivery, a key. */
async function side(): Promise<Side> {
  const app = await newApp(t, admin);
  const owner = app.owner!;
  const orgId = assertStatus(await call(t, 'POST', '/v1/organizations', owner.token, { name: `Org ${rand()}` }), 201).id;
  const member = await person(t);
  assertStatus(await call(t, 'POST', `/v1/organizations/${orgId}/members`, admin, { user_id: member.id }), 201);
  const entId = (await grant(t, admin, owner.id, app.id)).id;
  const hookId = assertStatus(await call(t, 'POST', '/v1/webhooks', owner.token, { scope: app.id, url: 'http://127.0.0.1:9/hook', events: ['*'] }), 201).id;
  assertStatus(await call(t, 'POST', `/v1/webhooks/${hookId}/test`, owner.token, {}), 202);
  await t.deps.jobs.runNow('webhook-delivery');
  const [delivery] = await sql(t, 'SELECT id FROM webhook_deliveries WHERE subscription_id = $1 LIMIT 1', [hookId]);
  const keyId = assertStatus(await call(t, 'POST', '/v1/api-keys', owner.token, { name: 'k', scope: app.id, permissions: [] }), 201).id;
  const [session] = await sql(t, 'SELECT id FROM sessions WHERE user_id = $1 LIMIT 1', [owner.id]);
  await sql(t, `UPDATE tenants SET plan = 'enterprise' WHERE id = $1`, [app.tenant_id]);
  const tierRequestId = assertStatus(await call(t, 'POST', `/v1/tenants/${app.tenant_id}/tier-change-requests`, admin, { requested_tier: 'isolated', reason: 'x' }), 201).id;
  const [audit] = await sql(t, 'SELECT id FROM audit_events WHERE tenant_id = $1 LIMIT 1', [app.tenant_id]);
  assert.ok(delivery && audit, 'the side has a delivery and an audit event');
  return { owner, app, orgId, member, entId, hookId, deliveryId: delivery.id, keyId, sessionId: session.id, tierRequestId, auditId: audit.id };
}

test('AZ-2 / AZ-5 an owner, org admin and Tenant owner of side A against every {id} path of side B: "404 with the resource\'s documented code, never 403 and never data"', async () => {
  const A = await side();
  const B = await side();
  const u = B.owner.id;
  const tenant = `/v1/tenants/${B.app.tenant_id}`;
  const cases: [string, string, unknown?][] = [
    ['GET', `/v1/users/${u}`], ['PATCH', `/v1/users/${u}`, { email: `x${rand()}@example.com` }], ['DELETE', `/v1/users/${u}`],
    ['GET', `/v1/users/${u}/profile`], ['PATCH', `/v1/users/${u}/profile`, { display_name: 'x' }],
    ['GET', `/v1/users/${u}/sessions`], ['DELETE', `/v1/users/${u}/sessions/${B.sessionId}`], ['GET', `/v1/users/${u}/export`],
    ['GET', `/v1/users/${u}/apps/${B.app.id}/profile`], ['PATCH', `/v1/users/${u}/apps/${B.app.id}/profile`, { display_handle: 'x' }],
    ['GET', `/v1/users/${u}/apps/${A.app.id}/profile`], ['GET', `/v1/users/${u}/entitlements`], ['GET', `/v1/users/${u}/roles`],
    ['GET', `/v1/users/${u}/apps/${B.app.id}/effective-permissions`],
    ['GET', `/v1/entitlements/${B.entId}`], ['PATCH', `/v1/entitlements/${B.entId}`, { ends_at: null }],
    ['GET', `/v1/organizations/${B.orgId}`], ['PATCH', `/v1/organizations/${B.orgId}`, { name: 'hijack' }],
    ['GET', `/v1/organizations/${B.orgId}/members`], ['POST', `/v1/organizations/${B.orgId}/members`, { user_id: A.member.id }],
    ['PATCH', `/v1/organizations/${B.orgId}/members/${B.member.id}`, { role: 'org_admin' }], ['DELETE', `/v1/organizations/${B.orgId}/members/${B.member.id}`],
    ['GET', `/v1/organizations/${B.orgId}/entitlements`],
    ['GET', tenant], ['GET', `${tenant}/subscription`], ['GET', `${tenant}/usage`], ['GET', `${tenant}/tier-change-requests`],
    ['GET', `${tenant}/tier-change-requests/${B.tierRequestId}`], ['GET', `/v1/tenants/${A.app.tenant_id}/tier-change-requests/${B.tierRequestId}`],
    ['POST', `${tenant}/billing/checkout-sessions`, { plan: 'team', success_url: 'https://x.example.com/s', cancel_url: 'https://x.example.com/c' }],
    ['POST', `${tenant}/billing/portal-sessions`, { return_url: 'https://x.example.com/r' }],
    ['GET', `/v1/webhooks/${B.hookId}`], ['PATCH', `/v1/webhooks/${B.hookId}`, { description: 'x' }], ['POST', `/v1/webhooks/${B.hookId}/rotate-secret`, {}],
    ['POST', `/v1/webhooks/${B.hookId}/test`, {}], ['GET', `/v1/webhooks/${B.hookId}/deliveries`], ['DELETE', `/v1/webhooks/${B.hookId}`],
    ['POST', `/v1/webhooks/${B.hookId}/deliveries/${B.deliveryId}/redeliver`, {}], ['POST', `/v1/webhooks/${A.hookId}/deliveries/${B.deliveryId}/redeliver`, {}],
    ['GET', `/v1/api-keys/${B.keyId}`], ['PATCH', `/v1/api-keys/${B.keyId}`, { name: 'x' }], ['POST', `/v1/api-keys/${B.keyId}/rotate`, {}], ['DELETE', `/v1/api-keys/${B.keyId}`],
    ['GET', `/v1/audit-events/${B.auditId}`],
  ];
  const secrets = [B.owner.email, B.member.email, B.sessionId];
  const leaks: string[] = [];
  for (const [method, url, body] of cases) {
    const res = await call(t, method, url, A.owner.token, body, method === 'POST' ? idem() : {});
    const code = res.statusCode === 404 ? res.json().error?.code : undefined;
    if (res.statusCode !== 404 || !/_not_found$/.test(code) || secrets.some((s) => res.body.includes(s))) leaks.push(`${method} ${url} -> ${res.statusCode} ${res.body.slice(0, 160)}`);
  }
  // DELETE of an entitlement is function-level (entitlements.manage only): the same 403 for a real and a made-up id.
  assertError(await call(t, 'DELETE', `/v1/entitlements/${B.entId}`, A.owner.token), 403, 'forbidden');
  assertError(await call(t, 'DELETE', '/v1/entitlements/ent_01M8C2MABJ43X1NYQR1NGHTK99', A.owner.token), 403, 'forbidden');
  figure('AZ-2', `leaks: ${leaks.length} / ${cases.length} cross-owner calls`);
  assert.deepEqual(leaks, []);
  // Nothing of B changed.
  assert.notEqual((await sql(t, 'SELECT name FROM organizations WHERE id = $1', [B.orgId]))[0].name, 'hijack');
  assert.equal((await sql(t, 'SELECT revoked_at FROM api_keys WHERE id = $1', [B.keyId]))[0].revoked_at, null);
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM webhook_subscriptions WHERE id = $1', [B.hookId]))[0].n, 1);
});

test('AZ-5 "a pending invitee reading the org (404)": the Organization, its members and its grants are 404 organization_not_found until accepted', async () => {
  const orgAdmin = await person(t);
  const org = assertStatus(await call(t, 'POST', '/v1/organizations', orgAdmin.token, { name: `O ${rand()}` }), 201);
  const invitee = await person(t);
  assertStatus(await call(t, 'POST', `/v1/organizations/${org.id}/members`, orgAdmin.token, { email: invitee.email }), 201);
  for (const path of ['', '/members', '/entitlements']) assertError(await call(t, 'GET', `/v1/organizations/${org.id}${path}`, invitee.token), 404, 'organization_not_found');
  assertStatus(await call(t, 'POST', `/v1/organizations/${org.id}/members/me/accept`, invitee.token, {}), 200);
  for (const path of ['', '/members', '/entitlements']) assertStatus(await call(t, 'GET', `/v1/organizations/${org.id}${path}`, invitee.token), 200);
});

test('AZ-3 an app-A key with users.list, audit.view and roles.manage filtering for app B\'s user: "foreign rows returned (0)" by email, audit target_user_id or application_id, and the user\'s roles are 404', async () => {
  const A = await newApp(t, admin);
  const B = await newApp(t, admin);
  const [withA, withB] = [await person(t), await person(t)];
  await grant(t, admin, withA.id, A.id);
  await grant(t, admin, withB.id, B.id);
  const key = await appKey(t, A.id, ['users.list', 'audit.view', 'entitlements.manage', 'roles.manage']);
  let foreign = 0;
  foreign += assertStatus(await call(t, 'GET', `/v1/users?email=${encodeURIComponent(withB.email)}`, key), 200).data.length;
  assert.equal(assertStatus(await call(t, 'GET', `/v1/users?email=${encodeURIComponent(withA.email)}`, key), 200).data.length, 1, 'the filter itself works');
  for (const query of [`target_user_id=${withB.id}`, `application_id=${B.id}`, `tenant_id=${B.tenant_id}`]) {
    const res = await call(t, 'GET', `/v1/audit-events?${query}`, key);
    if (res.statusCode === 200) foreign += res.json().data.filter((e: { application_id: string | null }) => e.application_id !== A.id).length;
    else assertError(res, 403, 'forbidden');
  }
  assertError(await call(t, 'GET', `/v1/users/${withB.id}/roles`, key), 404, 'user_not_found');
  figure('AZ-3', `foreign rows returned: ${foreign}`);
  assert.equal(foreign, 0);
});

test('AZ-8 "denied on the next request": removing a platform role or editing its permissions; editing or removing an app role changes effective-permissions at once; revoking the entitlement also stops app-token issuance', async () => {
  const role = await customPlatformRole(t, ['users.list']);
  const u = await person(t, { roles: [role] });
  assertStatus(await call(t, 'GET', '/v1/users', u.token), 200);
  assert.equal((await call(t, 'DELETE', `/v1/users/${u.id}/roles/${role}`, admin)).statusCode, 204);
  assertError(await call(t, 'GET', '/v1/users', u.token), 403, 'forbidden');
  const edited = await customPlatformRole(t, ['users.list']);
  const v = await person(t, { roles: [edited] });
  assertStatus(await call(t, 'GET', '/v1/users', v.token), 200);
  assertStatus(await call(t, 'PATCH', `/v1/roles/${edited}`, admin, { permissions: ['audit.view'] }), 200);
  assertError(await call(t, 'GET', '/v1/users', v.token), 403, 'forbidden');

  const slug = `r${rand(4)}`;
  const [read, write] = [`app.${slug}.read`, `app.${slug}.write`];
  const app = await newApp(t, admin, { slug, available_app_roles: ['editor'], permissions: [{ key: read, description: 'read' }, { key: write, description: 'write' }] });
  await sql(t, `UPDATE tenants SET plan = 'enterprise' WHERE id = $1`, [app.tenant_id]);
  const holder = await person(t);
  const ent = await grant(t, admin, holder.id, app.id);
  const appRole = `role_${slug}_editor`;
  assertStatus(await call(t, 'PATCH', `/v1/roles/${appRole}`, admin, { permissions: [read, write] }), 200);
  assertStatus(await call(t, 'POST', `/v1/users/${holder.id}/roles/${appRole}`, admin, {}), 201);
  const effective = async () => assertStatus(await call(t, 'GET', `/v1/users/${holder.id}/apps/${app.id}/effective-permissions`, admin), 200);
  assert.deepEqual([...(await effective()).effective_permissions].sort(), [read, write]);
  assertStatus(await call(t, 'PATCH', `/v1/roles/${appRole}`, admin, { permissions: [read] }), 200);
  assert.deepEqual((await effective()).effective_permissions, [read], 'the edited-out permission is gone at once');
  assert.equal((await call(t, 'DELETE', `/v1/users/${holder.id}/roles/${appRole}`, admin)).statusCode, 204);
  assert.deepEqual((await effective()).effective_permissions, [], 'the removed role is gone at once');

  // App tokens carry no permissions (the Application asks effective-permissions); issuance itself stops.
  assertStatus(await call(t, 'POST', '/v1/auth/app-tokens', holder.token, { application_id: app.id }), 200);
  assertStatus(await call(t, 'PATCH', `/v1/entitlements/${ent.id}`, admin, { status: 'revoked', disabled_reason: 'AZ-8' }), 200);
  assertError(await call(t, 'POST', '/v1/auth/app-tokens', holder.token, { application_id: app.id }), 403, 'entitlement_required');
  const after = await effective();
  assert.equal(after.allowed, false);
  assert.deepEqual(after.effective_permissions, []);
  figure('AZ-8', 'staleness: 0 ms (every change refused or reflected on the very next request)');
});

test('AZ-9 read-only fields on an Organization (test_mode, id, member_count, created_by: 422 read_only_field) and at signup (id, status, email_verified, mfa_enabled: not fields of signup, 422 validation_failed), naming the field; "stored values unchanged"', async () => {
  const orgAdmin = await person(t);
  const org = assertStatus(await call(t, 'POST', '/v1/organizations', orgAdmin.token, { name: 'Kept' }), 201);
  const before = (await sql(t, 'SELECT * FROM organizations WHERE id = $1', [org.id]))[0];
  let changed = 0;
  for (const [field, value] of [['test_mode', true], ['id', 'org_x'], ['member_count', 99], ['created_by', orgAdmin.id]] as const) {
    for (const cred of [orgAdmin.token, admin]) {
      const res = await call(t, 'PATCH', `/v1/organizations/${org.id}`, cred, { name: 'Changed', [field]: value });
      const error = assertError(res, 422, 'read_only_field');
      assert.ok(JSON.stringify(error.details).includes(field), res.body);
    }
  }
  const after = (await sql(t, 'SELECT * FROM organizations WHERE id = $1', [org.id]))[0];
  for (const column of Object.keys(before)) if (JSON.stringify(after[column]) !== JSON.stringify(before[column])) changed++;

  const email = `az9-${rand()}@example.com`;
  for (const [field, value] of [['id', 'usr_evil'], ['status', 'active'], ['email_verified', true], ['mfa_enabled', true]] as const) {
    const res = await call(t, 'POST', '/v1/auth/signup', null, { email, password: PASSWORD, [field]: value });
    const error = assertError(res, 422, 'validation_failed');
    assert.ok(JSON.stringify(error.details).includes(field), res.body);
  }
  changed += (await sql(t, 'SELECT count(*)::int AS n FROM users WHERE lower(email) = $1', [email]))[0].n;
  figure('AZ-9', `fields changed: ${changed}`);
  assert.equal(changed, 0);
});

test('AZ-9 every PATCH answers a read-only field of its resource with 422 read_only_field naming it, and nothing changes: AppProfile, API key, Organization member, Profile, Settings, AppSettings', async () => {
  const app = await newApp(t, admin, { settings_schema: { type: 'object', properties: { color: { type: 'string' } } } });
  const owner = app.owner!;
  const user = await person(t);
  await grant(t, admin, user.id, app.id);
  const keyId = assertStatus(await call(t, 'POST', '/v1/api-keys', owner.token, { name: 'k', scope: app.id, permissions: [] }), 201).id;
  const orgId = assertStatus(await call(t, 'POST', '/v1/organizations', owner.token, { name: `Org ${rand()}` }), 201).id;
  assertStatus(await call(t, 'POST', `/v1/organizations/${orgId}/members`, admin, { user_id: user.id }), 201);
  const cases: [string, string, Record<string, unknown>, string[]][] = [
    [`/v1/users/me/apps/${app.id}/profile`, user.token, { display_handle: 'h' }, ['effective_display_name', 'user_id', 'application_id', 'updated_at']],
    [`/v1/api-keys/${keyId}`, owner.token, { name: 'renamed' }, ['scope', 'mode', 'intended_use', 'expires_at', 'secret_hint', 'created_by', 'last_used_at', 'revoked_at', 'id']],
    [`/v1/organizations/${orgId}/members/${user.id}`, owner.token, { role: 'org_admin' }, ['membership_status', 'joined_at', 'email', 'user_id']],
    ['/v1/users/me/profile', user.token, { display_name: 'Renamed' }, ['user_id', 'updated_at']],
    ['/v1/users/me/settings', user.token, { theme: 'dark' }, ['user_id', 'updated_at']],
    [`/v1/users/me/apps/${app.id}/settings`, user.token, { overrides: { color: 'red' } }, ['user_id', 'application_id', 'updated_at']],
  ];
  let refused = 0;
  for (const [path, cred, writable, readOnly] of cases) {
    // A member has no GET of its own: it is read from its Organization's member list.
    const read = async () => path.includes('/members/')
      ? assertStatus(await call(t, 'GET', `/v1/organizations/${orgId}/members?limit=100`, cred), 200).data.find((m: { user_id: string }) => m.user_id === user.id)
      : assertStatus(await call(t, 'GET', path, cred), 200);
    const before = await read();
    assert.ok(before, 'before');
    for (const field of readOnly) {
      const res = await call(t, 'PATCH', path, cred, { ...writable, [field]: 'x' });
      assert.deepEqual(assertError(res, 422, 'read_only_field').details, { fields: [field] }, `${path} ${field}`);
      refused++;
    }
    assert.deepEqual(await read(), before, `${path}: stored values unchanged`);
  }
  figure('AZ-9', `read-only PATCH fields refused: ${refused}`);
});
