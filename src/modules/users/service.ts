import type { Ctx } from '../../context.js';
import { hasPermission, inTx } from '../../context.js';
import type { Tx } from '../../db/types.js';
import { ApiError } from '../../errors.js';
import { newId } from '../../ids.js';
import { recordAudit } from '../../audit/record.js';
import { assignRole, findLiveUserByEmail, findUserById, insertPasswordIdentity, insertUser, toUser, type UserRow } from './store.js';
import type { User, UserStatus } from './schemas.js';

export const MEMBER_ROLE_ID = 'role_platform_member';
export const SUPERADMIN_ROLE_ID = 'role_platform_superadmin';

/** `me` addresses the calling user (Part A convention 8); an API key has no "me". */
export function resolveUserId(ctx: Ctx, id: string): string {
  if (id !== 'me') return id;
  if (ctx.actor.type !== 'user') throw new ApiError('user_token_required');
  return ctx.actor.userId;
}

export interface CreateUserInput {
  email: string;
  status: UserStatus;
  emailVerified: boolean;
  displayName?: string | null;
  signupApplicationId?: string | null;
  passwordHash?: string | null;
  extraRoleIds?: string[];
  /** Signup: the new user is the actor of its own creation. */
  selfService?: boolean;
}

/**
 * Creates a User with its default Profile, Settings and the platform member Role (plus any extra
 * Roles), audited as user.created, all in the caller's transaction.
 */
export async function createUserRecords(tx: Tx, ctx: Ctx, input: CreateUserInput): Promise<UserRow> {
  const c = inTx(ctx, tx);
  if (await findLiveUserByEmail(tx, input.email)) throw new ApiError('email_taken');
  const id = newId('usr');
  await insertUser(tx, {
    id,
    email: input.email,
    emailVerified: input.emailVerified,
    status: input.status,
    signupApplicationId: input.signupApplicationId ?? null,
    testMode: ctx.mode === 'test',
    displayName: input.displayName ?? input.email.split('@')[0].slice(0, 100),
    now: ctx.now,
  });
  if (input.passwordHash) await insertPasswordIdentity(tx, newId('idn'), id, input.passwordHash, ctx.now);
  const by = c.actor.type === 'user' ? { byType: 'user', byId: c.actor.userId } : c.actor.type === 'api_key' ? { byType: 'api_key', byId: c.actor.keyId } : { byType: 'system', byId: null };
  for (const roleId of [MEMBER_ROLE_ID, ...(input.extraRoleIds ?? [])]) {
    await assignRole(tx, { userId: id, roleId, applicationId: null, now: ctx.now, ...by });
  }
  const row = (await findUserById(tx, id))!;
  await recordAudit(tx, c, {
    action: 'user.created',
    target: { type: 'user', id },
    targetUserId: id,
    after: toUser(row),
    actor: input.selfService ? { type: 'user', id } : undefined,
  });
  return row;
}

/** GET /v1/users/{id}: self, or users.list; soft-deleted users only for users.manage. */
export async function getUser(ctx: Ctx, idParam: string): Promise<User> {
  const id = resolveUserId(ctx, idParam);
  const self = ctx.actor.type === 'user' && ctx.actor.userId === id;
  // App-confined users.list (an app-scoped key) reaches only users with an access path to its
  // Application; that check arrives with the access resolver, until then such keys see no one.
  const platformReader = hasPermission(ctx.actor, 'users.list') && !(ctx.actor.type === 'api_key' && ctx.actor.scope !== 'platform');
  if (!self && !platformReader) throw new ApiError('user_not_found');
  const row = await findUserById(ctx.db, id);
  if (!row) throw new ApiError('user_not_found');
  if (row.status === 'deleted' && !hasPermission(ctx.actor, 'users.manage')) throw new ApiError('user_not_found');
  return toUser(row);
}
