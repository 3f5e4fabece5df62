import type { App } from '../types.js';
import type { Deps } from '../../context.js';
import { ctxOf } from '../../http/gate.js';
import { UserIdParam } from '../../http/schemas.js';
import { User } from './schemas.js';
import { getUser } from './service.js';

export function userRoutes(app: App, deps: Deps): void {
  app.get('/v1/users/:id', {
    schema: {
      summary: 'Fetch a user',
      description: 'Self, users.list or app-confined users.list; soft-deleted users only for users.manage.',
      tags: ['Users'],
      params: UserIdParam,
      response: { 200: User },
    },
    config: { meta: { auth: 'any' } },
    handler: (request) => getUser(ctxOf(deps, request), request.params.id),
  });
}
