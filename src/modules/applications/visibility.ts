import type { Ctx } from '../../context.js';
import { hasPermission } from '../../context.js';
import type { Viewer } from './visibility-store.js';

// The visibility SQL lives in visibility-store.ts; re-exported here, where other modules import it from.
export { accessPathToApp, ownerCondition, visibleCondition, type Viewer } from './visibility-store.js';

export function viewerOf(ctx: Ctx): Viewer {
  const keyApp = ctx.actor.type === 'api_key' && ctx.actor.scope !== 'platform' ? ctx.actor.scope : null;
  return {
    admin: hasPermission(ctx.actor, 'applications.manage') && !keyApp,
    userId: ctx.actor.type === 'user' ? ctx.actor.userId : null,
    keyApp,
  };
}
