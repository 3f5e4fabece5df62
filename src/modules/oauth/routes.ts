import type { App } from '../types.js';
import type { Deps } from '../../context.js';
import { ctxOf } from '../../http/gate.js';
import { unstorableText } from '../../http/validation.js';
import { toApiError } from '../../http/errors-plugin.js';
import { ApiError } from '../../errors.js';
import { readableFromAnyOrigin } from '../../http/cors.js';
import {
  AuthorizationCode, AuthorizationCodeBody, OAuthError, OAuthErrorBody, OAuthThrottledBody, TokenBody, TokenResponse,
} from './schemas.js';
import { issueAuthorizationCode } from './authorization-codes.js';
import { exchangeToken } from './token.js';

export function oauthRoutes(app: App, deps: Deps): void {
  app.post('/v1/auth/oauth/authorization-codes', {
    schema: { summary: 'An authorization code for the hosted sign-in flow (PKCE S256)', tags: ['Auth'], body: AuthorizationCodeBody, response: { 201: AuthorizationCode } },
    config: { meta: { auth: 'user', errors: ['application_not_found', 'entitlement_required', 'application_not_available', 'tenant_suspended'] } },
    handler: async (request, reply) => {
      const result = await issueAuthorizationCode(ctxOf(deps, request), request.body);
      reply.code(201);
      return result;
    },
  });

  // OAuth errors are RFC 6749 §5.2 bodies, so schema problems are reported by the verb, not the gate.
  app.post('/v1/auth/oauth/token', {
    schema: {
      summary: 'Exchange an authorization code or an app refresh token (public client, PKCE)',
      tags: ['Auth'],
      consumes: ['application/json', 'application/x-www-form-urlencoded'],
      body: TokenBody,
      response: { 200: TokenResponse, 400: OAuthErrorBody, 429: OAuthThrottledBody },
    },
    attachValidation: true,
    config: { meta: { auth: 'none', throttle: 'auth' } },
    onSend: readableFromAnyOrigin,
    // Errors raised before the handler (body parsing, the body limit, the gate's throttle) answer in
    // the RFC 6749 shape too (Part A convention 6); server errors keep the general envelope (parent handler).
    errorHandler: (err, _request, reply) => {
      const oauth = oauthErrorOf(err);
      if (!oauth) throw err;
      return reply.code(oauth.status).headers(oauth.headers).header('cache-control', 'no-store').header('pragma', 'no-cache').send(oauth.body);
    },
    handler: async (request, reply) => {
      reply.header('cache-control', 'no-store').header('pragma', 'no-cache');
      try {
        if (request.validationError || unstorableText(request.body, '') !== null) throw new OAuthError('invalid_request', 'The request body is malformed.');
        return await exchangeToken(ctxOf(deps, request), request.body as Record<string, unknown>);
      } catch (err) {
        if (err instanceof OAuthError) return reply.code(400).send(err.toBody());
        throw err;
      }
    },
  });
}

/**
 * A client error raised on the token endpoint before its handler, as RFC 6749 §5.2 has it: the per-IP
 * throttle keeps 429 and Retry-After as `temporarily_unavailable` (RFC 6749 §4.1.2.1: retry later);
 * anything else the request did wrong (not JSON, neither JSON nor a form, over the body limit, a bad
 * Content-Length) is 400 `invalid_request`. Null for server errors, which keep the general envelope.
 */
function oauthErrorOf(err: unknown): { status: 400 | 429; headers: Record<string, string>; body: OAuthErrorBody | OAuthThrottledBody } | null {
  if (err instanceof OAuthError) return { status: 400, headers: {}, body: err.toBody() };
  const error = toApiError(err);
  if (error.status === 429) return { status: 429, headers: error.headers, body: { error: 'temporarily_unavailable', error_description: error.message } };
  if (error.status < 400 || error.status >= 500) return null;
  // A media type it does not take (Fastify's refusal); a compressed body keeps its own description.
  const description = error.code === 'unsupported_media_type' && !(err instanceof ApiError)
    ? 'The request body must be application/x-www-form-urlencoded or application/json.'
    : error.message;
  return { status: 400, headers: {}, body: new OAuthError('invalid_request', description).toBody() };
}
