import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest, HTTPMethods } from 'fastify';
import type { ErrorObject } from 'ajv';
import { ApiError, fromDatabaseError, invalidField, validationFailed, type ErrorCode } from '../errors.js';
import { DatabaseBusyError } from '../db/types.js';
import { metaOf } from './meta.js';
import { fieldErrors } from './validation.js';

/** Maps anything thrown to the error envelope. The only place errors become HTTP. */
export function toApiError(err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  const fe = err as FastifyError & { validation?: any[]; validationContext?: string };
  if (fe?.validation) {
    return validationFailed(...fieldErrors(fe.validation, fe.validationContext));
  }
  switch (fe?.code) {
    case 'FST_ERR_MAX_PARAM_LENGTH':
      // The router refuses a path parameter over maxParamLength before the schema sees it.
      return invalidField('path', `must NOT have more than ${MAX_PARAM_LENGTH} characters`);
    case 'FST_ERR_BAD_URL':
      return urlNotEncoded();
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return new ApiError('malformed_json');
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new ApiError('payload_too_large');
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return fe.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE' ? new ApiError('unsupported_media_type') : new ApiError('malformed_json', { message: 'Invalid Content-Length.' });
  }
  if (err instanceof SyntaxError && (fe as { statusCode?: number }).statusCode === 400) return new ApiError('malformed_json');
  // The client went away mid-body (Node's `aborted`, ECONNRESET, which Fastify marks 400 as it reads the
  // body): the client's doing, not a lost database connection (503, logged as an error).
  if (fe?.code === 'ECONNRESET' && fe.statusCode === 400) return new ApiError('bad_request', { message: 'The request body was not received in full.' });
  // Safety net for U+0000 the request checks did not see (22021 in text, 22P05 in jsonb).
  if (fe?.code === '22021' || fe?.code === '22P05') {
    return invalidField('body', 'must not contain U+0000');
  }
  const fromDb = fromDatabaseError(err);
  if (fromDb) return fromDb;
  if (err instanceof DatabaseBusyError) {
    return new ApiError('service_unavailable', { message: 'The database is busy; retry shortly.', headers: { 'retry-after': '1' } });
  }
  if (isDatabaseUnavailable(err)) {
    return new ApiError('service_unavailable', { message: 'The database is unreachable.', headers: { 'retry-after': '5' } });
  }
  if (typeof fe?.statusCode === 'number' && fe.statusCode >= 400 && fe.statusCode < 500) {
    // Another client error raised by Fastify itself (header limits, …).
    return new ApiError('bad_request', { message: fe.message });
  }
  return new ApiError('internal_error');
}

/** The router's limit for one path parameter (app.ts); longer ones are refused before routing. */
export const MAX_PARAM_LENGTH = 2048;

/** The 404 of the resource a path parameter names, by the route segment before it. */
const NOT_FOUND_OF_COLLECTION: Record<string, ErrorCode> = {
  users: 'user_not_found',
  apps: 'application_not_found',
  applications: 'application_not_found',
  entitlements: 'entitlement_not_found',
  roles: 'role_not_found',
  sessions: 'session_not_found',
  'api-keys': 'api_key_not_found',
  organizations: 'organization_not_found',
  members: 'member_not_found',
  tenants: 'tenant_not_found',
  'tier-change-requests': 'tier_change_request_not_found',
  'audit-events': 'audit_event_not_found',
  webhooks: 'webhook_not_found',
  deliveries: 'delivery_not_found',
};

/**
 * A path id that does not fit its schema (longer than any id, say) names nothing that exists, so it
 * gets the same 404 as an unknown id of the right shape: the route's `*_not_found` for the first such
 * parameter, or the route's only 404 code. Other path parameters keep 422.
 */
function unknownPathResource(request: FastifyRequest, validation: ErrorObject[]): ApiError | null {
  const segments = (request.routeOptions.url ?? '').split('/');
  const answers = metaOf(request)?.errors ?? [];
  const positions = validation.map((e) => segments.indexOf(`:${e.instancePath.replace(/^\//, '')}`));
  if (positions.some((i) => i < 1)) return null;
  const code = NOT_FOUND_OF_COLLECTION[segments[Math.min(...positions) - 1]!];
  if (code && answers.includes(code)) return new ApiError(code);
  // A route with one 404 answers it for whatever is missing (accepting an Organization's invitation).
  const notFound = answers.filter((c) => c.endsWith('_not_found'));
  return code && notFound.length === 1 ? new ApiError(notFound[0]!) : null;
}

// Connection failures (08…), the server shutting down or starting (57P0x), and the server refusing
// a new connection because it has as many as it allows (53300 too_many_connections).
const UNAVAILABLE_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', '57P01', '57P02', '57P03', '08000', '08001', '08003', '08004', '08006', '53300']);

