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

  app.get('/.well-known/openid-configuration', {
    schema: { summary: 'Issuer metadata', tags: ['Discovery'], response: { 200: Discovery } },
    config: { meta: { auth: 'none' } },
    onSend: readableFromAnyOrigin,
    handler: async (_request, reply) => {
      reply.header('cache-control', `public, max-age=${JWKS_MAX_AGE_SECONDS}`);
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
        subject_types_supported: ['public'],
        id_token_signing_alg_values_supported: ['RS256'],
      };
    },
  });
}
