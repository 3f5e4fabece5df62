import { Type } from '@sinclair/typebox';
import type { App } from '../types.js';
import type { Deps } from '../../context.js';
import { ctxOf } from '../../http/gate.js';
import { EmptyBody, ListOf } from '../../http/schemas.js';
import { ApiKey, ApiKeyWithSecret, CreateKeyBody, KeyIdParam, KeyListQuery, PatchKeyBody } from './schemas.js';
import { createKey, getKey, listKeys, patchKey, revokeKey, rotateKey } from './service.js';

const tags = ['API Keys'];
const errors = ['api_key_not_found', 'forbidden'] as const;

/**
 * API keys are managed only with a User token: a key can never create, change or rotate keys.
 * Create and rotate take no Idempotency-Key: a stored replay would keep the secret for 24 hours.
 */
export function apiKeyRoutes(app: App, deps: Deps): void {
  app.get('/v1/api-keys', {
    schema: { summary: 'List API keys in scope for the caller', tags, querystring: KeyListQuery, response: { 200: ListOf(ApiKey) } },
    config: { meta: { auth: 'user' } },
    handler: (request) => listKeys(ctxOf(deps, request), request.query),
  });
  app.post('/v1/api-keys', {
    schema: { summary: 'Create an API key; the secret is shown once', tags, body: CreateKeyBody, response: { 201: ApiKeyWithSecret } },
    config: { meta: { auth: 'user', errors: ['forbidden', 'role_escalation_forbidden', 'unknown_permission', 'application_not_found'] } },
    handler: async (request, reply) => {
      const key = await createKey(ctxOf(deps, request), request.body);
      reply.code(201);
      return key;
    },
  });
  app.get('/v1/api-keys/:id', {
    schema: { summary: 'Fetch an API key (never its secret)', tags, params: KeyIdParam, response: { 200: ApiKey } },
    config: { meta: { auth: 'user', errors: [...errors] } },
    handler: (request) => getKey(ctxOf(deps, request), request.params.id),
  });
  app.patch('/v1/api-keys/:id', {
    schema: { summary: 'Change name, permissions or restrict_destructive', tags, params: KeyIdParam, body: PatchKeyBody, response: { 200: ApiKey } },
    config: { meta: { auth: 'user', idempotency: 'optional', errors: [...errors, 'api_key_revoked', 'role_escalation_forbidden', 'unknown_permission', 'read_only_field'] } },
    handler: (request) => patchKey(ctxOf(deps, request), request.params.id, request.body),
  });
  app.post('/v1/api-keys/:id/rotate', {
    schema: { summary: 'Replace the secret; the old one stops working at once', tags, params: KeyIdParam, body: EmptyBody, response: { 200: ApiKeyWithSecret } },
    config: { meta: { auth: 'user', errors: [...errors, 'api_key_revoked', 'role_escalation_forbidden'] } },
    handler: (request) => rotateKey(ctxOf(deps, request), request.params.id),
  });
  app.delete('/v1/api-keys/:id', {
    schema: { summary: 'Revoke an API key permanently', tags, params: KeyIdParam, response: { 204: Type.Null() } },
    config: { meta: { auth: 'user', destructive: 'always', errors: [...errors] } },
    handler: async (request, reply) => {
      await revokeKey(ctxOf(deps, request), request.params.id);
      reply.code(204);
      return null;
    },
  });
}