/** The database cannot be reached or takes no more connections (server down or full, connection lost, embedded store closed). */
function isDatabaseUnavailable(err: unknown): boolean {
  const e = err as { code?: string; message?: string };
  if (e?.code && UNAVAILABLE_CODES.has(e.code)) return true;
  return /Connection terminated|timeout exceeded when trying to connect|PGlite is closed|database closed|Client has encountered a connection error/i.test(e?.message ?? '');
}

/**
 * Logs a 5xx answer. One the service chose (sign-ins beyond the password pool, the database's queue
 * full, a migrating Tenant, the processor unavailable, which logs its own cause, an SSO callback not
 * implemented) is no fault: one info line with its code and no stack, like the request's completion
 * line, so that shedding thousands of requests a second does not flood a warn-level log or add error
 * logging to an overloaded process. Anything else is logged as an error with its stack.
 */
export function logServerError(request: FastifyRequest, err: unknown, error: ApiError): void {
  if (error.status < 500) return;
  if (error.code !== 'internal_error' && (err instanceof ApiError || err instanceof DatabaseBusyError)) {
    request.log.info({ code: error.code, status: error.status }, `request refused: ${error.message}`);
  } else {
    request.log.error({ err }, 'request failed');
  }
}

/** 400 for a path or query that is not validly percent-encoded. */
export const urlNotEncoded = () => new ApiError('bad_request', { message: 'The URL is not validly encoded.' });

/** Errors Fastify raises before routing (bad URL encoding): same envelope. */
export function frameworkErrorHandler(err: Error, request: FastifyRequest, reply: FastifyReply) {
  // Neither the gate's onRequest hook, which sets Request-Id, nor the onSend hooks run for a
  // framework error (a URL the router cannot read).
  reply.header('request-id', request.id);
  noStoreForApi(request, reply);
  // Nor does Fastify log such a request's completion, only its arrival: the line every other request
  // ends with, so that no request seems to be still running.
  const started = performance.now();
  reply.raw.once('finish', () => request.log.info({ res: reply, responseTime: performance.now() - started }, 'request completed'));
  return sendError(reply, toApiError(err));
}

/**
 * API answers are per caller and may carry tokens or secrets (RFC 6749 §5.1 asks no-store of token
 * responses): no cache keeps them, unless a route says otherwise. Judged by the route that answers,
 * not the URL as sent: the router decodes the path, so `/%761/auth/login` is the login route.
 */
export function noStoreForApi(request: FastifyRequest, reply: FastifyReply): void {
  const path = request.routeOptions.url ?? request.url;
  if (path.startsWith('/v1/') && !reply.hasHeader('cache-control')) reply.header('cache-control', 'no-store');
}

function sendError(reply: FastifyReply, error: ApiError) {
  return reply.code(error.status).headers(error.headers).type('application/json; charset=utf-8').send(error.toBody());
}

/**
 * `confirmCaller` settles a caller the gate left unconfirmed (a `session: 'fused'` route checks the
 * session in its own query): a request refused before the route ran (a body that is not JSON, too
 * large or of another media type, a field error) answers 401 when its session has ended, as every
 * other route does, instead of describing its input to a dead session.
 */
const REFUSED_BEFORE_ROUTE = new Set([400, 413, 415, 422]);
export function registerErrorHandling(app: FastifyInstance, confirmCaller?: (request: FastifyRequest) => Promise<void>): void {
  app.setErrorHandler(async (err, request, reply) => {
    const fe = err as FastifyError & { validation?: ErrorObject[]; validationContext?: string };
    let error = (fe.validationContext === 'params' && fe.validation && unknownPathResource(request, fe.validation)) || toApiError(err);
    if (confirmCaller && (REFUSED_BEFORE_ROUTE.has(error.status) || fe.validation) && request.actor?.type === 'user' && request.actor.unconfirmed) {
      error = await confirmCaller(request).then(() => error, toApiError);
    }
    logServerError(request, err, error);
    return sendError(reply, error);
  });

  // Routes that only refuse their method ("GET /signin/mfa"): not methods the resource supports.
  const refusing = new Set<string>();
  app.addHook('onRoute', (route) => {
    if (route.config?.meta?.refusesMethod) for (const method of [route.method].flat()) refusing.add(`${method} ${route.url}`);
  });
  const supports = (method: string, path: string) => !refusing.has(`${method} ${path}`) && app.findRoute({ method: method as HTTPMethods, url: path }) !== null;

  app.setNotFoundHandler((request: FastifyRequest, reply: FastifyReply) => {
    const path = request.url.split('?')[0];
    const allowed = new Set<string>();
    // Every GET route also answers HEAD (RFC 9110 §9.3.2), so Allow lists it too (§15.5.6: the methods the resource supports).
    for (const method of ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE']) {
      if (method !== request.method && supports(method === 'HEAD' ? 'GET' : method, path)) allowed.add(method);
    }
    if (allowed.size > 0) {
      reply.header('allow', [...allowed].join(', '));
      return sendError(reply, new ApiError('method_not_allowed'));
    }
    return sendError(reply, new ApiError('not_found'));
  });
}
