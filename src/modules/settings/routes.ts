import type { App } from '../types.js';
import type { Deps } from '../../context.js';
import { ctxOf } from '../../http/gate.js';
import { UserIdParam } from '../../http/schemas.js';
import { UserAppParams } from '../roles/schemas.js';
import { AppSettings, PatchAppSettingsBody, PatchSettingsBody, Settings } from './schemas.js';
import { getAppSettings, getSettings, patchAppSettings, patchSettings } from './service.js';

const tags = ['Settings'];

// Part A: "Settings endpoints (global Settings and per-application AppSettings reads and writes): not
// shown". These are the project's (docs/decisions.md "Settings").
export function settingsRoutes(app: App, deps: Deps): void {
  app.get('/v1/users/:id/settings', {
    schema: { summary: "A user's global Settings (theme, timezone, locale, notifications)", tags, params: UserIdParam, response: { 200: Settings } },
    config: { meta: { auth: 'any', errors: ['user_not_found', 'forbidden'] } },
    handler: (request) => getSettings(ctxOf(deps, request), request.params.id),
  });
  app.patch('/v1/users/:id/settings', {
    schema: { summary: "Update a user's global Settings", tags, params: UserIdParam, body: PatchSettingsBody, response: { 200: Settings } },
    config: { meta: { auth: 'any', idempotency: 'optional', errors: ['user_not_found', 'forbidden', 'read_only_field'] } },
    handler: (request) => patchSettings(ctxOf(deps, request), request.params.id, request.body),
  });
  app.get('/v1/users/:id/apps/:appId/settings', {
    schema: { summary: "A user's AppSettings: their values for the Application's settings_schema", tags, params: UserAppParams, response: { 200: AppSettings } },
    config: { meta: { auth: 'any', errors: ['entitlement_required', 'application_not_found', 'user_not_found', 'forbidden'] } },
    handler: (request) => getAppSettings(ctxOf(deps, request), request.params.id, request.params.appId),
  });
  app.patch('/v1/users/:id/apps/:appId/settings', {
    schema: { summary: "Update a user's AppSettings", tags, params: UserAppParams, body: PatchAppSettingsBody, response: { 200: AppSettings } },
    config: { meta: { auth: 'any', idempotency: 'optional', errors: ['entitlement_required', 'application_not_found', 'user_not_found', 'forbidden', 'read_only_field'] } },
    handler: (request) => patchAppSettings(ctxOf(deps, request), request.params.id, request.params.appId, request.body),
  });
}
