import type { Ctx } from '../../context.js';
import { hasPermission, inTx } from '../../context.js';
import { ApiError } from '../../errors.js';
import { findUserById, holdUser, lockUser, type UserRow } from './store.js';
import { resolveUserId, SUPERADMIN_ROLE_ID } from './service.js';
import type { Queryable, Tx } from '../../db/types.js';
import { accountRights, findAccessPath, holdPlatformRolesOf, holdsRole } from './access-store.js';

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
 * to users.manage. rightMayMove: a write about another user whose caller's right to it must be read
 * again under the user's lock (holdAccountRight).
 */
export async function targetUser(
  ctx: Ctx,
  idParam: string,
  need: Need,
  opts: { allowSelf?: boolean; readers?: string[]; ownKeyApp?: string; readOnly?: boolean } = {},
): Promise<{ user: UserRow; self: boolean; rightMayMove: boolean }> {
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
  const rightMayMove = need === 'write' && !self && !opts.readOnly && (await assertMayChangeAccount(ctx, id));
  return { user, self, rightMayMove };
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

/**
 * lockTargetUser for a write to the user's account, the caller's right read again under the lock
 * (holdAccountRight) when it may have moved.
 */
export async function lockAccount(tx: Tx, ctx: Ctx, id: string, rightMayMove: boolean): Promise<UserRow> {
  const user = await lockTargetUser(tx, id);
  await holdAccountRight(tx, ctx, id, rightMayMove);
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
 * Returns whether the right may move before the write commits (the caller is no superadmin, and the
 * user may be given a Role meanwhile): holdAccountRight reads it again then.
 */
export async function assertMayChangeAccount(ctx: Ctx, userId: string): Promise<boolean> {
  const callerId = ctx.actor.type === 'user' ? ctx.actor.userId : null;
  const rights = await accountRights(ctx.db, userId, callerId, SUPERADMIN_ROLE_ID);
  // A superadmin's right holds whatever the user is given meanwhile: no need to read it again.
  if (rights.caller_super) return false;
  if (rights.target_super) {
    throw new ApiError('forbidden', { message: "Only a superadmin may change another superadmin's account.", details: { required_role: 'superadmin' } });
  }
  const missing = rights.permissions.filter((p) => !hasPermission(ctx.actor, p));
  if (missing.length === 0) return true;
  throw new ApiError('forbidden', { message: "Only a caller holding every platform permission of this user may change their account.", details: { required_permissions: missing } });
}

/**
 * The caller's right to change the user's account, read again in the write's transaction (first, or
 * right after the user's own lock) when it may have moved (`rightMayMove`, from targetUser or
 * assertMayChangeAccount): holding the user FOR KEY SHARE, which a platform Role's assignment (the
 * user FOR UPDATE) waits for, and their platform Roles FOR SHARE, which a PATCH of a Role's permissions
 * (FOR NO KEY UPDATE) waits for: an assignment or a Role change that committed while the write waited
 * is seen, and the answer is the one the caller would have got had it committed first (403 forbidden,
 * nothing written).
 * Self-service and superadmin callers read nothing.
 */
export async function holdAccountRight(tx: Tx, ctx: Ctx, userId: string, rightMayMove: boolean): Promise<void> {
  if (!rightMayMove) return;
  await holdUser(tx, userId);
  await holdPlatformRolesOf(tx, userId);
  await assertMayChangeAccount(inTx(ctx, tx), userId);
}
