// The OpenAPI description against what the service sends: webhook events, size limits, and real
// responses of the main read routes (validated against the document's response schemas and the spec's
// field tables). The description's own shape: openapi.test.ts.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { assertError, call, sql } from '../helpers/http.js';
import { assertStatus, customPlatformRole, grant, newApp, patchEnt, person, platformKey, rand } from '../access/support.js';
import { EVENT_TYPES, renderEnvelope, CURRENT_API_VERSION } from '../../src/modules/webhooks/catalog.js';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { inlineRefsOf } from './openapi-support.js';

// The service as openapi.test.ts builds it. Private webhook targets allowed: the webhooks section's test
// sends a test event to a loopback address.
let t: TestApp;
let doc: any;
before(async () => {
  t = await buildTestApp({ devClock: true, webhookAllowPrivateTargets: true });
  const res = await t.app.inject({ method: 'GET', url: '/v1/openapi.json' });
  assert.equal(res.statusCode, 200);
  doc = res.json();
});
after(() => t.close());

const inlineRefs = (node: any) => inlineRefsOf(doc, node);

test('the webhooks section describes each event the service sends (OpenAPI 3.1 webhooks): its envelope, data and the headers a receiver verifies; every event written by real operations validates against it', async () => {
  assert.deepEqual(Object.keys(doc.webhooks ?? {}).sort(), [...EVENT_TYPES].sort());
  for (const type of EVENT_TYPES) {
    const op = doc.webhooks[type].post;
    assert.ok(op.operationId && op.description, type);
    assert.deepEqual(op.parameters.filter((p: any) => p.in === 'header' && p.required).map((p: any) => p.name).sort(),
      ['Platform-Delivery-Attempt', 'Platform-Delivery-Id', 'Platform-Event-Id', 'Platform-Event-Type', 'Platform-Signature']);
    assert.ok(op.responses['2XX'] && op.responses['410'], type);
  }
  // Events written by the operations of Part B's Events tables, over HTTP.
  const admin = await platformKey(t);
  const superadmin = await person(t, { roles: ['superadmin'] });
  const app = await newApp(t, admin);
  const u = await person(t);
  const ent = await grant(t, admin, u.id, app.id);
  const later = (s: number) => new Date(t.clock.now().getTime() + s * 1000).toISOString();
  assertStatus(await patchEnt(t, admin, ent.id, { ends_at: later(86400) }), 200);
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'Payment failed' }), 200);
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'revoked', disabled_reason: 'Refunded' }), 200);
  assert.equal((await call(t, 'DELETE', `/v1/entitlements/${ent.id}`, admin)).statusCode, 204);
  const v = await person(t);
  await grant(t, admin, v.id, app.id, { ends_at: later(60) });
  const roleId = await customPlatformRole(t, ['users.list']);
  assertStatus(await call(t, 'POST', `/v1/users/${u.id}/roles/${roleId}`, admin, {}), 201);
  assert.equal((await call(t, 'DELETE', `/v1/users/${u.id}/roles/${roleId}`, admin)).statusCode, 204);
  assertStatus(await call(t, 'POST', `/v1/users/${u.id}/suspend`, admin, {}), 200);
  assertStatus(await call(t, 'PATCH', `/v1/users/${u.id}`, admin, { status: 'active' }), 200);
  const org = assertStatus(await call(t, 'POST', '/v1/organizations', superadmin.token, { name: 'Webhook Docs Org' }), 201);
  const orgEnt = assertStatus(await call(t, 'POST', `/v1/organizations/${org.id}/entitlements`, admin, { application_id: app.id }, { 'idempotency-key': `org-${org.id}` }), 201);
  assertStatus(await call(t, 'POST', `/v1/organizations/${org.id}/members`, admin, { user_id: u.id }), 201);
  assertStatus(await patchEnt(t, admin, orgEnt.id, { member_scope: 'denylist', member_overrides: [u.id] }), 200);
  assert.equal((await call(t, 'DELETE', `/v1/organizations/${org.id}/members/${u.id}`, admin)).statusCode, 204);
  assert.equal((await call(t, 'DELETE', `/v1/users/${u.id}`, admin)).statusCode, 204);
  // This app serves the dev clock, which every process shares through the database: moved by its route.
  assert.equal((await t.app.inject({ method: 'POST', url: '/_dev/clock', payload: { advance_seconds: 120 } })).statusCode, 200);
  const swept = await t.deps.jobs.runNow('entitlement-expiry');
  assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { review_status: 'suspended', review_notes: 'policy' }), 200);
  const sub = assertStatus(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url: 'http://127.0.0.1:9/hook', events: ['*'] }), 201);
  assertStatus(await call(t, 'POST', `/v1/webhooks/${sub.id}/test`, admin), 202);

  const ajv = new Ajv2020({ strict: false, allErrors: true });
  const events = await sql<{ id: string; type: string; application_id: string | null; test_mode: boolean; data: any; created_at: Date }>(t, 'SELECT id, type, application_id, test_mode, data, created_at FROM outbox_events');
  const seen = new Set<string>();
  for (const e of events) {
    const validate = ajv.compile(inlineRefs(doc.webhooks[e.type].post.requestBody.content['application/json'].schema));
    const body = JSON.parse(renderEnvelope(e, CURRENT_API_VERSION));
    assert.ok(validate(body), `${e.type} ${JSON.stringify(body)}: ${ajv.errorsText(validate.errors)}`);
    seen.add(e.type);
  }
  assert.deepEqual([...EVENT_TYPES].filter((type) => !seen.has(type)), [], `every event type was written and checked (expiry sweep: ${JSON.stringify(swept)})`);
});

