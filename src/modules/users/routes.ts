import { Type } from '@sinclair/typebox';
import type { App } from '../types.js';
import type { Deps } from '../../context.js';
import { ctxOf } from '../../http/gate.js';
import { EmptyBody, ListOf, UserIdParam } from '../../http/schemas.js';
import { CreateUserBody, ErasureRequest, ExportBundle, PatchUserBody, ReasonBody, User, UserListQuery } from './schemas.js';
import { createUser, getUser, listUsers, resendInvitation } from './service.js';
import { deleteUser, patchUser, suspendUser } from './status.js';
import { cancelErasure, exportUser, requestErasure } from './privacy.js';

const tags = ['Users'];
const Accepted = Type.Object({ status: Type.Literal('accepted') });

export function userRoutes(app: App, deps: Deps): void {
  app.get('/v1/users', {
    schema: { summary: 'List and search users', tags, querystring: UserListQuery, response: { 200: ListOf(User) } },
    config: { meta: { auth: 'any', errors: ['forbidden'] } },
    handler: (request) => listUsers(ctxOf(deps, request), request.query),
  });

  app.post('/v1/users', {
    schema: { summary: 'Create a user (invited by default, or active without a password)', tags, body: CreateUserBody, response: { 201: User } },
    config: { meta: { auth: 'any', permission: 'users.manage', idempotency: 'optional', errors: ['email_taken'] } },
    handler: async (request, reply) => {
      const user = await createUser(ctxOf(deps, request), request.body);
      reply.code(201);
      return user;
    },
  });

  app.get('/v1/users/:id', {
    schema: {
      summary: 'Fetch a user',
      description: 'Self, users.list or app-confined users.list; soft-deleted users only for users.manage.',
      tags,
      params: UserIdParam,
      response: { 200: User },
    },
    config: { meta: { auth: 'any', errors: ['user_not_found', 'user_token_required'] } },
    handler: (request) => getUser(ctxOf(deps, request), request.params.id),
  });

  app.patch('/v1/users/:id', {
    schema: { summary: 'Change email (self: pending until verified) or status (users.manage)', tags, params: UserIdParam, body: PatchUserBody, response: { 200: User } },
    config: {
      meta: {
        auth: 'any',
        idempotency: 'optional',
        // Setting status suspended is a user suspend (Part A convention 11), however it is asked for.
        destructive: { when: 'status is set to suspended', test: (request) => (request.body as { status?: string } | undefined)?.status === 'suspended' },
        errors: ['user_not_found', 'forbidden', 'email_taken', 'status_change_forbidden', 'invalid_status_transition', 'erasure_scheduled', 'rate_limited', 'read_only_field'],
      },
    },
    handler: (request) => patchUser(ctxOf(deps, request), request.params.id, request.body as PatchUserBody),
  });

  app.delete('/v1/users/:id', {
    schema: { summary: 'Soft-delete a user', tags, params: UserIdParam, response: { 204: Type.Null() } },
    config: { meta: { auth: 'any', destructive: 'always', errors: ['user_not_found', 'forbidden'] } },
    handler: async (request, reply) => {
      await deleteUser(ctxOf(deps, request), request.params.id);
      reply.code(204);
      return null;
    },
  });

  app.post('/v1/users/:id/suspend', {
    schema: { summary: 'Suspend a user', tags, params: UserIdParam, body: ReasonBody, response: { 200: User } },
    config: { meta: { auth: 'any', permission: 'users.manage', destructive: 'always', idempotency: 'optional', errors: ['user_not_found', 'invalid_status_transition', 'status_change_forbidden'] } },
    handler: (request) => suspendUser(ctxOf(deps, request), request.params.id, request.body?.reason),
  });

  app.post('/v1/users/:id/invitation', {
    schema: { summary: 'Send a new invitation', tags, params: UserIdParam, body: EmptyBody, response: { 202: Accepted } },
    // A re-send replaces the mailed link and counts against 3 an hour: a client retrying after a lost
    // answer (a timeout) under its Idempotency-Key gets the first 202 back, not a second mail that
    // kills the first link. The answer holds no secret, so it can be stored like the other writes'.
    config: { meta: { auth: 'any', permission: 'users.manage', idempotency: 'optional', errors: ['user_not_found', 'invalid_status_transition', 'rate_limited'] } },
    handler: async (request, reply) => {
      await resendInvitation(ctxOf(deps, request), request.params.id);
      reply.code(202);
      return { status: 'accepted' as const };
    },
  });

  app.get('/v1/users/:id/export', {
    schema: { summary: 'Export all data held about a user', tags, params: UserIdParam, response: { 200: ExportBundle } },
    config: { meta: { auth: 'any', errors: ['user_not_found', 'forbidden', 'rate_limited'] } },
    handler: (request) => exportUser(ctxOf(deps, request), request.params.id),
  });

  app.post('/v1/users/:id/erasure-requests', {
    schema: { summary: 'Request erasure: soft delete now, hard delete after 7 days', tags, params: UserIdParam, body: ReasonBody, response: { 202: ErasureRequest } },
    config: { meta: { auth: 'any', destructive: 'always', idempotency: 'optional', errors: ['user_not_found', 'forbidden'] } },
    handler: async (request, reply) => {
      const erasure = await requestErasure(ctxOf(deps, request), request.params.id, request.body.reason ?? null);
      reply.code(202);
      return erasure;
    },
  });

  app.delete('/v1/users/:id/erasure-requests/current', {
    schema: { summary: 'Cancel a scheduled erasure', tags, params: UserIdParam, response: { 204: Type.Null() } },
    config: { meta: { auth: 'any', permission: 'users.manage', destructive: 'always', errors: ['user_not_found', 'erasure_not_scheduled'] } },
    handler: async (request, reply) => {
      await cancelErasure(ctxOf(deps, request), request.params.id);
      reply.code(204);
      return null;
    },
  });
}
