import type { Ctx } from '../../context.js';
import { hasPermission, inTx } from '../../context.js';
import type { Tx } from '../../db/types.js';
import { ApiError, invalidField } from '../../errors.js';
import { newId } from '../../ids.js';
import { recordAudit } from '../../audit/record.js';
import { keyset, toPage } from '../../http/pagination.js';
import { assignRole, findLiveUserByEmail, findUserById, insertPasswordIdentity, insertUser, toUser, type UserRow } from './store.js';
import { applicationExists, findAppUsers, listUserRows, userListConditions } from './list-store.js';
import type { CreateUserBody, User, UserListQuery, UserStatus } from './schemas.js';
import { confinedApp, lockAccount, targetUser } from './access.js';
import { sendInvitation, takeResendQuota } from './invitations.js';
import { retryAfterSeconds } from '../../http/counters.js';

export const MEMBER_ROLE_ID = 'role_platform_member';
export const SUPERADMIN_ROLE_ID = 'role_platform_superadmin';

/** `me` addresses the calling user (Part A convention 8); an API key has no "me". */
export function resolveUserId(ctx: Ctx, id: string): string {
  if (id !== 'me') return id;
  if (ctx.actor.type !== 'user') throw new ApiError('user_token_required');
  return ctx.actor.userId;
}

export const actorRef = (ctx: Ctx) =>
  ctx.actor.type === 'user'
    ? { byType: 'user', byId: ctx.actor.userId }
    : ctx.actor.type === 'api_key'
      ? { byType: 'api_key', byId: ctx.actor.keyId }
      : { byType: 'system', byId: null };

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
 * Roles), audited as user.created, all in the caller's transaction; 409 email_taken when a live
 * user holds the address.
 */
export async function createUserRecords(tx: Tx, ctx: Ctx, input: CreateUserInput): Promise<UserRow> {
  const taken = (holder: UserRow | null) =>
    new ApiError('email_taken', holder?.status === 'invited' ? { details: { reason: 'invitation_pending' } } : {});
  const holder = await findLiveUserByEmail(tx, input.email);
  if (holder) throw taken(holder);
  // A concurrent creation of the same address: the insert waits for it on users_email_live_key and
  // inserts nothing; its User, read now, answers as above (an invited one with invitation_pending).
  const created = await insertUserRecords(tx, ctx, input, true);
  if (!created) throw taken(await findLiveUserByEmail(tx, input.email));
  return created;
}

/**
 * The live User holding `email`, else a new `invited` one (an Organization's invitation by email,
 * where email_taken is no answer). Two transactions inviting one new address at once (two
 * Organizations) both get the one User: the second waits on the unique index, then reads it.
 */
export async function findOrCreateInvitedUser(tx: Tx, ctx: Ctx, email: string): Promise<UserRow> {
  const input: CreateUserInput = { email, status: 'invited', emailVerified: false };
  // Retried only if the holder that blocked the insert is deleted before it is read.
  for (let attempt = 0; attempt < 3; attempt++) {
    // Held: a user deleted meanwhile is not invited (their address invites a new User).
    const holder = await findLiveUserByEmail(tx, email, { share: true });
    if (holder) return holder;
    const created = await insertUserRecords(tx, ctx, input, true);
    if (created) return created;
  }
  return createUserRecords(tx, ctx, input);
}

