import Fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { Config } from './config.js';
import type { Clock } from './clock.js';
import type { Database } from './db/types.js';
import type { Deps } from './context.js';
import { newId } from './ids.js';
import { ApiError } from './errors.js';
import { STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Socket } from 'node:net';
import { SigningKeys } from './auth/signing-keys.js';
import { SecretBox } from './auth/secret-box.js';
import { confirmSession } from './auth/credentials.js';
import { JobRunner } from './jobs/runner.js';
import { schemaErrorMessage, validatorCompiler } from './http/validation.js';
import { SerializerSelector } from '@fastify/fast-json-stringify-compiler';
import { frameworkErrorHandler, MAX_PARAM_LENGTH, noStoreForApi, registerErrorHandling } from './http/errors-plugin.js';
import { registerGate, unmetExpectations } from './http/gate.js';
import { BODY_LIMIT_BYTES, registerBodyParsers, refuseCodedBodies } from './http/body-parsing.js';
import { registerOpenApi } from './http/openapi.js';
import { MODULES } from './modules/index.js';
import { devModule } from './modules/dev/index.js';
import type { App, Module } from './modules/types.js';
import { Type } from '@sinclair/typebox';
import { redactUrl, serializeError } from './http/log-redaction.js';

/**
 * A request Node's HTTP parser refuses before Fastify sees it (headers over the limit, a request not
 * received in time, bytes that are not HTTP) is answered in the error envelope with a Request-Id, as
 * every response is, instead of Fastify's default body; then the connection closes. Its one log line
 * carries that Request-Id, the status and the parser's reason, never the bytes received (the parser's
 * error holds them, headers and credentials included).
 */
function clientErrorHandler(this: FastifyInstance, err: NodeJS.ErrnoException, socket: Duplex): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  const error =
    err.code === 'HPE_HEADER_OVERFLOW' ? new ApiError('headers_too_large')
      : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? new ApiError('request_timeout')
        : new ApiError('bad_request', { message: 'The request is not valid HTTP.' });
  const requestId = newId('req');
  this.log.info(
    { reqId: requestId, res: { statusCode: error.status }, code: error.code, reason: err.code, remoteAddress: (socket as Partial<Socket>).remoteAddress },
    'request refused before it was read',
  );
  const body = JSON.stringify(error.toBody());
  if (socket.writable) {
    // Date, as on every other answer (RFC 9110 §6.6.1: an origin server with a clock MUST send it on 4xx).
    socket.write(
      `HTTP/1.1 ${error.status} ${STATUS_CODES[error.status]}\r\nDate: ${new Date().toUTCString()}\r\nContent-Type: application/json; charset=utf-8\r\n` +
        `Content-Length: ${Buffer.byteLength(body)}\r\nRequest-Id: ${requestId}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n${body}`,
    );
  }
  socket.destroy(err);
}

export { BODY_LIMIT_BYTES };

/**
 * The time a client has to send a whole request, headers and body (Node's own default, which Fastify
 * turns off): a body that stops arriving is answered 408 request_timeout instead of holding its
 * connection open for as long as the client cares to drip bytes. Headers alone have Node's 60 s.
 */
export const REQUEST_TIMEOUT_MS = 300_000;

/**
 * Logger options whose serializers keep secrets out of the log: the request's URL with every
 * credential query value and secret-shaped value redacted (the mailed links' pages take their token
 * in the query; a client may put any credential there), and errors without the values of a failed
 * statement (src/http/log-redaction.ts). A logger instance passed in is used as it is.
 */
function withRedactedSecrets(logger: FastifyBaseLogger | boolean | object): FastifyBaseLogger | boolean | object {
  if (typeof logger !== 'object' || logger === null || typeof (logger as FastifyBaseLogger).info === 'function') return logger;
  const options = logger as { serializers?: Record<string, unknown> };
  const req = (request: { method: string; url: string; host?: string; ip?: string; socket?: { remotePort?: number } }) => ({
    method: request.method,
    url: redactUrl(request.url),
    host: request.host,
    remoteAddress: request.ip,
    remotePort: request.socket?.remotePort,
  });
  return { ...options, serializers: { req, err: serializeError, ...options.serializers } };
}

export interface BuildOptions {
  config: Readonly<Config>;
  database: Database;
  clock: Clock;
  logger?: FastifyBaseLogger | boolean | object;
  /** Modules beyond the built-in catalogue (tests mount probes of the shared mechanisms this way). */
  extraModules?: Module[];
  /**
   * When each route's schemas become its validators and serializers. `at-start` (the default: the
   * server) compiles them all as the app is built, so a bad schema stops the start and no request
   * pays for a compilation. `on-first-use` compiles each when it is first needed: for the operator
   * CLI, which serves nothing, and for tests, which build an app per file and call few of its routes
   * (compiling them all cost a few tenths of a second of CPU per app). What is compiled is the same
   * either way.
   */
  compileSchemas?: 'at-start' | 'on-first-use';
}

/** A schema compiler whose functions compile on their first call instead of when the route is added. */
function onFirstUse<Route, Compiled extends (...args: any[]) => unknown>(compile: (route: Route) => Compiled): (route: Route) => Compiled {
  return (route) => {
    let compiled: Compiled | undefined;
    return ((...args: unknown[]) => (compiled ??= compile(route))(...args)) as Compiled;
  };
}

