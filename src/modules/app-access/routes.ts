import type { App } from '../types.js';
import type { Deps } from '../../context.js';
import { ctxOf } from '../../http/gate.js';
import { UserAppParams } from '../roles/schemas.js';
import { AppProfile, AppToken, AppTokenBody, PatchAppProfileBody } from './schemas.js';
import { issueAppToken } from './app-tokens.js';
import { getAppProfile, patchAppProfile } from './app-profiles.js';

export function appAccessRoutes(app: App, deps: Deps): void {
  app.post('/v1/auth/app-tokens', {
    schema: { summary: 'A short-lived token for one Application', tags: ['Auth'], body: AppTokenBody, response: { 200: AppToken } },
    config: { meta: { auth: 'user', session: 'fused', errors: ['entitlement_required', 'application_not_available', 'tenant_suspended', 'application_not_found'] } },
    handler: (request) => issueAppToken(ctxOf(deps, request), request.body),
  });
  app.get('/v1/users/:id/apps/:appId/profile', {
    schema: { summary: "A user's AppProfile", tags: ['Profiles'], params: UserAppParams, response: { 200: AppProfile } },
    config: { meta: { auth: 'any', errors: ['entitlement_required', 'application_not_found', 'user_not_found', 'forbidden'] } },
    handler: (request) => getAppProfile(ctxOf(deps, request), request.params.id, request.params.appId),
  });
  app.patch('/v1/users/:id/apps/:appId/profile', {
    schema: { summary: "Update a user's AppProfile", tags: ['Profiles'], params: UserAppParams, body: PatchAppProfileBody, response: { 200: AppProfile } },
    config: { meta: { auth: 'any', idempotency: 'optional', errors: ['entitlement_required', 'application_not_found', 'user_not_found', 'forbidden', 'read_only_field'] } },
    handler: (request) => patchAppProfile(ctxOf(deps, request), request.params.id, request.params.appId, request.body),
  });
}
