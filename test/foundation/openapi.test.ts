import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { LINK_PAGE_PATHS } from '../../src/modules/links/paths.js';
import { ERROR_CODES } from '../../src/errors.js';
import { userToken } from '../helpers/fixtures.js';
import { assertError, call } from '../helpers/http.js';
import { EVENT_TYPES } from '../../src/modules/webhooks/catalog.js';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { Validator } from '@seriousme/openapi-schema-validator';
import { operationsOf } from './openapi-support.js';

// DEV_CLOCK on, so the /_dev routes are served: the description must still leave them out. Private
// webhook targets allowed: the webhooks section's test sends a test event to a loopback address.
let t: TestApp;
let doc: any;
before(async () => {
  t = await buildTestApp({ devClock: true, webhookAllowPrivateTargets: true });
  const res = await t.app.inject({ method: 'GET', url: '/v1/openapi.json' });
  assert.equal(res.statusCode, 200);
  doc = res.json();
});
after(() => t.close());

const ERROR_ENVELOPE_REF = '#/components/schemas/ErrorEnvelope';

const operations = () => operationsOf(doc);

/**
 * The destructive classification of Part A convention 11: always for every DELETE, user suspend,
 * erasure request, tier-change request creation (role deletion and role assignment removal are
 * DELETEs); conditional for entitlement PATCH, logout and a user PATCH to status suspended (a suspend).
 */
function expectedDestructive(method: string, path: string): 'always' | 'conditional' | undefined {
  if (method === 'delete') return 'always';
  if (method === 'post' && /^\/v1\/users\/\{[^}]+\}\/suspend$/.test(path)) return 'always';
  if (method === 'post' && /^\/v1\/users\/\{[^}]+\}\/erasure-requests$/.test(path)) return 'always';
  if (method === 'post' && /tier-change-requests$/.test(path)) return 'always';
  if (method === 'post' && path === '/v1/auth/logout') return 'conditional';
  if (method === 'patch' && /^\/v1\/entitlements\/\{[^}]+\}$/.test(path)) return 'conditional';
  // A user suspend asked for through PATCH status suspended.
  if (method === 'patch' && /^\/v1\/users\/\{[^}]+\}$/.test(path)) return 'conditional';
  // A role deletion asked for through an Application PATCH that drops a name from available_app_roles.
  if (method === 'patch' && /^\/v1\/applications\/\{[^}]+\}$/.test(path)) return 'conditional';
  return undefined;
}

/** Fastify's route tree (printRoutes) flattened to method + path pairs. */
function servedRoutes(): { method: string; url: string }[] {
  const tree = t.app.printRoutes({ commonPrefix: false });
  const stack: string[] = [];
  const out: { method: string; url: string }[] = [];
  for (const line of tree.split('\n')) {
    const m = /^(.*?)(?:├── |└── )(\S+)(?: \(([^)]*)\))?\s*$/.exec(line);
    if (!m) continue;
    const depth = Math.round(m[1].length / 4);
    stack.length = depth;
    const url = (stack[depth - 1] ?? '') + m[2];
    stack[depth] = url;
    for (const method of (m[3] ?? '').split(',').map((s) => s.trim().toLowerCase()).filter(Boolean)) out.push({ method, url });
  }
  return out;
}

const toOpenApiPath = (url: string) => url.replace(/:([A-Za-z0-9_]+)/g, '{$1}');

test('GET /v1/openapi.json is an OpenAPI 3.1 document of the service', () => {
  assert.equal(typeof doc.openapi, 'string');
  assert.ok(doc.openapi.startsWith('3.1'), doc.openapi);
  assert.equal(typeof doc.info?.title, 'string');
  assert.equal(typeof doc.info?.version, 'string');
  assert.equal(doc.servers?.[0]?.url, t.config.publicUrl);
  assert.equal(typeof doc.paths, 'object');
});