/** Builds the Fastify instance and the shared dependencies; starts nothing. */
export async function buildApp(options: BuildOptions): Promise<{ app: App; deps: Deps }> {
  const { config, database, clock } = options;
  const lazily = options.compileSchemas === 'on-first-use';
  const fastify = createFastify(options, lazily);
  fastify.setValidatorCompiler(lazily ? onFirstUse(validatorCompiler) : validatorCompiler);
  passExpectationsToGate(fastify);
  closeConnectionsOnClose(fastify);
  registerBodyParsers(fastify);
  refuseCodedBodies(fastify);

  const modules = [...MODULES, ...(config.devClock ? [devModule] : []), ...(options.extraModules ?? [])];
  const deps = createDeps(fastify, config, database, clock, modules);

  fastify.addHook('onClose', async () => deps.keys.stop());
  registerErrorHandling(fastify, async (request) => {
    const actor = request.actor;
    if (actor.type === 'user') await confirmSession(deps, { sub: actor.userId, sid: actor.sessionId, test_mode: actor.mode === 'test' });
  });
  await registerOpenApi(fastify, config.publicUrl);
  registerGate(fastify, deps);
  refuseUnlistedQueries(fastify);

  for (const module of modules) module.routes?.(fastify, deps);

  serveOpenApiDocument(fastify);
  return { app: fastify, deps };
}

function createFastify(options: BuildOptions, lazily: boolean): App {
  const { config } = options;
  return Fastify({
    logger: withRedactedSecrets(options.logger ?? { level: config.logLevel }),
    genReqId: () => newId('req'),
    bodyLimit: BODY_LIMIT_BYTES,
    requestTimeout: REQUEST_TIMEOUT_MS,
    // The Host header is checked in the gate (RFC 9112 §3.2), so that a request without one is answered
    // in the envelope, as one with two or a malformed one is, instead of by Node's bare 400.
    http: { requireHostHeader: false },
    // Only the configured reverse proxies' X-Forwarded-For is believed (TRUST_PROXY); by default none.
    trustProxy: config.trustProxy.length ? config.trustProxy : false,
    // Shutting down, requests still arriving on open connections are answered as usual (in the
    // envelope, with Request-Id), each with Connection: close: see closeConnectionsOnClose.
    return503OnClosing: false,
    routerOptions: { ignoreTrailingSlash: true, maxParamLength: MAX_PARAM_LENGTH },
    frameworkErrors: frameworkErrorHandler,
    schemaErrorFormatter: schemaErrorMessage,
    clientErrorHandler,
    ...(lazily && {
      schemaController: { compilersFactory: { buildSerializer: (external, opts) => onFirstUse(SerializerSelector()(external, opts)) } },
    }),
  }).withTypeProvider<TypeBoxTypeProvider>();
}

/**
 * An Expect other than 100-continue is answered by the gate in the envelope (417 expectation_failed)
 * instead of by Node's bare 417.
 */
function passExpectationsToGate(fastify: App): void {
  fastify.server.on('checkExpectation', (req, res) => {
    unmetExpectations.add(req);
    fastify.server.emit('request', req, res);
  });
}

/**
 * Once close() starts, every response ends its connection, so no kept-alive connection holds the
 * shutdown open until the client's keep-alive runs out.
 */
function closeConnectionsOnClose(fastify: App): void {
  let closing = false;
  fastify.addHook('preClose', (done) => {
    closing = true;
    done();
  });
  fastify.addHook('onSend', (request, reply, payload, done) => {
    if (closing) reply.header('connection', 'close');
    noStoreForApi(request, reply);
    done(null, payload);
  });
}

function createDeps(fastify: App, config: Readonly<Config>, database: Database, clock: Clock, modules: Module[]): Deps {
  const secrets = new SecretBox(database, clock, config.encryptionKeys);
  const deps: Deps = {
    config,
    database,
    clock,
    log: fastify.log,
    keys: new SigningKeys(database, clock, config.publicUrl, secrets, (err) =>
      fastify.log.error({ err }, 'signing keys could not be reloaded; this process keeps its last keys (a key sealed with an ENCRYPTION_KEY it lacks?)'),
    ),
    secrets,
    jobs: undefined as unknown as JobRunner,
  };
  deps.jobs = new JobRunner(deps, modules.flatMap((m) => m.jobs?.() ?? []));
  return deps;
}

/**
 * An operation that takes no query parameter refuses one (422 naming query.<name>), as the lists
 * refuse one they do not take: ignored, `logout?all_sessions=true` would end one session while the
 * client believes it ended all. The OAuth token endpoint keeps RFC 6749's rules (§3.2: its URI may
 * carry a query of its own; errors in its own shape), and the SSO callback answers 501 whatever a
 * provider sends; the OpenAPI document may be fetched with a cache-busting query.
 */
function refuseUnlistedQueries(fastify: App): void {
  fastify.addHook('onRoute', (route) => {
    if (!route.url.startsWith('/v1/') || ['/v1/auth/oauth/token', '/v1/auth/sso/:provider/callback', '/v1/openapi.json'].includes(route.url) || route.schema?.querystring) return;
    route.schema = { ...route.schema, querystring: Type.Object({}, { additionalProperties: false }) };
  });
}

function serveOpenApiDocument(fastify: App): void {
  fastify.get('/v1/openapi.json', {
    schema: { summary: 'This document', tags: ['Discovery'], response: { 200: Type.Object({}, { additionalProperties: true }) } },
    config: { meta: { auth: 'none' } },
    handler: async () => fastify.swagger(),
  });
}
