import { Type } from '@sinclair/typebox';
import type { App } from '../types.js';
import type { Deps } from '../../context.js';
import { ctxOf } from '../../http/gate.js';
import { UserIdParam } from '../../http/schemas.js';
import { LogoutBody, SessionList, SessionListQuery } from './schemas.js';
import { listSessions, logout, revokeSession } from './service.js';

export function sessionRoutes(app: App, deps: Deps): void {
  app.post('/v1/auth/logout', {
    schema: { summary: 'End this session, or every session with all_sessions', tags: ['Auth'], body: LogoutBody, response: { 204: Type.Null() } },
    config: {
      meta: {
        auth: 'user',
        destructive: { when: 'all_sessions is true', test: (request) => (request.body as LogoutBody | undefined)?.all_sessions === true },
      },
    },
    handler: async (request, reply) => {
      await logout(ctxOf(deps, request), request.body);
      return reply.code(204).send(null);
    },
  });

  app.get('/v1/users/:id/sessions', {
    schema: { summary: "List a user's active sessions", tags: ['Sessions'], params: UserIdParam, querystring: SessionListQuery, response: { 200: SessionList } },
    config: { meta: { auth: 'any', errors: ['user_not_found', 'forbidden'] } },
    handler: (request) => listSessions(ctxOf(deps, request), request.params.id, request.query),
  });

  app.delete('/v1/users/:id/sessions/:sessionId', {
    schema: {
      summary: 'Revoke one session and its refresh tokens',
      tags: ['Sessions'],
      params: Type.Object({ id: UserIdParam.properties.id, sessionId: Type.String({ maxLength: 64 }) }),
      response: { 204: Type.Null() },
    },
    config: { meta: { auth: 'any', destructive: 'always', errors: ['user_not_found', 'session_not_found', 'forbidden'] } },
    handler: async (request, reply) => {
      await revokeSession(ctxOf(deps, request), request.params.id, request.params.sessionId);
      return reply.code(204).send(null);
    },
  });
}
