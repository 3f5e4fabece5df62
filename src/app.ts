import Fastify, { errorCodes as fastifyErrors, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
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
import { validatorCompiler } from './http/validation.js';
import { SerializerSelector } from '@fastify/fast-json-stringify-compiler';
import { frameworkErrorHandler, MAX_PARAM_LENGTH, noStoreForApi, registerErrorHandling } from './http/errors-plugin.js';
import { registerGate, unmetExpectations } from './http/gate.js';
import { validlyPercentEncoded } from './http/validation.js';
import { registerOpenApi } from './http/openapi.js';
import { MODULES } from './modules/index.js';
import { devModule } from './modules/dev/index.js';
import type { App, Module } from './modules/types.js';
import { Type } from '@sinclair/typebox';
import { LINK_PAGE_PATHS } from './modules/links/paths.js';
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

export const BODY_LIMIT_BYTES = 1024 * 1024;

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
  const fastify = Fastify({
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
    // envelope, with Request-Id), each with Connection: close: see the preClose hook below.
    return503OnClosing: false,
    routerOptions: { ignoreTrailingSlash: true, maxParamLength: MAX_PARAM_LENGTH },
    frameworkErrors: frameworkErrorHandler,
    clientErrorHandler,
    ...(lazily && {
      schemaController: { compilersFactory: { buildSerializer: (external, opts) => onFirstUse(SerializerSelector()(external, opts)) } },
    }),
  }).withTypeProvider<TypeBoxTypeProvider>();

  fastify.setValidatorCompiler(lazily ? onFirstUse(validatorCompiler) : validatorCompiler);
  // An Expect other than 100-continue is answered by the gate in the envelope (417 expectation_failed)
  // instead of by Node's bare 417.
  fastify.server.on('checkExpectation', (req, res) => {
    unmetExpectations.add(req);
    fastify.server.emit('request', req, res);
  });
  // Once close() starts, every response ends its connection, so no kept-alive connection holds the
  // shutdown open until the client's keep-alive runs out.
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
  fastify.removeContentTypeParser('text/plain');
  // An empty JSON body is no body (as Express reads it): a client that always sends
  // `Content-Type: application/json` can call the bodyless POSTs (logout, enrol, rotate), and a
  // route that needs fields names them in a 422. Anything else is parsed as before.
  // Bytes that are not UTF-8 and numbers beyond a double (1e309 parses to Infinity) are malformed
  // JSON (IV-3), never stored as U+FFFD or null; so is an object naming one key twice (RFC 8259
  // leaves which one wins to the parser, and two readers of one body must not disagree).
  const parseJson = fastify.getDefaultJsonParser('error', 'error');
  const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
  const malformed = () => new fastifyErrors.FST_ERR_CTP_INVALID_JSON_BODY();
  fastify.removeContentTypeParser('application/json');
  fastify.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, body, done) => {
    let text: string;
    try {
      text = utf8.decode(body as Buffer);
    } catch {
      return done(malformed(), undefined);
    }
    if (text.trim() === '') return done(null, undefined);
    parseJson(request, text, (err, value) => {
      if (err) return done(err, undefined);
      if (hasNonFiniteNumber(value) || hasDuplicateKey(text, value)) return done(malformed(), undefined);
      done(null, value);
    });
  });
  // The OAuth token endpoint and the HTML pages' forms (hosted sign-in, the mailed-link pages, the local payment simulator)
  // also take form bodies; the API is JSON only (Part A convention 1). A repeated parameter stays a
  // list, so the route's schema refuses it (RFC 6749 §3.1: parameters MUST NOT be included more than once).
  fastify.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'string' }, (request, body, done) => {
    const url = request.routeOptions.url ?? '';
    if (url !== '/v1/auth/oauth/token' && !url.startsWith('/signin') && !LINK_PAGE_PATHS.includes(url) && !url.startsWith('/billing/simulator/')) {
      return done(new fastifyErrors.FST_ERR_CTP_INVALID_MEDIA_TYPE('application/x-www-form-urlencoded'), undefined);
    }
    // URLSearchParams reads a malformed escape leniently (`%FF` as U+FFFD): refused, as in a query.
    if (!validlyPercentEncoded(body as string)) {
      return done(new ApiError('bad_request', { message: 'The form body is not validly percent-encoded.' }), undefined);
    }
    const params = new URLSearchParams(body as string);
    done(null, Object.fromEntries([...new Set(params.keys())].map((key) => {
      const values = params.getAll(key);
      return [key, values.length === 1 ? values[0] : values];
    })));
  });

  // Bodies are read as sent, never decoded: one declaring a Content-Encoding (gzip, deflate, br) is
  // refused (RFC 9110 §8.4.1: 415, Accept-Encoding: identity) instead of being read as the bytes it
  // is not (a gzip body answered as malformed JSON) or applied although it claims to be compressed (a
  // proxy or log that decodes it sees another request than the one the service ran).
  fastify.addHook('preParsing', async (request, _reply, payload) => {
    // Likewise a transfer coding beside chunked (`gzip, chunked`), which Node does not decode either: a
    // malformed request (400, the spec's mapping; the token endpoint's invalid_request), not one read as
    // the bytes it is not (RFC 9112 §6.1 lets a server refuse a transfer coding it does not understand).
    const transfer = request.headers['transfer-encoding']?.split(',').map((c) => c.trim().toLowerCase()).filter((c) => c !== 'chunked') ?? [];
    if (transfer.length > 0) {
      throw new ApiError('bad_request', { message: 'The only transfer coding supported is chunked.' });
    }
    // A GET's (and HEAD's) body is not read (docs/decisions.md "Methods"), so neither is its coding.
    const coding = request.method === 'GET' || request.method === 'HEAD' ? undefined : request.headers['content-encoding']?.trim().toLowerCase();
    const hasBody = request.headers['transfer-encoding'] !== undefined || Number(request.headers['content-length'] ?? 0) > 0;
    if (coding && coding !== 'identity' && hasBody) {
      throw new ApiError('unsupported_media_type', {
        message: 'Request bodies must not be compressed: send them without Content-Encoding.',
        headers: { 'accept-encoding': 'identity' },
      });
    }
    return payload;
  });

  const modules = [...MODULES, ...(config.devClock ? [devModule] : []), ...(options.extraModules ?? [])];
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

  fastify.addHook('onClose', async () => deps.keys.stop());
  registerErrorHandling(fastify, async (request) => {
    const actor = request.actor;
    if (actor.type === 'user') await confirmSession(deps, { sub: actor.userId, sid: actor.sessionId, test_mode: actor.mode === 'test' });
  });
  await registerOpenApi(fastify, config.publicUrl);
  registerGate(fastify, deps);
  // An operation that takes no query parameter refuses one (422 naming query.<name>), as the lists
  // refuse one they do not take: ignored, `logout?all_sessions=true` would end one session while the
  // client believes it ended all. The OAuth token endpoint keeps RFC 6749's rules (§3.2: its URI may
  // carry a query of its own; errors in its own shape), and the SSO callback answers 501 whatever a
  // provider sends; the OpenAPI document may be fetched with a cache-busting query.
  fastify.addHook('onRoute', (route) => {
    if (!route.url.startsWith('/v1/') || ['/v1/auth/oauth/token', '/v1/auth/sso/:provider/callback', '/v1/openapi.json'].includes(route.url) || route.schema?.querystring) return;
    route.schema = { ...route.schema, querystring: Type.Object({}, { additionalProperties: false }) };
  });

  for (const module of modules) module.routes?.(fastify, deps);

  fastify.get('/v1/openapi.json', {
    schema: { summary: 'This document', tags: ['Discovery'], response: { 200: Type.Object({}, { additionalProperties: true }) } },
    config: { meta: { auth: 'none' } },
    handler: async () => fastify.swagger(),
  });

  return { app: fastify, deps };
}

