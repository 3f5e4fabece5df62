import { Type } from '@sinclair/typebox';
import type { App } from '../types.js';
import type { Deps } from '../../context.js';
import { ctxOf } from '../../http/gate.js';
import { ListOf } from '../../http/schemas.js';
import { Assignment, CreateRoleBody, EffectivePermissions, PatchRoleBody, PermissionItem, Role, RoleIdParam, ScopeQuery, UserAppParams, UserRoleParams, UserRolesQuery } from './schemas.js';
import { createRole, deleteRole, listPermissions, listRoles, patchRole, visibleRole } from './service.js';
import { assignRole, effectivePermissions, listUserRoles, removeRole } from './assignments.js';
import { toRole } from './store.js';
import { UserIdParam } from '../../http/schemas.js';

const tags = ['Roles'];

export function roleRoutes(app: App, deps: Deps): void {
  app.get('/v1/permissions', {
    schema: { summary: 'Permission keys: platform plus visible Applications', tags, querystring: Type.Object({ scope: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })) }, { additionalProperties: false }), response: { 200: ListOf(PermissionItem) } },
    config: { meta: { auth: 'any' } },
    handler: (request) => listPermissions(ctxOf(deps, request), request.query.scope),
  });
  app.get('/v1/roles', {
    schema: { summary: 'List Roles visible to the caller', tags, querystring: ScopeQuery, response: { 200: ListOf(Role) } },
    config: { meta: { auth: 'any' } },
    handler: (request) => listRoles(ctxOf(deps, request), request.query),
  });
  app.post('/v1/roles', {
    schema: { summary: 'Create a Role', tags, body: CreateRoleBody, response: { 201: Role } },
    config: { meta: { auth: 'any', idempotency: 'optional', errors: ['unknown_permission', 'role_escalation_forbidden', 'app_role_not_declared', 'role_name_taken', 'forbidden', 'application_not_found'] } },
    handler: async (request, reply) => {
      const role = await createRole(ctxOf(deps, request), request.body);
      reply.code(201);
      return role;
    },
  });
  app.get('/v1/roles/:id', {
    schema: { summary: 'Fetch a Role', tags, params: RoleIdParam, response: { 200: Role } },
    config: { meta: { auth: 'any', errors: ['role_not_found'] } },
    handler: async (request) => toRole(await visibleRole(ctxOf(deps, request), request.params.id)),
  });
  app.patch('/v1/roles/:id', {
    schema: { summary: "Replace a Role's permissions or description", tags, params: RoleIdParam, body: PatchRoleBody, response: { 200: Role } },
    config: { meta: { auth: 'any', idempotency: 'optional', errors: ['role_not_found', 'seed_role_immutable', 'read_only_field', 'unknown_permission', 'role_escalation_forbidden', 'forbidden'] } },
    handler: (request) => patchRole(ctxOf(deps, request), request.params.id, request.body),
  });
  app.delete('/v1/roles/:id', {
    schema: { summary: 'Delete an unassigned, non-seed Role', tags, params: RoleIdParam, response: { 204: Type.Null() } },
    config: { meta: { auth: 'any', destructive: 'always', errors: ['role_not_found', 'seed_role_immutable', 'role_in_use', 'forbidden'] } },
    handler: async (request, reply) => {
      await deleteRole(ctxOf(deps, request), request.params.id);
      reply.code(204);
      return null;
    },
  });
  app.get('/v1/users/:id/roles', {
    schema: { summary: "A user's Role assignments (implicit default_app_role rows while access is active)", tags, params: UserIdParam, querystring: UserRolesQuery, response: { 200: ListOf(Assignment) } },
    config: { meta: { auth: 'any', errors: ['user_not_found'] } },
    handler: (request) => listUserRoles(ctxOf(deps, request), request.params.id, request.query.application_id),
  });
  app.post('/v1/users/:id/roles/:roleId', {
    schema: { summary: 'Assign a Role (201, or 200 when already held)', tags, params: UserRoleParams, body: Type.Object({}, { additionalProperties: false }), response: { 200: Assignment, 201: Assignment } },
    config: { meta: { auth: 'any', idempotency: 'optional', errors: ['role_not_found', 'user_not_found', 'role_scope_mismatch', 'role_escalation_forbidden', 'forbidden'] } },
    handler: async (request, reply) => {
      const { created, assignment } = await assignRole(ctxOf(deps, request), request.params.id, request.params.roleId);
      reply.code(created ? 201 : 200);
      return assignment;
    },
  });
  app.delete('/v1/users/:id/roles/:roleId', {
    schema: { summary: 'Remove a Role assignment (idempotent)', tags, params: UserRoleParams, response: { 204: Type.Null() } },
    config: { meta: { auth: 'any', destructive: 'always', errors: ['role_not_found', 'user_not_found', 'member_role_required', 'role_scope_mismatch', 'role_escalation_forbidden', 'forbidden'] } },
    handler: async (request, reply) => {
      await removeRole(ctxOf(deps, request), request.params.id, request.params.roleId);
      reply.code(204);
      return null;
    },
  });
  app.get('/v1/users/:id/apps/:appId/effective-permissions', {
    schema: { summary: 'The live access check', tags, params: UserAppParams, response: { 200: EffectivePermissions } },
    config: { meta: { auth: 'any', session: 'fused', errors: ['user_not_found', 'application_not_found'] } },
    handler: (request) => effectivePermissions(ctxOf(deps, request), request.params.id, request.params.appId),
  });
}
