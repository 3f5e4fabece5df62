import type { FastifyInstance, FastifyReply, FastifyRequest, RouteOptions } from 'fastify';
import type { IncomingMessage } from 'node:http';
import type { Actor, Ctx, Deps } from '../context.js';
import { ApiError, invalidField } from '../errors.js';
import { bearerToken, isApiKeySecret, resolveBearer, unauthenticated, verifyAccessTokenClaims } from '../auth/credentials.js';
import { modeOf } from '../db/types.js';
import { metaOf, type RouteMeta } from './meta.js';
import { hitCounter, retryAfterSeconds } from './counters.js';
import { claimIdempotencyKey, completeInTransaction, replayedHeaders, settleAfterResponse, type Claim } from './idempotency.js';
import { isRetryableConflict, TRANSACTION_ATTEMPTS, type Mode, type Tx } from '../db/types.js';
import { refreshDevClock } from '../dev/clock.js';
import { lazyTransaction } from '../db/lazy-tx.js';
import { unstorableText, validlyPercentEncoded } from './validation.js';
import { urlNotEncoded } from './errors-plugin.js';
import ipaddr from 'ipaddr.js';

declare module 'fastify' {
  interface FastifyRequest {
    actor: Actor;
    /** The transaction an idempotent request's handler runs in. */
    tx?: Tx;
  }
}

/** Builds the service ctx for a request; `mode` overrides the credential's (unauthenticated endpoints). */
export function ctxOf(deps: Deps, request: FastifyRequest, mode?: Mode): Ctx {
  const actor = request.actor;
  const m = mode ?? (actor.type === 'user' || actor.type === 'api_key' ? actor.mode : 'live');
  return {
    deps,
    actor,
    mode: m,
    db: request.tx ?? deps.database.scoped(m),
    requestId: request.id,
    ip: request.ip,
    userAgent: request.headers['user-agent'] ?? null,
    now: deps.clock.now(),
  };
}


/**
 * A query string that is not validly percent-encoded is 400 bad_request, as the router answers such a
 * path, instead of being read leniently (a `%FF` as U+FFFD, a `%ZZ` as itself) and searched for. The
 * hosted sign-in page renders it as its 400 page (its routes' error handler).
 */
function assertQueryEncoded(url: string): void {
  const q = url.indexOf('?');
  if (q >= 0 && !validlyPercentEncoded(url.slice(q + 1))) throw urlNotEncoded();
}

/** Requests whose Expect asks for more than 100-continue (Node's checkExpectation, app.ts). */
export const unmetExpectations = new WeakSet<IncomingMessage>();

// RFC 9110 §7.2: uri-host (a bracketed IP literal, or a reg-name of unreserved, pct-encoded and sub-delims) and an optional port.
const HOST = /^(?:\[[A-Za-z0-9\-._~!$&'()*+,;=:%]+\]|[A-Za-z0-9\-._~!$&'()*+,;=%]*)(?::[0-9]*)?$/;

/**
 * RFC 9112 §3.2: an HTTP/1.1 request without a Host header, and any request with two Host lines or a
 * Host that is not a host and port, is 400 (a proxy and this service must not read two different
 * authorities into one request). RFC 9110 §10.1.1: an expectation other than 100-continue is 417.
 */
function assertFramed(request: FastifyRequest): void {
  const raw = request.raw;
  const hosts: string[] = [];
  for (let i = 0; i < raw.rawHeaders.length; i += 2) if (raw.rawHeaders[i]!.toLowerCase() === 'host') hosts.push(raw.rawHeaders[i + 1]!);
  if (hosts.length > 1 || (hosts.length === 0 && raw.httpVersion === '1.1') || (hosts.length === 1 && !HOST.test(hosts[0]!))) {
    throw new ApiError('bad_request', { message: 'The request needs exactly one valid Host header.' });
  }
  if (unmetExpectations.has(raw)) throw new ApiError('expectation_failed');
}

/**
 * The client a per-IP throttle counts: an IPv4 address (written as such or IPv4-mapped, as a dual-stack
 * listener reports it, without a port), or the /64 of an IPv6 address, the smallest network an IPv6
 * client is given (SLAAC, privacy addresses): counted per address, one client would have 2^64 budgets.
 */
export function throttledClient(ip: string): string {
  // A trusted proxy that writes the client's port (`192.0.2.1:50000`, `[2001:db8::1]:50000`, as Azure
  // Application Gateway does) would give each connection a budget of its own.
  const withPort = /^(?:\[([^\]]+)\]|([0-9.]+)):[0-9]+$/.exec(ip);
  const address = withPort ? (withPort[1] ?? withPort[2])! : ip;
  if (!ipaddr.isValid(address)) return ip;
  const parsed = ipaddr.process(address);
  if (parsed.kind() === 'ipv4') return parsed.toString();
  return `${(parsed as ipaddr.IPv6).parts.slice(0, 4).map((w) => w.toString(16)).join(':')}::/64`;
}