test('the description is a valid OpenAPI 3.1 document (the official OpenAPI 3.1 schema), and each of its Schema Objects a valid JSON Schema 2020-12 schema, as generated clients and outside tools read it', async () => {
  const validator = new Validator();
  const result = await validator.validate(structuredClone(doc));
  assert.equal(validator.version, '3.1');
  assert.ok(result.valid, JSON.stringify(result.errors, null, 1)?.slice(0, 2000));
  // The OpenAPI 3.1 schema leaves Schema Objects to the JSON Schema dialect: check each against it.
  const metaschema = new Ajv2020({ strict: false, validateFormats: false });
  const invalid: string[] = [];
  let checked = 0;
  const walk = (node: unknown, path: string): void => {
    if (!node || typeof node !== 'object') return;
    for (const [key, value] of Object.entries(node)) {
      const at = `${path}/${key}`;
      const isSchema = (key === 'schema' && value && typeof value === 'object') || path === '#/components/schemas';
      if (isSchema) {
        checked++;
        if (!metaschema.validateSchema(value as object)) invalid.push(`${at}: ${metaschema.errorsText()}`);
      } else walk(value, at);
    }
  };
  walk(doc, '#');
  assert.ok(checked > 100, `only ${checked} Schema Objects found`);
  assert.deepEqual(invalid, []);
});

test('the description has the operations of the service, including the discovery documents outside /v1', () => {
  const expected: [string, string][] = [
    ['post', '/v1/auth/login'],
    ['post', '/v1/auth/logout'],
    ['get', '/v1/users/{id}'],
    ['get', '/v1/users/{id}/sessions'],
    ['delete', '/v1/users/{id}/sessions/{sessionId}'],
    ['get', '/health'],
    ['get', '/.well-known/jwks.json'],
    ['get', '/.well-known/openid-configuration'],
    ['get', '/.well-known/oauth-authorization-server'],
  ];
  for (const [method, path] of expected) {
    assert.ok(doc.paths[path], `path ${path}`);
    assert.ok(doc.paths[path][method], `${method.toUpperCase()} ${path}`);
  }
  // Path parameters are declared.
  const params = doc.paths['/v1/users/{id}/sessions/{sessionId}'].delete.parameters.filter((p: any) => p.in === 'path').map((p: any) => p.name).sort();
  assert.deepEqual(params, ['id', 'sessionId']);
});

test('every operation has a unique operationId named after its method and path (Stripe\'s scheme), and every response a description of its own, for generated clients', () => {
  const ids = new Map<string, string>();
  for (const { method, path, op } of operations()) {
    assert.match(op.operationId ?? '', /^(Get|Post|Patch|Put|Delete)[A-Za-z0-9]+$/, `${method.toUpperCase()} ${path}`);
    assert.ok(!ids.has(op.operationId), `${op.operationId}: ${ids.get(op.operationId)} and ${method.toUpperCase()} ${path}`);
    ids.set(op.operationId, `${method.toUpperCase()} ${path}`);
    for (const [status, response] of Object.entries<any>(op.responses ?? {})) {
      assert.ok(response.description && response.description !== 'Default Response', `${op.operationId} ${status}: ${response.description}`);
    }
  }
  assert.equal(doc.paths['/v1/users/{id}/entitlements'].get.operationId, 'GetUsersIdEntitlements');
  assert.equal(doc.paths['/v1/users/{id}/apps/{appId}/effective-permissions'].get.operationId, 'GetUsersIdAppsAppIdEffectivePermissions');
  assert.equal(doc.paths['/.well-known/jwks.json'].get.operationId, 'GetWellKnownJwksJson');
  assert.equal(doc.paths['/v1/auth/login'].post.responses['200'].description, 'OK');
});

test('every DELETE operation is marked x-platform-destructive always', () => {
  const deletes = operations().filter((o) => o.method === 'delete');
  assert.ok(deletes.length >= 1, 'deletes.length >= 1');
  for (const { path, op } of deletes) {
    assert.equal(op['x-platform-destructive'], 'always', `DELETE ${path}`);
    assert.equal(op['x-platform-destructive-when'], undefined, `DELETE ${path}`);
  }
});

