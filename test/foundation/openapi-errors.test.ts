import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { userToken } from '../helpers/fixtures.js';
import { call, type InjectResponse } from '../helpers/http.js';
import { assertStatus, grant, newApp, person, platformKey, rand } from '../access/support.js';

// The error contract of GET /v1/openapi.json against what the service answers: every operation of the
// document gets the common failing requests, and each answer's status must be documented for that
// operation and its error code named in that status's description.
let t: TestApp;
let doc: any;
before(async () => {
  t = await buildTestApp({ webhookAllowPrivateTargets: true });
  const res = await t.app.inject({ method: 'GET', url: '/v1/openapi.json' });
  assert.equal(res.statusCode, 200);
  doc = res.json();
});
after(() => t.close());

const HTTP_METHODS = ['get', 'put', 'post', 'delete', 'patch'];

const ERROR_ENVELOPE_REF = '#/components/schemas/ErrorEnvelope';

/** The values a schema allows (enum, const, or a union of them). */
const valuesOf = (schema: any): string[] =>
  schema?.enum ?? (schema?.const !== undefined ? [schema.const] : [...(schema?.anyOf ?? []), ...(schema?.oneOf ?? [])].flatMap(valuesOf));

/**
 * What a documented error response allows: in the error envelope, the codes its description names
 * (each `code` or `code: explanation`, joined by "; "); in a shape of its own (the OAuth token
 * endpoint's RFC 6749 error), the values its schema gives `error`; a page (text/html) is no code.
 */
function allowed(response: any): { media: string; codes: string[] } {
  const [media, content] = Object.entries<any>(response?.content ?? {})[0] ?? ['', {}];
  if (content.schema?.$ref === ERROR_ENVELOPE_REF) return { media, codes: String(response.description ?? '').split('; ').map((s) => s.split(':')[0].trim()) };
  const schema = content.schema?.$ref ? doc.components.schemas[content.schema.$ref.split('/').pop()] : content.schema;
  return { media, codes: valuesOf(schema?.properties?.error) };
}

/** Real resources, so that a path of real ids reaches the checks behind the id lookup. */
async function realIds(superadmin: string, admin: string): Promise<Record<string, string>> {
  const app = await newApp(t, admin, { redirect_uris: ['https://app.example.com/cb'] });
  const u = await person(t);
  const ent = await grant(t, admin, u.id, app.id);
  const org = assertStatus(await call(t, 'POST', '/v1/organizations', u.token, { name: 'Errors Org' }), 201);
  const role = assertStatus(await call(t, 'POST', '/v1/roles', admin, { name: `errs${rand(4)}`, scope: 'platform', permissions: ['users.list'] }), 201);
  const key = assertStatus(await call(t, 'POST', '/v1/api-keys', superadmin, { name: 'errs', scope: 'platform', permissions: [] }), 201);
  const hook = assertStatus(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url: 'http://127.0.0.1:9/hook', events: ['*'] }), 201);
  const sessions = assertStatus(await call(t, 'GET', '/v1/users/me/sessions', u.token), 200);
  // `{id}` is the resource the path names (idFor); other parameters by name (requestId, deliveryId, action, provider: a placeholder).
  return {
    userId: u.id,
    appId: app.id,
    sessionId: sessions.data[0].id,
    roleId: role.id,
    _user: u.id,
    _app: app.id,
    _ent: ent.id,
    _org: org.id,
    _role: role.id,
    _key: key.id,
    _hook: hook.id,
    _tenant: app.tenant_id,
  };
}

/** The real id for `{id}` on this path: the resource the path's first segment names. */
function idFor(path: string, ids: Record<string, string>): string {
  const first = path.split('/')[2];
  const byResource: Record<string, string> = {
    users: ids._user, applications: ids._app, entitlements: ids._ent, organizations: ids._org, roles: ids._role,
    'api-keys': ids._key, webhooks: ids._hook, tenants: ids._tenant,
  };
  return byResource[first] ?? ids._user;
}

const fill = (path: string, ids: Record<string, string>, override: (name: string) => string | undefined = () => undefined) =>
  path.replace(/\{([A-Za-z0-9_]+)\}/g, (_m, name) => encodeURIComponent(override(name) ?? (name === 'id' ? idFor(path, ids) : ids[name] ?? `x_${name}`)));