/**
 * One gate for every route, driven by its metadata: throttle, credential, caller type, destructive
 * classification, permission and idempotency, in that order.
 */
export function registerGate(app: FastifyInstance, deps: Deps): void {
  app.decorateRequest('actor', null as any);
  app.decorateRequest('tx', undefined);
  app.addHook('onRoute', (route) => wrapIdempotentRoute(deps, route));
  app.addHook('onRequest', identifyCaller(deps));
  app.addHook('preValidation', authorizeBeforeValidation);
  app.addHook('preHandler', claimOrReplay(deps));
}

/**
 * An idempotent request's handler runs in one transaction that also stores its response, so
 * the mutation and its replay record commit together (exactly once, even across a crash).
 * Handlers set the status with reply.code() and return the payload.
 */
function wrapIdempotentRoute(deps: Deps, route: RouteOptions): void {
  if (!route.config?.meta?.idempotency) return;
  route.onSend = [...(Array.isArray(route.onSend) ? route.onSend : route.onSend ? [route.onSend] : []), settleOnSend(deps) as never];
  const handler = route.handler;
  route.handler = async function (this: unknown, request, reply) {
    const claim = request.idempotencyClaim;
    if (!claim) return handler.call(this as never, request, reply);
    return runIdempotentHandler(deps, request, reply, claim, () => handler.call(this as never, request, reply));
  };
}

/**
 * The handler and the stored answer are one transaction, so a deadlock or serialization failure
 * in it is run again from the start, as every other transaction is (src/db/pg.ts): it did
 * nothing, and nothing leaves the process inside a transaction.
 */
async function runIdempotentHandler(deps: Deps, request: FastifyRequest, reply: FastifyReply, claim: Claim, handle: () => unknown): Promise<unknown> {
  const mode = request.actor.type === 'user' || request.actor.type === 'api_key' ? request.actor.mode : 'live';
  for (let attempt = 1; ; attempt++) {
    const lazy = lazyTransaction(deps.database.scoped(mode));
    request.tx = lazy.tx;
    let payload: unknown;
    let body: string;
    try {
      payload = await handle();
      if (reply.sent) throw new Error('idempotent handlers must return their payload, not send it');
      // Serialized before the commit and inside the try: a payload that cannot be serialized rolls
      // the transaction back (a 500 that changed nothing) instead of leaving it open, holding its
      // connection and locks for good (on the embedded database, every later request waited on it).
      body = payload === undefined || payload === null ? '' : String(reply.serialize(payload));
    } catch (err) {
      await lazy.rollback();
      if (attempt < TRANSACTION_ATTEMPTS && isRetryableConflict(err)) continue;
      throw err;
    } finally {
      request.tx = undefined;
    }
    await lazy.commitWith((tx) => completeInTransaction(deps, tx, claim, reply.statusCode, body, replayedHeaders(reply), payload));
    return payload;
  }
}

/** The gate's first half (onRequest): framing, the auth throttle, then the credential that names the actor. */
function identifyCaller(deps: Deps) {
  return async (request: FastifyRequest, reply: FastifyReply) => {
    reply.header('request-id', request.id);
    request.actor = { type: 'anonymous' };
    assertFramed(request);
    assertQueryEncoded(request.url);
    await refreshDevClock(deps);
    const meta = metaOf(request);
    if (!meta) return;
    await throttleAuth(deps, request, meta);
    if (meta.auth === 'none') return;
    request.actor = await resolveActor(deps, request, meta);
  };
}

/** 429 rate_limited past AUTH_RATE_LIMIT_PER_MINUTE calls of an auth-throttled route per client a minute. */
async function throttleAuth(deps: Deps, request: FastifyRequest, meta: RouteMeta): Promise<void> {
  if (meta.throttle === 'auth' && deps.config.authRateLimitPerMinute > 0) {
    const now = deps.clock.now();
    const hit = await hitCounter(deps.database.scoped('system'), `ip:${throttledClient(request.ip)}:${request.routeOptions.url}`, 60, now);
    if (hit.count > deps.config.authRateLimitPerMinute) {
      throw new ApiError('rate_limited', { headers: { 'retry-after': String(retryAfterSeconds(hit.resetAt, now)) } });
    }
  }
}