test('destructive operations carry the mark of convention 11, conditional ones with x-platform-destructive-when, and operations that are not destructive carry no mark', () => {
  for (const { method, path, op } of operations()) {
    const label = `${method.toUpperCase()} ${path}`;
    const expected = expectedDestructive(method, path);
    assert.equal(op['x-platform-destructive'], expected, label);
    if (expected === 'conditional') {
      assert.equal(typeof op['x-platform-destructive-when'], 'string', label);
      assert.ok(op['x-platform-destructive-when'].length > 0, label);
    } else {
      assert.equal(op['x-platform-destructive-when'], undefined, label);
    }
  }
  const logout = doc.paths['/v1/auth/logout'].post;
  assert.equal(logout['x-platform-destructive'], 'conditional');
  assert.match(logout['x-platform-destructive-when'], /all_sessions/);
});

test('every error response references the ErrorEnvelope schema, which has code, message and details', () => {
  const envelope = doc.components?.schemas?.ErrorEnvelope;
  assert.ok(envelope, 'components.schemas.ErrorEnvelope');
  assert.deepEqual([...envelope.required], ['error']);
  assert.deepEqual([...envelope.properties.error.required].sort(), ['code', 'details', 'message']);
  let count = 0;
  for (const { method, path, op } of operations()) {
    for (const [status, response] of Object.entries<any>(op.responses ?? {})) {
      if (!/^[45]/.test(status)) continue;
      count++;
      // Part A convention 6: the OAuth token endpoint answers in the RFC 6749 shape instead (400, and
      // its throttle's 429).
      if (method === 'post' && path === '/v1/auth/oauth/token' && (status === '400' || status === '429')) {
        assert.deepEqual([...response.content?.['application/json']?.schema?.required].sort(), ['error', 'error_description']);
        continue;
      }
      // The processor simulator's pages are HTML for a browser: their 404 is an HTML page too.
      if (path.startsWith('/billing/simulator/') && status === '404') {
        assert.deepEqual(Object.keys(response.content ?? {}), ['text/html'], `${method.toUpperCase()} ${path} ${status}`);
        continue;
      }
      assert.equal(response.content?.['application/json']?.schema?.$ref, ERROR_ENVELOPE_REF, `${method.toUpperCase()} ${path} ${status}`);
    }
  }
  assert.ok(count > 0, 'count > 0');
});

test('operations needing a credential declare bearer security and a 401; User-token operations a 400; destructive ones a 403', () => {
  assert.equal(doc.components?.securitySchemes?.bearer?.scheme, 'bearer');
  for (const { method, path, op } of operations()) {
    const label = `${method.toUpperCase()} ${path}`;
    assert.ok(Array.isArray(op.security), label);
    if (op.security.length > 0) {
      assert.deepEqual(op.security, [{ bearer: [] }], label);
      assert.ok(op.responses['401'], `${label} documents 401`);
    }
    if (op['x-platform-destructive']) assert.ok(op.responses['403'], `${label} documents 403`);
  }
  assert.ok(doc.paths['/v1/auth/logout'].post.responses['400'], 'logout documents 400 user_token_required');
  for (const path of ['/health', '/.well-known/jwks.json', '/.well-known/openid-configuration', '/v1/auth/login']) {
    assert.deepEqual(doc.paths[path][path === '/v1/auth/login' ? 'post' : 'get'].security, [], `${path} needs no credential`);
  }
});

test('statuses the service answers are documented and none it never answers: mfa/verify has 403 account_suspended; the SSO callback (501) has no 200', () => {
  const verify = doc.paths['/v1/auth/mfa/verify'].post.responses;
  assert.ok(verify['403'], 'mfa/verify answers 403 account_suspended for a suspended user with a right code');
  assert.match(verify['403'].description, /account_suspended/);
  const sso = doc.paths['/v1/auth/sso/{provider}/callback'].post.responses;
  assert.deepEqual(Object.keys(sso).filter((s) => s.startsWith('2')), [], 'no success response');
  assert.ok(sso['501'], 'the 501 not_implemented it always answers');
});

