import type { App } from '../types.js';
import type { Deps } from '../../context.js';
import { ctxOf } from '../../http/gate.js';
import { modeOf } from '../../db/types.js';
import { AuthSession, LoginBody } from './schemas.js';
import { login } from './service.js';

export function authRoutes(app: App, deps: Deps): void {
  app.post('/v1/auth/login', {
    schema: {
      summary: 'Sign in with email and password',
      tags: ['Auth'],
      body: LoginBody,
      response: { 200: AuthSession },
    },
    config: { meta: { auth: 'none', throttle: 'auth' } },
    handler: (request) => login(ctxOf(deps, request, modeOf(request.body.test_mode === true)), request.body),
  });
}
