import { Type } from '@sinclair/typebox';
import type { App } from '../types.js';
import type { Deps } from '../../context.js';
import { ctxOf } from '../../http/gate.js';
import { EmptyBody, UserIdParam } from '../../http/schemas.js';
import { ConfirmBody, DisableBody, RecoveryCodes, TotpEnrollment } from './schemas.js';
import { beginTotp, confirmTotp, disableTotp, resetTotp } from './service.js';

export function mfaRoutes(app: App, deps: Deps): void {
  app.post('/v1/users/:id/mfa/totp', {
    schema: { summary: 'Begin TOTP enrollment', tags: ['MFA'], params: UserIdParam, body: EmptyBody, response: { 200: TotpEnrollment } },
    config: { meta: { auth: 'user', errors: ['mfa_already_enabled', 'password_identity_required', 'user_not_found', 'forbidden'] } },
    handler: (request) => beginTotp(ctxOf(deps, request), request.params.id),
  });
  app.post('/v1/users/:id/mfa/totp/confirm', {
    schema: { summary: 'Confirm TOTP with the first code; returns recovery codes', tags: ['MFA'], params: UserIdParam, body: ConfirmBody, response: { 200: RecoveryCodes } },
    config: { meta: { auth: 'user', errors: ['invalid_mfa_code', 'mfa_already_enabled', 'mfa_not_enabled', 'user_not_found', 'forbidden', 'service_unavailable'] } },
    handler: (request) => confirmTotp(ctxOf(deps, request), request.params.id, request.body),
  });
  app.post('/v1/users/:id/mfa/totp/disable', {
    schema: { summary: 'Turn TOTP off with a current code or a recovery code', tags: ['MFA'], params: UserIdParam, body: DisableBody, response: { 204: Type.Null() } },
    config: { meta: { auth: 'user', errors: ['invalid_mfa_code', 'too_many_attempts', 'mfa_not_enabled', 'user_not_found', 'forbidden'] } },
    handler: async (request, reply) => {
      await disableTotp(ctxOf(deps, request), request.params.id, request.body);
      reply.code(204);
      return null;
    },
  });
  app.delete('/v1/users/:id/mfa/totp', {
    schema: { summary: 'Support reset of TOTP', tags: ['MFA'], params: UserIdParam, response: { 204: Type.Null() } },
    config: { meta: { auth: 'any', permission: 'users.manage', destructive: 'always', errors: ['user_not_found', 'forbidden'] } },
    handler: async (request, reply) => {
      await resetTotp(ctxOf(deps, request), request.params.id);
      reply.code(204);
      return null;
    },
  });
}