test('every operation documents 503 service_unavailable (the database unreachable or at its limits; writes to a migrating Tenant), and a status names every code it stands for', () => {
  for (const { method, path, op } of operations()) {
    assert.match(op.responses['503']?.description ?? '', /service_unavailable/, `${method.toUpperCase()} ${path} documents 503`);
  }
  // A Tenant write refused while it migrates (the audit's example), and a 403 with three causes.
  assert.match(doc.paths['/v1/users/{id}/entitlements'].post.responses['503'].description, /service_unavailable/);
  const suspend = doc.paths['/v1/users/{id}/suspend'].post.responses['403'].description;
  for (const code of ['status_change_forbidden', 'forbidden', 'destructive_operation_restricted']) assert.match(suspend, new RegExp(code), `suspend 403: ${suspend}`);
  const grant = doc.paths['/v1/users/{id}/entitlements'].post.responses['400'].description;
  for (const code of ['user_token_required', 'idempotency_key_required']) assert.match(grant, new RegExp(code), `grant 400: ${grant}`);
});

test('what the framework refuses before a route is documented on every operation: 400 bad_request (a URL not validly encoded); on every method but GET, whose body is read (a DELETE\'s too, docs/conventions.md), 413 payload_too_large and 415 unsupported_media_type, and 400 malformed_json where it is read as JSON (not the SSO callback, which reads none); with an Idempotency-Key 422 idempotency_key_reused', () => {
  for (const { method, path, op } of operations()) {
    if (path === '/v1/auth/oauth/token') continue; // RFC 6749 errors: every client error is 400 invalid_request
    const name = `${method.toUpperCase()} ${path}`;
    assert.match(op.responses['400']?.description ?? '', /bad_request/, `${name} 400`);
    if (method !== 'get') {
      if (path !== '/v1/auth/sso/{provider}/callback') assert.match(op.responses['400'].description, /malformed_json/, `${name} 400`);
      else assert.doesNotMatch(op.responses['400'].description, /malformed_json/, `${name} 400`);
      assert.match(op.responses['413']?.description ?? '', /payload_too_large/, `${name} 413`);
      assert.match(op.responses['415']?.description ?? '', /unsupported_media_type/, `${name} 415`);
    }
    if ((op.parameters ?? []).some((p: { name: string }) => p.name === 'Idempotency-Key')) {
      assert.match(op.responses['422']?.description ?? '', /idempotency_key_reused/, `${name} 422`);
    }
  }
});

test('417 expectation_failed (RFC 9110 §10.1.1: an Expect other than 100-continue) is documented on every operation, of any method; the token endpoint, which answers it as 400 invalid_request (RFC 6749, test/foundation/http-semantics.test.ts), does not list it', () => {
  for (const { method, path, op } of operations()) {
    const text = op.responses['417']?.description ?? '';
    if (path === '/v1/auth/oauth/token') assert.equal(text, '', path);
    else assert.match(text, /expectation_failed/, `${method.toUpperCase()} ${path} 417`);
  }
});

test('415 unsupported_media_type is documented as what refuses the body: on the two routes that take any content type raw (the SSO callback, the processor events), a compressed body (Content-Encoding), never "must be application/json"; a text/plain body is read there, a gzip-coded one is 415', async () => {
  for (const path of ['/v1/auth/sso/{provider}/callback', '/v1/billing/processor-events']) {
    const text = doc.paths[path].post.responses['415'].description;
    assert.match(text, /unsupported_media_type/, path);
    assert.doesNotMatch(text, /application\/json/, `${path}: ${text}`);
    assert.match(text, /Content-Encoding/, `${path}: ${text}`);
  }
  const raw = (headers: Record<string, string>) => t.app.inject({ method: 'POST', url: '/v1/billing/processor-events', headers: { 'content-type': 'text/plain', ...headers }, payload: 'x' });
  assert.notEqual((await raw({})).statusCode, 415);
  assertError(await raw({ 'content-encoding': 'gzip' }), 415, 'unsupported_media_type');
});

