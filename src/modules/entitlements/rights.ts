import type { Ctx } from '../../context.js';
import { hasPermission } from '../../context.js';
import { ApiError } from '../../errors.js';
import type { ApplicationRow } from '../applications/store.js';
import { isOwner } from '../applications/service.js';

export interface Rights {
  /** Platform entitlements.manage (not app-confined). */
  platform: boolean;
  /** The Application's own key holding entitlements.manage. */
  appKey: boolean;
  owner: boolean;
}

export async function rightsOver(ctx: Ctx, app: ApplicationRow): Promise<Rights> {
  const confined = ctx.actor.type === 'api_key' && ctx.actor.scope !== 'platform' ? ctx.actor.scope : null;
  const manage = hasPermission(ctx.actor, 'entitlements.manage');
  return {
    platform: manage && !confined,
    appKey: manage && confined === app.id,
    owner: await isOwner(ctx, app),
  };
}

/** Who may grant (Part B): public and invite_only — platform, own key, owner; internal — platform only. */
export function assertMayGrant(rights: Rights, app: ApplicationRow): void {
  if (rights.platform) return;
  if (app.visibility === 'internal') throw new ApiError('forbidden', { message: 'Grants to an internal Application need platform entitlements.manage.' });
  if (!rights.appKey && !rights.owner) throw new ApiError('forbidden', { details: { required_permission: 'entitlements.manage' } });
}

/** The Application an app-confined caller is limited to (its key's scope), or null. */
export const confinedApp = (ctx: Ctx): string | null => (ctx.actor.type === 'api_key' && ctx.actor.scope !== 'platform' ? ctx.actor.scope : null);