/**
 * True when a parsed JSON value holds ±Infinity. One pass over the parsed value (about a tenth of
 * the parse; a reviver triples it), iterative so that deeply nested bodies reach their 422.
 */
function hasNonFiniteNumber(value: unknown): boolean {
  const stack: unknown[] = [value];
  while (stack.length > 0) {
    const v = stack.pop();
    if (typeof v === 'number') {
      if (!Number.isFinite(v)) return true;
    } else if (typeof v === 'object' && v !== null) {
      if (Array.isArray(v)) for (const item of v) stack.push(item);
      else for (const key in v) stack.push((v as Record<string, unknown>)[key]);
    }
  }
  return false;
}

/**
 * True when some object in the JSON text names a key twice (the parsed value kept only the last):
 * the text's name/value separators (colons outside strings) outnumber the parsed value's keys.
 */
function hasDuplicateKey(text: string, value: unknown): boolean {
  let separators = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 58) separators++;
    else if (c === 34) {
      // Skip the string: it ends at the next quote not escaped by a backslash.
      for (i++; i < text.length; i++) {
        const d = text.charCodeAt(i);
        if (d === 92) i++;
        else if (d === 34) break;
      }
    }
  }
  if (separators === 0) return false;
  let keys = 0;
  const stack: unknown[] = [value];
  while (stack.length > 0) {
    const v = stack.pop();
    if (typeof v !== 'object' || v === null) continue;
    if (Array.isArray(v)) for (const item of v) stack.push(item);
    else {
      const names = Object.keys(v);
      keys += names.length;
      for (const name of names) stack.push((v as Record<string, unknown>)[name]);
    }
  }
  return separators !== keys;
}