test('codes the spec gives these operations are documented: 403 forbidden on the self-or-users.manage user operations, 403 organization_suspended on Entitlement PATCH and DELETE, the settings_schema codes on Application PATCH; the slug pattern on Application POST', () => {
  const codes = (path: string, method: string, status: number) => doc.paths[path][method].responses[String(status)]?.description ?? '';
  for (const [path, method] of [['/v1/users/{id}', 'patch'], ['/v1/users/{id}', 'delete'], ['/v1/users/{id}/sessions', 'get'], ['/v1/users/{id}/sessions/{sessionId}', 'delete'], ['/v1/users/{id}/export', 'get'], ['/v1/users/{id}/erasure-requests', 'post']]) {
    assert.match(codes(path, method, 403), /(^|; )forbidden/, `${method} ${path}`);
  }
  for (const method of ['patch', 'delete']) assert.match(codes('/v1/entitlements/{id}', method, 403), /organization_suspended/);
  for (const code of ['invalid_settings_schema', 'reserved_settings_key']) assert.match(codes('/v1/applications/{id}', 'patch', 422), new RegExp(code));
  const slug = doc.paths['/v1/applications'].post.requestBody.content['application/json'].schema.properties.slug;
  assert.equal(slug.pattern, '^[a-z][a-z0-9-]{1,63}$');
});

test('every $ref in the description resolves inside it', () => {
  const resolve = (ref: string) =>
    ref
      .slice(2)
      .split('/')
      .map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'))
      .reduce<any>((node, key) => (node == null ? undefined : node[key]), doc);
  const walk = (node: unknown, where: string) => {
    if (Array.isArray(node)) node.forEach((n, i) => walk(n, `${where}/${i}`));
    else if (node && typeof node === 'object') {
      for (const [k, v] of Object.entries(node)) {
        if (k === '$ref' && typeof v === 'string') {
          assert.ok(v.startsWith('#/'), `${where}: external $ref ${v}`);
          assert.ok(resolve(v) !== undefined, `${where}: unresolved $ref ${v}`);
        } else walk(v, `${where}/${k}`);
      }
    }
  };
  walk(doc, '#');
});

test('the /_dev routes are absent from the description even when served', async () => {
  const served = await t.app.inject({ method: 'GET', url: '/_dev/clock' });
  assert.equal(served.statusCode, 200, 'DEV_CLOCK=1 serves /_dev/clock');
  for (const path of Object.keys(doc.paths)) assert.ok(!path.startsWith('/_dev'), path);
  assert.doesNotMatch(JSON.stringify(doc.paths), /\/_dev\//);
});

test('the description describes no operation the service does not serve', async () => {
  const ops = operations();
  assert.ok(ops.length >= 8, 'ops.length >= 8');
  for (const { method, path, op } of ops) {
    const label = `${method.toUpperCase()} ${path}`;
    const fastifyUrl = path.replace(/\{([^}]+)\}/g, ':$1');
    assert.ok(t.app.hasRoute({ method: method.toUpperCase() as any, url: fastifyUrl }), `${label} is registered`);
    const url = path.replace(/\{[^}]+\}/g, 'x');
    const res = await t.app.inject({ method: method.toUpperCase() as any, url });
    const code = res.headers['content-type']?.toString().includes('json') ? res.json()?.error?.code : undefined;
    assert.ok(!(res.statusCode === 404 && code === 'not_found'), `${label}: ${res.statusCode} ${code}`);
    assert.notEqual(res.statusCode, 405, label);
    // The security requirement it documents is the one enforced.
    if (op.security.length > 0) assert.equal(res.statusCode, 401, `${label} without a credential`);
    else assert.notEqual(res.statusCode, 401, `${label} without a credential`);
  }
});

