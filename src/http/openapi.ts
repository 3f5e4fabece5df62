import swagger from '@fastify/swagger';
import { STATUS_CODES } from 'node:http';
import type { FastifyInstance, RouteOptions } from 'fastify';
import type { RouteMeta } from './meta.js';
import { ERROR_CODES } from '../errors.js';
import { ErrorEnvelope } from './schemas.js';
import { BODY_LIMIT_BYTES } from './body-parsing.js';
import { webhookDescriptions } from '../modules/webhooks/openapi.js';

interface RouteRecord {
  method: string;
  url: string;
  meta: RouteMeta;
  bodyOptional: boolean;
  ownValidation: boolean;
  /** The route reads JSON bodies with the service's parser (not a scope's own raw parser). */
  jsonParser: boolean;
}

const toOpenApiPath = (url: string) => url.replace(/:([A-Za-z0-9_]+)/g, '{$1}');
/**
 * A stable operationId from the method and the path, as Stripe's document names its operations:
 * `GET /v1/users/:id/entitlements` is `GetUsersIdEntitlements`. Generated clients name their methods
 * after it; two routes never share a method and path, so the ids are unique.
 */
export const operationIdOf = (method: string, url: string): string =>
  method[0].toUpperCase() + method.slice(1).toLowerCase() +
  url.replace(/^\/v1(?=\/|$)/, '').split(/[^A-Za-z0-9]+/).filter(Boolean).map((w) => w[0].toUpperCase() + w.slice(1)).join('');

const header = (description: string) => ({ description, schema: { type: 'string' } });
/** Every 429 and 503 the service answers says when to come back. */
const RETRY_AFTER = { 'Retry-After': { description: 'Seconds to wait before sending the request again.', schema: { type: 'integer', minimum: 0 } } };

const errorResponse = (description: string) => ({
  description,
  content: { 'application/json': { schema: { $ref: '#/components/schemas/ErrorEnvelope' } } },
});

/**
 * OpenAPI 3.1 generated from the route schemas. Route metadata adds the security requirement, the
 * x-platform-destructive marks and the error responses the gate can produce.
 */
export async function registerOpenApi(app: FastifyInstance, publicUrl: string): Promise<void> {
  const routes: RouteRecord[] = [];
  app.addHook('onRoute', function (route) {
    routes.push(...recordRoute(route, this.hasContentTypeParser('application/json')));
  });
  app.addSchema(ErrorEnvelope);

  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: { title: 'Platform API', version: '1.0.0', description: 'Accounts, sessions, API keys, access and the platform around them.' },
      servers: [{ url: publicUrl }],
      components: {
        securitySchemes: { bearer: { type: 'http', scheme: 'bearer', description: 'A platform access token or an API key secret.' } },
      },
    },
    refResolver: { buildLocalReference: (json, _base, _frag, i) => (json.$id as string) ?? `def-${i}` },
    transformObject: (documentObject) => {
      const doc = (documentObject as unknown as { openapiObject: any }).openapiObject;
      // What the service sends: each event's POST to a subscription's url (OpenAPI 3.1 webhooks).
      doc.webhooks = webhookDescriptions();
      doc['x-error-codes'] = Object.fromEntries(Object.entries(ERROR_CODES).map(([code, [status, message]]) => [code, { status, message }]));
      for (const r of routes) {
        const op = doc.paths?.[toOpenApiPath(r.url)]?.[r.method];
        if (op) describeOperation(op, r);
      }
      return doc;
    },
  });
}

/** One record per method of a documented route (none for HEAD; none for a route without metadata or hidden). */
function recordRoute(route: RouteOptions, jsonParser: boolean): RouteRecord[] {
  const meta = route.config?.meta;
  if (!meta || route.schema?.hide) return [];
  const body = route.schema?.body as { required?: string[]; minProperties?: number } | undefined;
  // A body that must name a field (a PATCH of users, entitlements, organizations, webhooks or
  // tier-change requests has minProperties 1) is required: without one the answer is 422.
  const bodyOptional = !!body && !body.required?.length && !body.minProperties;
  // A route that attaches validation errors answers them in its own shape (the OAuth token endpoint).
  const ownValidation = !!route.attachValidation;
  const records: RouteRecord[] = [];
  for (const method of [route.method].flat()) if (method !== 'HEAD') records.push({ method: method.toLowerCase(), url: route.url, meta, bodyOptional, ownValidation, jsonParser });
  return records;
}

function describeOperation(op: any, r: RouteRecord): void {
  const { meta } = r;
  op.responses ??= {};
  op.operationId ??= operationIdOf(r.method, r.url);
  // A success response without a description of its own reads as its status (fastify-swagger's
  // placeholder is "Default Response").
  for (const [status, response] of Object.entries<any>(op.responses)) {
    if (response?.description === 'Default Response') response.description = STATUS_CODES[Number(status)] ?? 'Success';
  }
  // An operation that is not implemented yet (the SSO callback, 501) has no success response.
  if (meta.errors?.includes('not_implemented')) delete op.responses['200'];
  if (r.bodyOptional && op.requestBody) op.requestBody.required = false;
  markOperation(op, meta);
  for (const [status, texts] of errorsByStatus(r)) op.responses[String(status)] ??= errorResponse(texts.join('; '));
  addResponseHeaders(op, meta);
}

