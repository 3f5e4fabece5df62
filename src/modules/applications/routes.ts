import type { App } from '../types.js';
import type { Deps } from '../../context.js';
import { ctxOf } from '../../http/gate.js';
import { ListOf } from '../../http/schemas.js';
import { AppIdParam, Application, ApplicationListItem, ApplicationListQuery, CreateApplicationBody, PatchApplicationBody } from './schemas.js';
import { createApplication, getApplication, listApplications } from './service.js';
import { patchApplication } from './patch.js';

const tags = ['Applications'];

export function applicationRoutes(app: App, deps: Deps): void {
  app.get('/v1/applications', {
    schema: { summary: 'List the catalog (trimmed view)', tags, querystring: ApplicationListQuery, response: { 200: ListOf(ApplicationListItem) } },
    config: { meta: { auth: 'any', errors: ['forbidden'] } },
    handler: (request) => listApplications(ctxOf(deps, request), request.query),
  });
  app.post('/v1/applications', {
    schema: { summary: 'Register an Application', tags, body: CreateApplicationBody, response: { 201: Application } },
    config: {
      meta: { auth: 'any', permission: 'applications.manage', idempotency: 'optional', errors: ['slug_taken', 'plan_limit_reached', 'subscription_required', 'invalid_settings_schema', 'reserved_settings_key'] },
    },
    handler: async (request, reply) => {
      const created = await createApplication(ctxOf(deps, request), request.body);
      reply.code(201);
      return created;
    },
  });
  app.get('/v1/applications/:id', {
    schema: { summary: 'Fetch an Application', tags, params: AppIdParam, response: { 200: Application } },
    config: { meta: { auth: 'any', errors: ['application_not_found'] } },
    handler: (request) => getApplication(ctxOf(deps, request), request.params.id),
  });
  app.patch('/v1/applications/:id', {
    schema: { summary: 'Update an Application', tags, params: AppIdParam, body: PatchApplicationBody, response: { 200: Application } },
    config: {
      meta: {
        auth: 'any',
        idempotency: 'optional',
        // Removing a name deletes its unassigned Role: a role deletion (Part A convention 11). Whether one
        // goes depends on the stored row, so the service refuses a restricted key, after the refusals
        // that hold for every caller (409 app_role_in_use).
        destructive: {
          when: 'available_app_roles drops a name whose unassigned Role is deleted with it',
          test: (request) => Array.isArray((request.body as { available_app_roles?: unknown } | undefined)?.available_app_roles),
        },
        destructiveGate: 'service',
        errors: ['application_not_found', 'forbidden', 'moderation_field_forbidden', 'read_only_field', 'review_notes_required', 'invalid_review_transition',
          'app_role_in_use', 'permission_in_use', 'ownership_change_requires_migration', 'plan_limit_reached', 'subscription_required', 'invalid_settings_schema', 'reserved_settings_key'],
      },
    },
    handler: (request) => patchApplication(ctxOf(deps, request), request.params.id, request.body as any),
  });
}