test('every route the service serves (except /_dev, the hosted sign-in page /signin and the mailed links\' pages /verify-email, /reset-password, /accept-invitation, /forgot-password) is in the description', () => {
  const served = servedRoutes();
  assert.deepEqual([...LINK_PAGE_PATHS], ['/verify-email', '/reset-password', '/accept-invitation', '/forgot-password']);
  assert.ok(served.some((r) => r.method === 'post' && r.url === '/forgot-password'), 'the hosted forgot-password page is served');
  // The parser must see the routes we know are there, or the check below would prove nothing.
  assert.ok(served.some((r) => r.method === 'delete' && r.url === '/v1/users/:id/sessions/:sessionId'), JSON.stringify(served));
  assert.ok(served.some((r) => r.method === 'post' && r.url === '/_dev/clock'), JSON.stringify(served));
  for (const { method, url } of served) {
    if (method === 'head' || method === 'options' || url.startsWith('/_dev') || url.startsWith('/signin') || LINK_PAGE_PATHS.includes(url)) continue;
    const path = toOpenApiPath(url);
    assert.ok(doc.paths[path]?.[method], `${method.toUpperCase()} ${url} is described`);
  }
});

test('response enumerations of more than one value are marked x-extensible-enum (docs/conventions.md "Enumerations", Part A convention 13); the OAuth token endpoint\'s RFC 6749 error codes excepted', () => {
  const resolve = (ref: string) => ref.slice(2).split('/').reduce<any>((node, key) => node?.[key], doc);
  const closed: string[] = [];
  const seen = new Set<unknown>();
  const walk = (node: any, where: string) => {
    if (!node || typeof node !== 'object' || seen.has(node)) return;
    seen.add(node);
    if (Array.isArray(node)) return node.forEach((n, i) => walk(n, `${where}/${i}`));
    if (typeof node.$ref === 'string') return walk(resolve(node.$ref), node.$ref);
    const literals = (node.anyOf ?? node.oneOf)?.filter((b: any) => b?.type === 'string' && Array.isArray(b.enum)) ?? [];
    const values = Array.isArray(node.enum) ? node.enum.length : literals.length === (node.anyOf ?? node.oneOf)?.length ? literals.length : 0;
    if (values > 1 && !node['x-extensible-enum']) closed.push(where);
    for (const [k, v] of Object.entries(node)) walk(v, `${where}/${k}`);
  };
  for (const { method, path, op } of operations()) {
    if (path === '/v1/auth/oauth/token') continue;
    for (const [status, response] of Object.entries<any>(op.responses ?? {})) {
      if (/^2/.test(status)) walk(response, `${method.toUpperCase()} ${path} ${status}`);
    }
  }
  assert.deepEqual(closed, [], `closed response enums: ${closed.join('; ')}`);
});

test('response fields the spec gives a set of values are marked x-extensible-enum with those values (docs/conventions.md "Enumerations"): effective permissions user_status, entitlement_status and access path source, status and member_decision; an Organization\'s my_role and my_membership_status; MfaChallenge methods; the export\'s identity method and organization role', () => {
  const resolve = (node: any): any => (typeof node?.$ref === 'string' ? resolve(node.$ref.slice(2).split('/').reduce((n: any, k: string) => n?.[k], doc)) : node);
  const schemaOf = (path: string, method: string, status: string) => resolve(doc.paths[path][method].responses[status].content['application/json'].schema);
  const values = (node: any): string[] | undefined => {
    const s = resolve(node);
    return s?.['x-extensible-enum'] ?? s?.anyOf?.map(resolve).find((b: any) => b?.['x-extensible-enum'])?.['x-extensible-enum'];
  };
  const effective = schemaOf('/v1/users/{id}/apps/{appId}/effective-permissions', 'get', '200').properties;
  assert.deepEqual(values(effective.user_status), ['active', 'invited', 'suspended', 'deleted']);
  assert.deepEqual(values(effective.entitlement_status)?.slice().sort(), ['active', 'disabled', 'expired', 'none', 'revoked', 'scheduled']);
  const path = effective.access_paths.items.properties;
  assert.deepEqual(values(path.source), ['purchase', 'trial', 'admin_grant', 'org_seat']);
  assert.deepEqual(values(path.status)?.slice().sort(), ['active', 'disabled', 'expired', 'revoked', 'scheduled']);
  assert.deepEqual(values(path.member_decision), ['included', 'excluded', 'seat_limit']);
  for (const [p, m, s] of [['/v1/organizations', 'get', '200'], ['/v1/organizations/{id}', 'get', '200']] as const) {
    const org = schemaOf(p, m, s);
    const props = resolve(org.properties?.data?.items ?? org).properties;
    assert.deepEqual(values(props.my_role), ['org_admin', 'member'], `${p} my_role`);
    assert.deepEqual(values(props.my_membership_status), ['pending', 'active'], `${p} my_membership_status`);
  }
  const challenge = resolve(doc.components.schemas.MfaChallenge).properties;
  assert.deepEqual(values(challenge.methods.items), ['totp', 'recovery_code']);
  const bundle = schemaOf('/v1/users/{id}/export', 'get', '200').properties;
  assert.deepEqual(values(bundle.identities.items.properties.method), ['password', 'sso']);
  assert.deepEqual(values(bundle.organizations.items.properties.role), ['org_admin', 'member']);
});

