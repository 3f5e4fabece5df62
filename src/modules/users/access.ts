import type { Ctx } from '../../context.js';
import { hasPermission } from '../../context.js';
import { ApiError } from '../../errors.js';
import { findUserById, lockUser, type UserRow } from './store.js';
import { resolveUserId, SUPERADMIN_ROLE_ID } from './service.js';
import type { Queryable } from '../../db/types.js';
import { findAccessPath, holdsRole, platformPermissionsOf } from './access-store.js';

/** App-confined: an app-scoped key acts only on its own Application (Part A Authentication 4). */
export const confinedApp = (ctx: Ctx): string | null =>
  ctx.actor.type === 'api_key' && ctx.actor.scope !== 'platform' ? ctx.actor.scope : null;

export async function hasAccessPath(ctx: Ctx, userId: string, applicationId: string): Promise<boolean> {
  return findAccessPath(ctx.db, userId, applicationId);
}

/**
 * read: self, users.list or users.manage. write: self or users.manage (sessions, export and erasure
 * too); a caller who can read the user but not act on it gets 403 forbidden, anyone else 404.
 */
export type Need = 'read' | 'write';

/**
 * Resolves {id} for a user-targeted operation and checks the caller: self, users.manage, or (for
 * reads) users.list — platform-wide, or app-confined to users with an access path to the key's
 * Application. Anyone else learns nothing: 404 user_not_found. Soft-deleted users are visible only
 * to users.manage.
 */
export async function targetUser(
  ctx: Ctx,
  idParam: string,
  need: Need,
  opts: { allowSelf?: boolean; readers?: string[]; ownKeyApp?: string; readOnly?: boolean } = {},
): Promise<{ user: UserRow; self: boolean }> {
  const id = resolveUserId(ctx, idParam);
  const self = ctx.actor.type === 'user' && ctx.actor.userId === id;
  const manage = hasPermission(ctx.actor, 'users.manage') && !confinedApp(ctx);
  // Permissions that let this operation read any user (users.list unless the operation says more),
  // and an Application whose own key may read users with an access path to it.
  const app = confinedApp(ctx);
  const list = (opts.readers ?? ['users.list']).some((p) => hasPermission(ctx.actor, p)) || (!!app && app === opts.ownKeyApp);
  const canRead = self || manage || list;
  if (!canRead) throw new ApiError('user_not_found');
  // A read of oneself uses the row loaded with the session; everything else reads it now.
  const snapshot = self && need === 'read' && ctx.actor.type === 'user' ? ctx.actor.user : undefined;
  const user = snapshot ?? (await findUserById(ctx.db, id));
  if (!user || user.erased_at) throw new ApiError('user_not_found');
  if (user.status === 'deleted' && !manage) throw new ApiError('user_not_found');
  if (!self && !manage && app && !(await hasAccessPath(ctx, id, app))) throw new ApiError('user_not_found');
  // Callers who may see the user but not change it learn that much: 403, not 404.
  if (need === 'write' && !manage && !(self && opts.allowSelf !== false)) {
    throw new ApiError('forbidden', { details: { required_permission: 'users.manage' } });
  }
  // readOnly: a read that needs users.manage (Settings, the sessions list) changes nothing about a superadmin.
  if (need === 'write' && !self && !opts.readOnly) await assertMayChangeAccount(ctx, id);
  return { user, self };
}

/**
 * The user targetUser found, locked (lockUser) for the write: an erasure cascade that committed while
 * the write waited left a tombstone, 404 user_not_found to everyone as targetUser answers after it
 * (a write to it would schedule a second erasure, or put a new address on the tombstone and mail it).
 */
export async function lockTargetUser(tx: Queryable, id: string): Promise<UserRow> {
  const user = await lockUser(tx, id);
  if (!user || user.erased_at) throw new ApiError('user_not_found');
  return user;
}

/** Whether the user holds the seed superadmin Role. */
export async function holdsSuperadmin(db: Queryable, userId: string): Promise<boolean> {
  return holdsRole(db, userId, SUPERADMIN_ROLE_ID);
}

/**
 * Another user's account (status, email, Profile, Settings, sessions, MFA, export, erasure) is changed
 * only by a caller holding every platform permission of theirs: whoever changes the email and resets
 * the TOTP takes the account over, every permission with it, and Part B assigns a platform Role only
 * to a caller holding every permission it grants. A superadmin's needs a superadmin (superadmin is
 * assigned only by one; API keys are none); anyone else gets 403 forbidden naming what is missing.
 */
export async function assertMayChangeAccount(ctx: Ctx, userId: string): Promise<void> {
  if (await holdsSuperadmin(ctx.db, userId)) {
    if (ctx.actor.type === 'user' && (await holdsSuperadmin(ctx.db, ctx.actor.userId))) return;
    throw new ApiError('forbidden', { message: "Only a superadmin may change another superadmin's account.", details: { required_role: 'superadmin' } });
  }
  const missing = (await platformPermissionsOf(ctx.db, userId)).filter((p) => !hasPermission(ctx.actor, p));
  if (missing.length === 0) return;
  throw new ApiError('forbidden', { message: "Only a caller holding every platform permission of this user may change their account.", details: { required_permissions: missing } });
}
