import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { LINK_PAGE_PATHS } from '../../src/modules/links/paths.js';
import { ERROR_CODES } from '../../src/errors.js';
import { userToken } from '../helpers/fixtures.js';
import { assertError, call, sql } from '../helpers/http.js';
import { assertStatus, customPlatformRole, grant, newApp, patchEnt, person, platformKey, rand } from '../access/support.js';
import { EVENT_TYPES, renderEnvelope, CURRENT_API_VERSION } from '../../src/modules/webhooks/catalog.js';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { Validator } from '@seriousme/openapi-schema-validator';

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

const HTTP_METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];
const ERROR_ENVELOPE_REF = '#/components/schemas/ErrorEnvelope';

interface Operation {
  method: string;
  path: string;
  op: any;
}

function operations(): Operation[] {
  const out: Operation[] = [];
  for (const [path, item] of Object.entries<any>(doc.paths ?? {})) {
    for (const method of Object.keys(item)) if (HTTP_METHODS.includes(method)) out.push({ method, path, op: item[method] });
  }
  return out;
}

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

/** A schema of the document with its $refs inlined from the components, so that it validates on its own. */
function inlineRefs(node: any): any {
  if (Array.isArray(node)) return node.map(inlineRefs);
  if (!node || typeof node !== 'object') return node;
  if (typeof node.$ref === 'string') return inlineRefs(doc.components.schemas[node.$ref.split('/').pop()]);
  return Object.fromEntries(Object.entries(node).map(([k, v]) => [k, inlineRefs(v)]));
}

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