test('the description states the size limits the service checks (Part A: AppProfile custom 16 KB serialized; Part B: a permission key app.<slug>. then [a-z0-9_.]{1,64}, starts_at at most 1 year ahead, disabled_reason 1–255; docs/decisions.md: AppSettings overrides 16 KB, settings_schema 64 KB), and the service refuses exactly past them', async () => {
  const body = (path: string, method: string) => doc.paths[path][method].requestBody.content['application/json'].schema;
  const custom = body('/v1/users/{id}/apps/{appId}/profile', 'patch').properties.custom.description ?? '';
  const overrides = body('/v1/users/{id}/apps/{appId}/settings', 'patch').properties.overrides.description ?? '';
  assert.match(custom, /16 KB \(16,384 bytes/);
  assert.match(overrides, /16 KB \(16,384 bytes/);
  for (const method of ['post', 'patch']) {
    const app = body(method === 'post' ? '/v1/applications' : '/v1/applications/{id}', method).properties;
    assert.match(app.settings_schema.description ?? '', /64 KB \(65,536 bytes.*1,000 entries/);
    // app. + a 64-character slug + . + 64 characters: 133.
    assert.equal(app.permissions.items.properties.key.maxLength, 4 + 64 + 1 + 64);
  }
  for (const path of ['/v1/users/{id}/entitlements', '/v1/organizations/{id}/entitlements']) assert.match(body(path, 'post').properties.starts_at.description ?? '', /at most 1 year ahead/);
  assert.match(JSON.stringify(body('/v1/entitlements/{id}', 'patch').properties.disabled_reason), /1–255 characters/);

  // The limits stated are the ones checked: a 16,384-byte custom map is taken, one byte more is 422 naming custom.
  const admin = await platformKey(t);
  const app = await newApp(t, admin, { slug: `a${'b'.repeat(63)}` });
  const user = await person(t);
  await grant(t, admin, user.id, app.id);
  const url = `/v1/users/${user.id}/apps/${app.id}/profile`;
  const wrapper = Buffer.byteLength(JSON.stringify({ x: '' }));
  assertStatus(await call(t, 'PATCH', url, user.token, { custom: { x: 'é'.repeat((16384 - wrapper) / 2) } }), 200);
  const tooBig = assertError(await call(t, 'PATCH', url, user.token, { custom: { x: `${'é'.repeat((16384 - wrapper) / 2)}a` } }), 422, 'validation_failed');
  assert.deepEqual(tooBig.details.fields.map((f: { path: string }) => f.path), ['custom']);
  // The longest key the pattern allows fits the stated maxLength.
  assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { permissions: [{ key: `app.${app.slug}.${'k'.repeat(64)}` }] }), 200);
});

/**
 * The fields of each resource in the spec's field tables (Part A "Resources and their fields", Part B
 * "Resources and their fields"). Sessions list more than the export's four fields and expires_at
 * ("not shown" beyond them), so their check is a superset one.
 */
const SPEC_FIELDS = {
  user: ['id', 'email', 'email_verified', 'pending_email', 'status', 'mfa_enabled', 'signup_application_id', 'test_mode', 'created_at', 'updated_at', 'last_login_at'],
  profile: ['user_id', 'display_name', 'avatar_url', 'contact_email', 'contact_phone', 'locale', 'updated_at'],
  appProfile: ['user_id', 'application_id', 'display_handle', 'effective_display_name', 'custom', 'updated_at'],
  apiKey: ['id', 'name', 'scope', 'permissions', 'mode', 'intended_use', 'restrict_destructive', 'secret_hint', 'expires_at', 'created_by', 'last_used_at', 'created_at', 'revoked_at'],
  application: ['id', 'slug', 'name', 'description', 'icon_url', 'launch_url', 'redirect_uris', 'support_url', 'email_from_name', 'settings_schema', 'settings_schema_stats', 'permissions',
    'available_app_roles', 'default_app_role', 'visibility', 'owner_user_id', 'owner_organization_id', 'review_status', 'review_notes', 'tenant_id', 'test_mode', 'created_at', 'updated_at'],
  applicationListItem: ['id', 'slug', 'name', 'description', 'icon_url', 'visibility', 'review_status'],
  entitlement: ['id', 'user_id', 'organization_id', 'application_id', 'status', 'source', 'order_id', 'starts_at', 'ends_at', 'disabled_reason', 'member_scope', 'member_overrides', 'test_mode', 'created_at', 'updated_at'],
  role: ['id', 'name', 'scope', 'description', 'permissions', 'seed', 'assignment_count', 'created_at', 'updated_at'],
  assignment: ['user_id', 'role_id', 'application_id', 'assigned_at', 'assigned_by', 'implicit'],
  permission: ['key', 'scope', 'description'],
  effective: ['user_id', 'application_id', 'allowed', 'user_status', 'entitlement_status', 'access_paths', 'roles', 'effective_permissions', 'computed_at'],
  organization: ['id', 'name', 'status', 'member_count', 'created_by', 'test_mode', 'created_at', 'updated_at'],
  member: ['user_id', 'email', 'display_name', 'membership_status', 'role', 'invited_at', 'joined_at'],
  tenant: ['id', 'owner_type', 'owner_user_id', 'owner_organization_id', 'tier', 'plan', 'region', 'status', 'subscription_status', 'restricted', 'application_count', 'created_at', 'updated_at'],
  tierChangeRequest: ['id', 'tenant_id', 'from_tier', 'from_region', 'requested_tier', 'requested_region', 'status', 'reason', 'scheduled_for', 'notes', 'requested_by', 'created_at', 'started_at', 'completed_at'],
  subscription: ['tenant_id', 'plan', 'subscription_status', 'restricted', 'current_period_start', 'current_period_end', 'cancel_at_period_end', 'seats', 'add_ons', 'currency'],
  usage: ['tenant_id', 'plan', 'limits', 'fits_plans'],
  auditEvent: ['id', 'action', 'actor', 'target', 'target_user_id', 'application_id', 'organization_id', 'tenant_id', 'before', 'after', 'request_id', 'timestamp'],
  webhook: ['id', 'scope', 'url', 'events', 'description', 'status', 'api_version', 'test_mode', 'consecutive_failures', 'last_delivery_at', 'created_at', 'updated_at'],
  delivery: ['id', 'event_id', 'event_type', 'attempt', 'status', 'response_status', 'duration_ms', 'error', 'next_retry_at', 'created_at'],
  session: ['id', 'created_at', 'ip_address', 'user_agent', 'expires_at'],
  exportBundle: ['exported_at', 'user', 'profile', 'settings', 'identities', 'sessions', 'organizations', 'roles', 'applications', 'audit_events'],
} as const;

interface Read {
  path: string;
  url: string;
  cred: string;
  /** The spec's fields of the body, or of each list item; `extra` fields the spec adds in that view. */
  fields: readonly string[];
  extra?: readonly string[];
  superset?: boolean;
  /** The fields of nested objects the spec spells out, by dotted path from the item (`personal`, `org`: the access path of that kind). */
  nested?: Record<string, readonly string[]>;
}

/** One of each main resource, made over HTTP where an operation makes it, and the GET that reads it. */
async function mainReads(): Promise<Read[]> {
  const admin = await platformKey(t);
  const app = await newApp(t, admin, { redirect_uris: ['https://app.example.com/cb'] });
  const owner = app.owner!;
  const u = await person(t);
  const ent = await grant(t, admin, u.id, app.id);
  assertStatus(await call(t, 'PATCH', `/v1/users/${u.id}/apps/${app.id}/profile`, u.token, { display_handle: 'handle', custom: { a: 1 } }), 200);
  const org = assertStatus(await call(t, 'POST', '/v1/organizations', u.token, { name: 'Contract Org' }), 201);
  assertStatus(await call(t, 'POST', `/v1/organizations/${org.id}/entitlements`, admin, { application_id: app.id }, { 'idempotency-key': `contract-${org.id}` }), 201);
  const role = assertStatus(await call(t, 'POST', '/v1/roles', admin, { name: `contract${rand(4)}`, scope: 'platform', permissions: ['users.list'] }), 201);
  assertStatus(await call(t, 'POST', `/v1/users/${u.id}/roles/${role.id}`, admin, {}), 201);
  const key = assertStatus(await call(t, 'POST', '/v1/api-keys', owner.token, { name: 'contract', scope: app.id, permissions: [] }), 201);
  const hook = assertStatus(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url: 'http://127.0.0.1:9/hook', events: ['*'] }), 201);
  assertStatus(await call(t, 'POST', `/v1/webhooks/${hook.id}/test`, admin), 202);
  await sql(t, `UPDATE tenants SET plan = 'enterprise' WHERE id = $1`, [app.tenant_id]);
  const tcr = assertStatus(await call(t, 'POST', `/v1/tenants/${app.tenant_id}/tier-change-requests`, admin, { requested_tier: 'isolated', reason: 'contract' }), 201);
  const [audit] = await sql<{ id: string }>(t, `SELECT id FROM audit_events WHERE action = 'entitlement.granted' AND target_id = $1`, [ent.id]);
  const F = SPEC_FIELDS;
  return [
    { path: '/v1/users', url: `/v1/users?email=${encodeURIComponent(u.email)}`, cred: admin, fields: F.user },
    { path: '/v1/users/{id}', url: '/v1/users/me', cred: u.token, fields: F.user },
    { path: '/v1/users/{id}/profile', url: '/v1/users/me/profile', cred: u.token, fields: F.profile },
    { path: '/v1/users/{id}/apps/{appId}/profile', url: `/v1/users/me/apps/${app.id}/profile`, cred: u.token, fields: F.appProfile },
    { path: '/v1/users/{id}/sessions', url: '/v1/users/me/sessions', cred: u.token, fields: F.session, superset: true },
    { path: '/v1/users/{id}/export', url: '/v1/users/me/export', cred: u.token, fields: F.exportBundle },
    { path: '/v1/api-keys', url: `/v1/api-keys?scope=${app.id}`, cred: owner.token, fields: F.apiKey, nested: { created_by: ['type', 'id'] } },
    { path: '/v1/api-keys/{id}', url: `/v1/api-keys/${key.id}`, cred: owner.token, fields: F.apiKey },
    { path: '/v1/applications', url: '/v1/applications', cred: admin, fields: F.applicationListItem },
    { path: '/v1/applications/{id}', url: `/v1/applications/${app.id}`, cred: admin, fields: F.application },
    { path: '/v1/users/{id}/entitlements', url: '/v1/users/me/entitlements', cred: u.token, fields: F.entitlement, extra: ['granted_via'] },
    { path: '/v1/entitlements', url: `/v1/entitlements?user_id=${u.id}`, cred: admin, fields: F.entitlement },
    { path: '/v1/entitlements/{id}', url: `/v1/entitlements/${ent.id}`, cred: admin, fields: F.entitlement },
    { path: '/v1/organizations/{id}/entitlements', url: `/v1/organizations/${org.id}/entitlements`, cred: admin, fields: F.entitlement, extra: ['included_member_count'] },
    { path: '/v1/permissions', url: '/v1/permissions', cred: admin, fields: F.permission },
    { path: '/v1/roles', url: '/v1/roles?scope=platform', cred: admin, fields: F.role },
    { path: '/v1/roles/{id}', url: `/v1/roles/${role.id}`, cred: admin, fields: F.role },
    { path: '/v1/users/{id}/roles', url: '/v1/users/me/roles', cred: u.token, fields: F.assignment },
    { path: '/v1/users/{id}/apps/{appId}/effective-permissions', url: `/v1/users/me/apps/${app.id}/effective-permissions`, cred: u.token, fields: F.effective, nested: { 'access_paths.personal': ['source', 'entitlement_id', 'status'], 'access_paths.org': ['source', 'entitlement_id', 'status', 'organization_id', 'member_decision'] } },
    { path: '/v1/organizations', url: '/v1/organizations', cred: u.token, fields: F.organization, extra: ['my_role', 'my_membership_status'] },
    { path: '/v1/organizations', url: '/v1/organizations', cred: admin, fields: F.organization },
    { path: '/v1/organizations/{id}', url: `/v1/organizations/${org.id}`, cred: admin, fields: F.organization },
    { path: '/v1/organizations/{id}/members', url: `/v1/organizations/${org.id}/members`, cred: u.token, fields: F.member },
    { path: '/v1/tenants', url: '/v1/tenants', cred: owner.token, fields: F.tenant },
    { path: '/v1/tenants/{id}', url: `/v1/tenants/${app.tenant_id}`, cred: owner.token, fields: F.tenant },
    { path: '/v1/tenants/{id}/tier-change-requests', url: `/v1/tenants/${app.tenant_id}/tier-change-requests`, cred: owner.token, fields: F.tierChangeRequest },
    { path: '/v1/tenants/{id}/tier-change-requests/{requestId}', url: `/v1/tenants/${app.tenant_id}/tier-change-requests/${tcr.id}`, cred: owner.token, fields: F.tierChangeRequest },
    { path: '/v1/tenants/{id}/subscription', url: `/v1/tenants/${app.tenant_id}/subscription`, cred: owner.token, fields: F.subscription, nested: { seats: ['current', 'included', 'billable', 'last_synced_at'] } },
    { path: '/v1/tenants/{id}/usage', url: `/v1/tenants/${app.tenant_id}/usage`, cred: owner.token, fields: F.usage, nested: { limits: ['applications', 'seats', 'app_roles', 'webhooks', 'audit_hot_window_days'], 'limits.seats': ['limit', 'current', 'included'], 'limits.audit_hot_window_days': ['limit'] } },
    { path: '/v1/audit-events', url: `/v1/audit-events?target_id=${ent.id}`, cred: admin, fields: F.auditEvent },
    { path: '/v1/audit-events/{id}', url: `/v1/audit-events/${audit.id}`, cred: admin, fields: F.auditEvent, nested: { actor: ['type', 'id', 'via_api_key_id'], target: ['type', 'id'] } },
    { path: '/v1/webhooks', url: '/v1/webhooks', cred: admin, fields: F.webhook },
    { path: '/v1/webhooks/{id}', url: `/v1/webhooks/${hook.id}`, cred: admin, fields: F.webhook },
    { path: '/v1/webhooks/{id}/deliveries', url: `/v1/webhooks/${hook.id}/deliveries`, cred: admin, fields: F.delivery },
  ];
}

