import { Type } from '@sinclair/typebox';
import type { App } from '../types.js';
import type { Deps } from '../../context.js';
import { ApiError } from '../../errors.js';
import { DatabaseBusyError } from '../../db/types.js';
import { JWKS_MAX_AGE_SECONDS } from '../../auth/signing-keys.js';
import { readableFromAnyOrigin } from '../../http/cors.js';

const Jwks = Type.Object({ keys: Type.Array(Type.Object({}, { additionalProperties: true })) });
const Discovery = Type.Object({}, { additionalProperties: true });

export function systemRoutes(app: App, deps: Deps): void {
  app.get('/health', {
    schema: { summary: 'Liveness and database reachability', tags: ['Operations'], response: { 200: Type.Object({ status: Type.Literal('ok') }) } },
    config: { meta: { auth: 'none' } },
    handler: async () => {
      try {
        await deps.database.ping();
      } catch (err) {
        if (err instanceof DatabaseBusyError) throw err; // 503 with its own message and Retry-After
        throw new ApiError('service_unavailable', { message: 'The database is unreachable.', headers: { 'retry-after': '5' } });
      }
      return { status: 'ok' as const };
    },
  });

  app.get('/.well-known/jwks.json', {
    schema: { summary: 'Public signing keys', tags: ['Discovery'], response: { 200: Jwks } },
    config: { meta: { auth: 'none' } },
    onSend: readableFromAnyOrigin,
    handler: async (_request, reply) => {
      reply.header('cache-control', `public, max-age=${JWKS_MAX_AGE_SECONDS}`);
      return deps.keys.jwks();
    },
  });

  // RFC 8414 metadata for OAuth clients, and the OpenID discovery document: the same authorization
  // server. The authorization response names its issuer (RFC 9207, iss), against mix-up attacks on
  // clients of several servers (RFC 9700 §4.4).
  const serverMetadata = () => {
    const base = deps.config.publicUrl;
    return {
      issuer: base,
      jwks_uri: `${base}/.well-known/jwks.json`,
      authorization_endpoint: `${base}/signin`,
      token_endpoint: `${base}/v1/auth/oauth/token`,
      response_types_supported: ['code'],
      grant_types_supported: ['authorization_code', 'refresh_token'],
      code_challenge_methods_supported: ['S256'],
      token_endpoint_auth_methods_supported: ['none'],
      authorization_response_iss_parameter_supported: true,
    };
  };
  const discovery = (path: string, summary: string, body: () => Record<string, unknown>) =>
    app.get(path, {
      schema: { summary, tags: ['Discovery'], response: { 200: Discovery } },
      config: { meta: { auth: 'none' } },
      onSend: readableFromAnyOrigin,
      handler: async (_request, reply) => {
        reply.header('cache-control', `public, max-age=${JWKS_MAX_AGE_SECONDS}`);
        return body();
      },
    });
  discovery('/.well-known/openid-configuration', 'Issuer metadata', () => ({
    ...serverMetadata(),
    subject_types_supported: ['public'],
    id_token_signing_alg_values_supported: ['RS256'],
  }));
  discovery('/.well-known/oauth-authorization-server', 'OAuth 2.0 authorization server metadata (RFC 8414)', serverMetadata);
}