/** The security requirement, the x-platform marks and the Idempotency-Key parameter. */
function markOperation(op: any, meta: RouteMeta): void {
  op.security = meta.auth !== 'none' ? [{ bearer: [] }] : [];
  if (meta.permission) op['x-platform-permission'] = meta.permission;
  if (meta.destructive) {
    op['x-platform-destructive'] = meta.destructive === 'always' ? 'always' : 'conditional';
    if (meta.destructive !== 'always') op['x-platform-destructive-when'] = meta.destructive.when;
  }
  if (meta.idempotency) {
    op.parameters ??= [];
    op.parameters.push({
      name: 'Idempotency-Key',
      in: 'header',
      required: meta.idempotency === 'required',
      schema: { type: 'string', maxLength: 255 },
      description: 'Retained 24 hours per credential and operation; a retry replays the first result.',
    });
  }
}

/**
 * Every error an operation can answer, by status: its own codes (route metadata), then what the
 * gate adds; one response per status naming them all, each code once (a later text that
 * explains a code replaces its bare mention).
 */
function errorsByStatus(r: RouteRecord): Map<number, string[]> {
  const { meta } = r;
  const byStatus = new Map<number, string[]>();
  const codeOf = (text: string) => text.split(':')[0];
  const add = (status: number, text: string) => {
    const list = byStatus.get(status) ?? [];
    const at = list.findIndex((t) => codeOf(t) === codeOf(text));
    if (at < 0) list.push(text);
    else if (list[at].length < text.length) list[at] = text;
    byStatus.set(status, list);
  };
  for (const code of meta.errors ?? []) add(ERROR_CODES[code][0], code);
  if (meta.auth !== 'none') add(401, 'unauthenticated: missing, invalid, revoked or expired credential');
  if (meta.auth === 'user') add(400, 'user_token_required: this operation needs a User token');
  // `me` as a user id (Part A convention 8) needs a User token: an API key gets 400.
  if (meta.auth === 'any' && /\/users\/:id(\/|$)|\/members\/:userId$/.test(r.url)) add(400, 'user_token_required: `me` needs a User token');
  if (meta.idempotency === 'required') add(400, 'idempotency_key_required');
  if (meta.permission) add(403, `forbidden: requires ${meta.permission}`);
  if (meta.destructive) add(403, 'destructive_operation_restricted: a restrict_destructive key');
  if (meta.idempotency) add(409, 'idempotency_key_in_flight');
  if (meta.throttle) add(429, 'rate_limited: per-IP throttle, Retry-After set');
  if (!r.ownValidation) {
    add(422, 'validation_failed: details.fields names each offending field');
    // What the framework refuses before the route: a URL, and a body, the service cannot read.
    add(400, 'bad_request: the URL is not validly percent-encoded');
    // RFC 9110 §10.1.1: any request's Expect other than 100-continue (the token endpoint answers it as invalid_request).
    add(417, 'expectation_failed: an Expect header other than 100-continue');
    // Any method but GET has its body read, one the operation takes none of too (a DELETE's, see
    // docs/conventions.md validation_failed); a GET's is not read (docs/decisions.md "Methods").
    if (r.method !== 'get') {
      if (r.jsonParser) add(400, 'malformed_json: the body is not one valid JSON document');
      add(413, `payload_too_large: the body is over ${BODY_LIMIT_BYTES / (1024 * 1024)} MiB`);
      // A route with its own raw parser (SSO callback, processor events) takes any type; only a coding is refused.
      add(415, r.jsonParser ? 'unsupported_media_type: the body must be application/json' : 'unsupported_media_type: the body must not be compressed (Content-Encoding)');
    }
    if (meta.idempotency) add(422, 'idempotency_key_reused: the key was used with another request');
  }
  // Any operation: the database unreachable or at its limits; a write to a Tenant while it migrates.
  add(503, 'service_unavailable: Retry-After set');
  return byStatus;
}

/** The headers a client reads from a success: the route's own, and the replay mark; Retry-After on 429 and 503. */
function addResponseHeaders(op: any, meta: RouteMeta): void {
  const successHeaders: Record<string, ReturnType<typeof header>> = {};
  for (const [name, description] of Object.entries(meta.headers ?? {})) successHeaders[name] = header(description);
  if (meta.idempotency) successHeaders['Idempotent-Replayed'] = header('`true` when this is the stored answer to an earlier request with the same Idempotency-Key.');
  for (const [status, response] of Object.entries<any>(op.responses)) {
    if (/^2/.test(status) && Object.keys(successHeaders).length) response.headers = { ...response.headers, ...successHeaders };
    if (status === '429' || status === '503') response.headers = { ...RETRY_AFTER, ...response.headers };
  }
}