test('a webhook subscription\'s events (create and PATCH) list the names they take as one closed enum, strings, not an anyOf of one-value branches (docs/conventions.md "Enumerations": request enums are strict, so no x-extensible-enum)', () => {
  for (const [path, method] of [['/v1/webhooks', 'post'], ['/v1/webhooks/{id}', 'patch']] as const) {
    const events = doc.paths[path][method].requestBody.content['application/json'].schema.properties.events;
    assert.deepEqual(events.items, { type: 'string', enum: ['*', ...EVENT_TYPES] }, `${method.toUpperCase()} ${path}`);
  }
});

test('a request body is optional in the description only where the service takes none: a PATCH that must name a field (users, entitlements, organizations, webhooks, tier-change requests) declares its body required, and a PATCH /v1/users/me without one is 422', async () => {
  for (const { method, path, op } of operations()) {
    if (!op.requestBody || op.requestBody.required) continue;
    const schema = op.requestBody.content['application/json']?.schema ?? {};
    assert.ok(!schema.required?.length && !schema.minProperties, `${method.toUpperCase()} ${path}: body documented optional, yet its schema needs ${JSON.stringify(schema.required ?? schema.minProperties)}`);
  }
  for (const path of ['/v1/users/{id}', '/v1/entitlements/{id}', '/v1/organizations/{id}', '/v1/webhooks/{id}', '/v1/tenants/{id}/tier-change-requests/{requestId}']) {
    assert.equal(doc.paths[path].patch.requestBody.required, true, `PATCH ${path}`);
  }
  assert.equal(doc.paths['/v1/users/{id}/profile'].patch.requestBody.required, false, 'an empty Profile PATCH is a no-op 200');
  const { token } = await userToken(t);
  const res = await call(t, 'PATCH', '/v1/users/me', token);
  assert.deepEqual(assertError(res, 422, 'validation_failed').details.fields, [{ path: 'body', message: 'must NOT have fewer than 1 properties' }]);
  assert.equal((await call(t, 'PATCH', '/v1/users/me/profile', token)).statusCode, 200);
});

test('each error status names each of its codes once (503 service_unavailable, 400 user_token_required of GET /v1/users/{id} were listed twice)', () => {
  for (const { method, path, op } of operations()) {
    for (const [status, response] of Object.entries<any>(op.responses)) {
      if (!/^[45]/.test(status) || path === '/v1/auth/oauth/token') continue;
      const codes = response.description.split('; ').map((text: string) => text.split(':')[0]);
      assert.deepEqual(codes, [...new Set(codes)], `${method.toUpperCase()} ${path} ${status}: ${response.description}`);
    }
  }
  assert.equal(doc.paths['/v1/auth/signup'].post.responses['503'].description, 'service_unavailable: Retry-After set');
  assert.equal(doc.paths['/v1/users/{id}'].get.responses['400'].description, 'user_token_required: `me` needs a User token; bad_request: the URL is not validly percent-encoded');
});