/** createUserRecords without the holder check; null when `unlessEmailTaken` and a live user holds the email. */
async function insertUserRecords(tx: Tx, ctx: Ctx, input: CreateUserInput, unlessEmailTaken: boolean): Promise<UserRow | null> {
  const c = inTx(ctx, tx);
  const id = newId('usr');
  const inserted = await insertUser(tx, {
    id,
    email: input.email,
    emailVerified: input.emailVerified,
    status: input.status,
    signupApplicationId: input.signupApplicationId ?? null,
    testMode: ctx.mode === 'test',
    displayName: input.displayName ?? input.email.split('@')[0].slice(0, 100),
    now: ctx.now,
  }, unlessEmailTaken);
  if (!inserted) return null;
  if (input.passwordHash) await insertPasswordIdentity(tx, newId('idn'), id, input.passwordHash, ctx.now);
  for (const roleId of [MEMBER_ROLE_ID, ...(input.extraRoleIds ?? [])]) {
    await assignRole(tx, { userId: id, roleId, applicationId: null, now: ctx.now, ...actorRef(c) });
  }
  const row = (await findUserById(tx, id))!;
  await recordAudit(tx, c, {
    action: 'user.created',
    target: { type: 'user', id },
    targetUserId: id,
    after: toUser(row, ctx.now),
    actor: input.selfService ? { type: 'user', id } : undefined,
  });
  return row;
}

/** GET /v1/users/{id}. */
export async function getUser(ctx: Ctx, idParam: string): Promise<User> {
  return toUser((await targetUser(ctx, idParam, 'read')).user, ctx.now);
}

/** GET /v1/users: list and search, newest first. */
export async function listUsers(ctx: Ctx, q: UserListQuery) {
  const manage = hasPermission(ctx.actor, 'users.manage') && !confinedApp(ctx);
  if (!hasPermission(ctx.actor, 'users.list') && !manage) throw new ApiError('forbidden', { details: { required_permission: 'users.list' } });
  if (q.status === 'deleted' && !manage) throw new ApiError('forbidden', { message: 'Only users.manage may list deleted users.' });
  // An app-scoped key always gets exactly its own Application's result; another filter must name one.
  if (q.application_id && !confinedApp(ctx) && !(await applicationExists(ctx.db, q.application_id))) {
    throw invalidField('query.application_id', 'is not a known application');
  }
  // q: an email or display_name starting with it (listUserRows).
  const app = confinedApp(ctx) ?? q.application_id;
  const appUsers = app ? await findAppUsers(ctx.db, app) : null;
  const conditions = userListConditions({ ...q, includeDeleted: !!(manage && q.include_inactive), app, appUsers });
  const ks = keyset(q, conditions.params.length + 1, 'u');
  const rows = await listUserRows(ctx.db, conditions, ks);
  return toPage(rows, ks.limit, (row) => toUser(row, ctx.now));
}

/** POST /v1/users: invited (with an invitation mail unless send_invitation is false) or active without a password. */
export async function createUser(ctx: Ctx, input: CreateUserBody): Promise<User> {
  return ctx.db.transaction(async (tx) => {
    const status = input.status ?? 'invited';
    const user = await createUserRecords(tx, ctx, { email: input.email, status, emailVerified: false, displayName: input.display_name ?? null });
    // The first invitation is no re-send: it does not count toward the re-send limit.
    if (status === 'invited' && input.send_invitation !== false) await sendInvitation(tx, ctx, user);
    return toUser(user, ctx.now);
  });
}

/** POST /v1/users/{id}/invitation: a new invitation token and mail; 409 unless the user is invited. */
export async function resendInvitation(ctx: Ctx, idParam: string): Promise<void> {
  const { user: found, rightMayMove } = await targetUser(ctx, idParam, 'write', { allowSelf: false });
  await ctx.db.transaction(async (tx) => {
    // Decided on the user as it is now, locked before its links as a status or email change locks them:
    // one no longer invited gets no link, and one whose email an admin changed meanwhile gets it at the
    // new address (a live link to the old one would open the account at its new address).
    const user = await lockAccount(tx, ctx, found.id, rightMayMove);
    if (user.status !== 'invited') throw new ApiError('invalid_status_transition', { details: { from: user.status, to: 'invited' } });
    const quota = await takeResendQuota(tx, ctx, user.email);
    if (!quota.allowed) {
      throw new ApiError('rate_limited', {
        message: 'At most 3 invitation re-sends per address per hour.',
        headers: { 'retry-after': String(retryAfterSeconds(quota.retryAt!, ctx.now)) },
      });
    }
    await sendInvitation(tx, ctx, user);
  });
}