test('every answer to the common failing requests (no credential, a wrong credential, an API key where a User token is required, a credential without the permission, a malformed or unknown id, an empty, malformed, unknown-field or wrong-type body, a query parameter the operation does not take, an oversize body, a wrong Content-Type or a compressed body; a body where the operation takes none) has a status the document lists for the operation and an error code that status names', async () => {
  const superadmin = (await userToken(t, { roles: ['superadmin'] })).token;
  const admin = await platformKey(t);
  const bareKey = await platformKey(t, []);
  const ids = await realIds(superadmin, admin);
  const mismatches: string[] = [];
  const statuses = new Set<number>();
  let sent = 0;
  const check = (method: string, path: string, op: any, what: string, res: InjectResponse) => {
    sent++;
    if (res.statusCode < 400) return;
    const response = op.responses?.[String(res.statusCode)];
    const at = `${method.toUpperCase()} ${path} ${what}: ${res.statusCode}`;
    if (!response) return void mismatches.push(`${at} ${res.body.slice(0, 120)}: undocumented status`);
    statuses.add(res.statusCode);
    const { media, codes } = allowed(response);
    if (!String(res.headers['content-type']).startsWith(media)) return void mismatches.push(`${at} ${res.headers['content-type']}: documented as ${media}`);
    if (media !== 'application/json') return;
    const body = res.json();
    const code = typeof body.error === 'string' ? body.error : body.error?.code;
    if (!codes.includes(code)) mismatches.push(`${at} ${code} not in "${codes.join(', ')}"`);
  };
  for (const [path, item] of Object.entries<any>(doc.paths)) {
    for (const method of Object.keys(item).filter((m) => HTTP_METHODS.includes(m))) {
      const op = item[method];
      const M = method.toUpperCase();
      const url = fill(path, ids);
      const hasBody = !!op.requestBody;
      const needsCred = (op.security ?? []).length > 0;
      const send = (what: string, u: string, cred: string | null, opts: { payload?: unknown; headers?: Record<string, string> } = {}) =>
        call(t, M, u, cred, opts.payload ?? (hasBody ? {} : undefined), opts.headers).then((res) => check(method, path, op, what, res));
      if (needsCred) {
        await send('no credential', url, null);
        await send('a garbage credential', url, 'not-a-token');
        // A full-permission key, `me` as the user (Part A convention 8, which needs a User token): on a
        // destructive operation only where the document says a key gets 400 user_token_required (elsewhere
        // it would succeed and remove what later requests use).
        if (!op['x-platform-destructive'] || allowed(op.responses['400']).codes.includes('user_token_required')) {
          await send('an API key', fill(path, ids, (name) => (name === 'userId' || (name === 'id' && path.startsWith('/v1/users/')) ? 'me' : undefined)), admin);
        }
        await send('a key without permissions', url, bareKey);
        // A fresh user each time: a logout with it succeeds and ends its session.
        await send('a User token without roles', url, (await person(t)).token);
      }
      await send('a URL not validly percent-encoded', `${url}${url.includes('?') ? '&' : '?'}q=%E0%A4%A`, superadmin);
      await send('a compressed body (Content-Encoding: gzip)', url, superadmin, { payload: '{}', headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' } });
      // docs/conventions.md: "a DELETE takes no body: a field sent with one is refused by name"; a GET's is not read.
      if (!hasBody && method !== 'get') {
        await send('malformed JSON where it takes no body', url, superadmin, { payload: '{"a":', headers: { 'content-type': 'application/json' } });
        await send('a field where it takes no body', url, superadmin, { payload: { bogus_field: 1 } });
        await send('a wrong Content-Type where it takes no body', url, superadmin, { payload: 'a=1', headers: { 'content-type': 'text/plain' } });
        await send('an oversize body where it takes none', url, superadmin, { payload: JSON.stringify({ x: 'a'.repeat(1024 * 1024 + 10) }), headers: { 'content-type': 'application/json' } });
      }
      if (path.includes('{')) {
        await send('an id of 2,049 characters', fill(path, ids, (name) => (name === 'id' ? 'x'.repeat(2049) : undefined)), superadmin);
        await send('a malformed id', fill(path, ids, () => 'not an id!'), superadmin);
        await send('an unknown id', fill(path, ids, (name) => (name === 'id' ? `${idFor(path, ids).split('_')[0]}_00000000000000000000000000` : undefined)), superadmin);
      }
      await send('a query parameter it does not take', `${url}${url.includes('?') ? '&' : '?'}bogus_param=1`, superadmin);
      if (hasBody) {
        if (op.requestBody.required !== false) await send('an empty body', url, superadmin, { payload: '', headers: { 'content-type': 'application/json' } });
        await send('malformed JSON', url, superadmin, { payload: '{"a":', headers: { 'content-type': 'application/json' } });
        await send('an unknown field', url, superadmin, { payload: { bogus_field: 1 } });
        await send('a wrong type', url, superadmin, { payload: [1, 2] });
        const schema = op.requestBody.content?.['application/json']?.schema;
        const field = Object.entries<any>((schema?.$ref ? doc.components.schemas[schema.$ref.split('/').pop()] : schema)?.properties ?? {})[0];
        if (field) await send(`a known field (${field[0]}) of a wrong type`, url, superadmin, { payload: { [field[0]]: field[1].type === 'object' ? 12345 : { x: 1 } } });
        await send('an oversize body', url, superadmin, { payload: JSON.stringify({ x: 'a'.repeat(1024 * 1024 + 10) }), headers: { 'content-type': 'application/json' } });
        await send('a wrong Content-Type', url, superadmin, { payload: 'a=1', headers: { 'content-type': 'text/plain' } });
      }
    }
  }
  // The superadmin was never signed out on the way (every 401 above is the credential's own).
  assertStatus(await call(t, 'GET', '/v1/users/me', superadmin), 200);
  assert.ok(sent > 500, `only ${sent} requests sent`);
  assert.deepEqual(mismatches, []);
  // The requests reached the checks they aim at, not one early refusal.
  assert.deepEqual([400, 401, 403, 404, 413, 415, 422].filter((s) => !statuses.has(s)), []);
});

test('each code an error response names is one of the document\'s x-error-codes, with that status', () => {
  const wrong: string[] = [];
  for (const [path, item] of Object.entries<any>(doc.paths)) {
    for (const [method, op] of Object.entries<any>(item)) {
      for (const [status, response] of Object.entries<any>(op.responses ?? {})) {
        if (response.content?.['application/json']?.schema?.$ref !== ERROR_ENVELOPE_REF) continue;
        for (const code of allowed(response).codes) {
          if (doc['x-error-codes'][code]?.status !== Number(status)) wrong.push(`${method.toUpperCase()} ${path} ${status}: ${code}`);
        }
      }
    }
  }
  assert.deepEqual(wrong, []);
});