test('response headers a client reads are described: Retry-After on every 429 and 503, Audit-Hot-Window-Start on the audit reads (Part B), ETag on Entitlement GET and PATCH, Idempotent-Replayed on operations taking an Idempotency-Key', async () => {
  for (const { method, path, op } of operations()) {
    for (const status of ['429', '503']) {
      if (op.responses[status]) assert.ok(op.responses[status].headers?.['Retry-After'], `${method.toUpperCase()} ${path} ${status}`);
    }
    const idempotent = (op.parameters ?? []).some((p: { name: string }) => p.name === 'Idempotency-Key');
    for (const [status, response] of Object.entries<any>(op.responses)) {
      if (/^2/.test(status)) assert.equal(!!response.headers?.['Idempotent-Replayed'], idempotent, `${method.toUpperCase()} ${path} ${status}`);
    }
  }
  for (const path of ['/v1/audit-events', '/v1/audit-events/{id}']) assert.ok(doc.paths[path].get.responses['200'].headers?.['Audit-Hot-Window-Start'], path);
  for (const method of ['get', 'patch']) assert.ok(doc.paths['/v1/entitlements/{id}'][method].responses['200'].headers?.ETag, method);
  // What the description names is what the service sends.
  const { token } = await userToken(t);
  const audit = await call(t, 'GET', '/v1/audit-events?target_user_id=me', token);
  assert.equal(audit.statusCode, 200);
  assert.ok(!Number.isNaN(Date.parse(String(audit.headers['audit-hot-window-start']))), String(audit.headers['audit-hot-window-start']));
});

test('what route metadata adds is published as it is: the bearer scheme (type http), x-platform-permission naming the permission, the Idempotency-Key header required only where the operation requires one, 409 idempotency_key_in_flight, 429 rate_limited on throttled sign-ins, 400 user_token_required on User-token operations, and x-error-codes naming every code with its status and message', () => {
  assert.deepEqual(doc.components.securitySchemes, { bearer: { type: 'http', scheme: 'bearer', description: 'A platform access token or an API key secret.' } });
  const createUser = doc.paths['/v1/users'].post;
  assert.equal(createUser['x-platform-permission'], 'users.manage');
  assert.match(createUser.responses['403'].description, /forbidden: requires users\.manage/);
  assert.equal(doc.paths['/health'].get['x-platform-permission'], undefined, 'no permission, no mark');
  const keyOf = (op: any) => (op.parameters ?? []).find((p: { name: string }) => p.name === 'Idempotency-Key');
  assert.deepEqual(
    { ...keyOf(createUser), description: undefined },
    { name: 'Idempotency-Key', in: 'header', required: false, schema: { type: 'string', maxLength: 255 }, description: undefined },
    'optional on POST /v1/users',
  );
  assert.equal(keyOf(doc.paths['/v1/users/{id}/entitlements'].post).required, true, 'required on a grant');
  assert.equal(keyOf(doc.paths['/v1/users/{id}/entitlements'].get), undefined, 'none on a read');
  for (const op of [createUser, doc.paths['/v1/users/{id}/entitlements'].post]) assert.match(op.responses['409'].description, /idempotency_key_in_flight/);
  assert.match(doc.paths['/v1/auth/login'].post.responses['429'].description, /(^|; )rate_limited: per-IP throttle, Retry-After set$/);
  assert.equal(doc.paths['/v1/users/{id}'].get.responses['429'], undefined, 'no throttle, no 429');
  assert.match(doc.paths['/v1/users/{id}/password'].post.responses['400'].description, /user_token_required: this operation needs a User token/);
  assert.doesNotMatch(doc.paths['/v1/users'].post.responses['400'].description, /user_token_required/, 'an API key may create users');
  assert.deepEqual(doc['x-error-codes'], Object.fromEntries(Object.entries(ERROR_CODES).map(([code, [status, message]]) => [code, { status, message }])));
  assert.deepEqual(doc['x-error-codes'].destructive_operation_restricted, { status: 403, message: 'This key may not perform destructive operations.' });
});