test('signing_secret (Part B: "create and rotate only") is documented, required, on the create and rotate-secret responses and on no read of a subscription (list, fetch, PATCH)', () => {
  const schemaOf = (path: string, method: string, status: string) => inlineRefs(doc.paths[path][method].responses[status].content['application/json'].schema);
  const fields = (s: any): { properties: string[]; required: string[] } => {
    const parts = [s, ...(s.allOf ?? [])];
    return { properties: parts.flatMap((p) => Object.keys(p.properties ?? {})), required: parts.flatMap((p) => p.required ?? []) };
  };
  for (const [path, method, status] of [['/v1/webhooks', 'post', '201'], ['/v1/webhooks/{id}/rotate-secret', 'post', '200']]) {
    assert.ok(fields(schemaOf(path, method, status)).required.includes('signing_secret'), `${method} ${path}`);
  }
  const reads = [fields(schemaOf('/v1/webhooks', 'get', '200').properties.data.items), fields(schemaOf('/v1/webhooks/{id}', 'get', '200')), fields(schemaOf('/v1/webhooks/{id}', 'patch', '200'))];
  for (const read of reads) {
    assert.ok(read.properties.includes('url'), read.properties.join());
    assert.ok(!read.properties.includes('signing_secret'), read.properties.join());
  }
});