/** The bearer's actor; a fused-session route that needs no permission takes the access token's claims unconfirmed. */
async function resolveActor(deps: Deps, request: FastifyRequest, meta: RouteMeta): Promise<Actor> {
  const token = bearerToken(request.headers.authorization);
  if (!token) throw unauthenticated(false);
  if (meta.session === 'fused' && !meta.permission && !meta.destructive && !meta.idempotency && !isApiKeySecret(token)) {
    const claims = await verifyAccessTokenClaims(deps, token);
    return { type: 'user', userId: claims.sub, sessionId: claims.sid, mode: modeOf(claims.test_mode), permissions: new Set(), unconfirmed: true };
  }
  return resolveBearer(deps, token);
}

/**
 * The caller's rights come before the body's shape: a caller who may not call the operation
 * learns that (400 user_token_required, 403 destructive_operation_restricted, 403 forbidden),
 * whatever it sent, and nothing about what the operation would accept. The conditional destructive
 * tests read the parsed body defensively, before it is validated.
 */
async function authorizeBeforeValidation(request: FastifyRequest): Promise<void> {
  // Bodyless POSTs of routes that declare a body schema validate as an empty object.
  if (request.body === undefined && request.routeOptions.schema?.body) request.body = {};
  authorize(request);
  if (request.method === 'DELETE' && !request.routeOptions.schema?.body) assertNoBody(request.body);
  // Text PostgreSQL cannot store as sent (U+0000, unpaired surrogates, a leading U+FEFF): a field
  // error, never a 500 or a silent change (routes that attach validation, the OAuth token endpoint,
  // answer it in their own error shape).
  if (request.routeOptions.attachValidation) return;
  const bad = unstorableText(request.params, 'path') ?? unstorableText(request.query, 'query') ?? unstorableText(request.body, '');
  if (bad !== null) throw invalidField(bad.path || 'body', bad.message);
}

/** An idempotent route's key (preHandler): claimed for this request, or its stored answer replayed. */
function claimOrReplay(deps: Deps) {
  return async (request: FastifyRequest, reply: FastifyReply) => {
    const meta = metaOf(request);
    if (!meta?.idempotency) return;
    const replayed = await claimIdempotencyKey(deps, request, reply, request.actor, meta.idempotency === 'required');
    if (replayed) return reply;
  };
}

/**
 * A DELETE takes no body: a field sent with one is refused like any unknown field (never silently
 * ignored while the delete goes ahead); no body, an empty one or `{}` is no body.
 */
function assertNoBody(body: unknown): void {
  if (body === undefined) return;
  if (typeof body === 'object' && body !== null && !Array.isArray(body) && !Buffer.isBuffer(body)) {
    const [field] = Object.keys(body);
    if (field !== undefined) throw invalidField(field, 'is not a known field');
    return;
  }
  throw invalidField('body', 'must be empty (this operation takes no body)');
}

/** Caller type, destructive mark and permission (in that order) of the route's metadata (the gate's second half). */
function authorize(request: FastifyRequest): void {
  const meta = metaOf(request);
  if (!meta || meta.auth === 'none') return;
  const actor = request.actor;
  if (meta.auth === 'user' && actor.type !== 'user') throw new ApiError('user_token_required');
  if (meta.destructive && meta.destructiveGate !== 'service' && (meta.destructive === 'always' || meta.destructive.test(request))) {
    assertDestructiveAllowed(actor);
  }
  if (meta.permission && !(actor.type === 'user' || actor.type === 'api_key' ? actor.permissions.has(meta.permission) : false)) {
    throw new ApiError('forbidden', { details: { required_permission: meta.permission } });
  }
}

/** 403 destructive_operation_restricted for a key with restrict_destructive (Part A, rule 5 of Authentication). */
export function assertDestructiveAllowed(actor: Actor): void {
  if (actor.type === 'api_key' && actor.restrictDestructive) throw new ApiError('destructive_operation_restricted', { details: { key_id: actor.keyId } });
}

/** Settles an idempotent request's claim once its response is final (idempotent routes only). */
function settleOnSend(deps: Deps) {
  return async (request: FastifyRequest, reply: FastifyReply, payload: unknown) => {
    const claim = request.idempotencyClaim;
    if (claim) {
      request.idempotencyClaim = undefined;
      await settleAfterResponse(deps, claim, reply.statusCode, typeof payload === 'string' ? payload : '', replayedHeaders(reply));
    }
    return payload;
  };
}
