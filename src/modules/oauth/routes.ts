import type { App } from '../types.js';
import type { Deps } from '../../context.js';
import { ctxOf } from '../../http/gate.js';
import { unstorableText } from '../../http/validation.js';
import { AuthorizationCode, AuthorizationCodeBody, OAuthError, OAuthErrorBody, TokenBody, TokenResponse } from './schemas.js';
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
      response: { 200: TokenResponse, 400: OAuthErrorBody },
    },
    attachValidation: true,
    config: { meta: { auth: 'none', throttle: 'auth' } },
    // A body that is not JSON (or not a form) is an RFC 6749 invalid_request too; size, media type,
    // throttle and server errors keep the general envelope (parent handler).
    errorHandler: (err, _request, reply) => {
      const code = (err as { code?: string }).code;
      if (code === 'FST_ERR_CTP_INVALID_JSON_BODY' || code === 'FST_ERR_CTP_EMPTY_JSON_BODY' || (err instanceof SyntaxError && (err as { statusCode?: number }).statusCode === 400)) {
        return reply.code(400).header('cache-control', 'no-store').header('pragma', 'no-cache').send(new OAuthError('invalid_request', 'The request body is not valid JSON.').toBody());
      }
      throw err;
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
