import type { App } from '../types.js';
import type { Deps } from '../../context.js';
import { ctxOf } from '../../http/gate.js';
import { UserIdParam } from '../../http/schemas.js';
import { PatchProfileBody, Profile } from './schemas.js';
import { getProfile, patchProfile } from './service.js';

const tags = ['Profiles'];

export function profileRoutes(app: App, deps: Deps): void {
  app.get('/v1/users/:id/profile', {
    schema: { summary: "Fetch a user's global Profile", tags, params: UserIdParam, response: { 200: Profile } },
    config: { meta: { auth: 'any', errors: ['user_not_found'] } },
    handler: (request) => getProfile(ctxOf(deps, request), request.params.id),
  });
  app.patch('/v1/users/:id/profile', {
    schema: { summary: "Update a user's global Profile", tags, params: UserIdParam, body: PatchProfileBody, response: { 200: Profile } },
    config: { meta: { auth: 'any', idempotency: 'optional', errors: ['user_not_found', 'forbidden', 'read_only_field'] } },
    handler: (request) => patchProfile(ctxOf(deps, request), request.params.id, request.body),
  });
}