let reads: Promise<Read[]> | undefined;
const readsOnce = () => (reads ??= mainReads());

test('real responses of the main read routes validate against the document\'s own 200 response schemas, formats checked and each enumerated field one of the values the document lists', async () => {
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  addFormats.default(ajv);
  // What the service sends today is one of the values it documents (clients tolerate new ones later).
  ajv.addKeyword({ keyword: 'x-extensible-enum', type: 'string', schemaType: 'array', validate: (values: string[], data: string) => values.includes(data) });
  const checked = new Set<string>();
  for (const read of await readsOnce()) {
    const res = await call(t, 'GET', read.url, read.cred);
    assert.equal(res.statusCode, 200, `${read.url}: ${res.body}`);
    const body = res.json();
    if (Array.isArray(body.data)) assert.ok(body.data.length > 0, `${read.url} lists something`);
    const validate = ajv.compile(inlineRefs(doc.paths[read.path].get.responses['200'].content['application/json'].schema));
    assert.ok(validate(body), `${read.url}: ${ajv.errorsText(validate.errors)} in ${res.body}`);
    checked.add(read.path);
  }
  assert.equal(checked.size, 33);
});

test('the main read routes answer with the fields of the spec\'s field tables (Part A, Part B "Resources and their fields"), none dropped by the response schema', async () => {
  for (const read of await readsOnce()) {
    const res = await call(t, 'GET', read.url, read.cred);
    assert.equal(res.statusCode, 200, `${read.url}: ${res.body}`);
    const body = res.json();
    const item = Array.isArray(body.data) ? body.data[0] : body;
    assert.ok(item, `${read.url} lists something`);
    const expected = [...read.fields, ...(read.extra ?? [])].sort();
    const got = Object.keys(item).sort();
    if (read.superset) assert.deepEqual(expected.filter((f) => !got.includes(f)), [], `${read.url}: ${got.join(', ')}`);
    else assert.deepEqual(got, expected, `${read.url} (${read.cred.startsWith('plat_') ? 'key' : 'user'})`);
    for (const [path, fields] of Object.entries(read.nested ?? {})) {
      const step = (n: any, k: string) => (Array.isArray(n) && (k === 'personal' || k === 'org') ? n.find((p) => ('organization_id' in p) === (k === 'org')) : n?.[k]);
      const node = path.split('.').reduce(step, item);
      assert.deepEqual(Object.keys(node ?? {}).sort(), [...fields].sort(), `${read.url} ${path}`);
    }
  }
});
