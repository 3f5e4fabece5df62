import type { Ctx, Deps } from '../../context.js';
import { inTx } from '../../context.js';
import type { Tx } from '../../db/types.js';
import { assertNoReadOnlyFields } from '../../http/patch.js';
import { ApiError } from '../../errors.js';
import { recordAudit } from '../../audit/record.js';
import { emit } from '../../outbox/emit.js';
import { withAccessFlips, type AccessReason } from '../../access/flips.js';
import { issueOneTimeToken, voidAccountLinks, voidAddressTokens, voidEmailChangeTokens, voidInvitations, voidMfaChallenges } from '../../auth/one-time-tokens.js';
import { enqueueMail } from '../../mail/outbox.js';
import { unauthenticated } from '../../auth/credentials.js';
import { revokeSessions } from '../sessions/store.js';
import { findLiveUserByEmail, findUserById, lockUser, setEmailUnlessTaken, toUser, type UserRow } from './store.js';
import { lockAccount, targetUser } from './access.js';
import {
  clearExpiredPendingEmails, clearPendingEmail, findErasureStatus, setDeletedUserEmail, setPendingEmail, updateUserEmail, updateUserStatus,
} from './status-store.js';
import { RESEND_LIMIT_PER_HOUR, sendInvitation, sendVerification, takeResendQuota } from './invitations.js';
import { retryAfterSeconds, takeSlidingQuota } from '../../http/counters.js';
import { USER_READ_ONLY, type PatchUserBody, type User, type UserStatus } from './schemas.js';

const invalidTransition = (from: UserStatus, to: string) => new ApiError('invalid_status_transition', { details: { from, to } });
/** 409 email_taken; details.reason invitation_pending when the holder is an invited user (Part A Errors). */
export const emailTaken = (holder: Pick<UserRow, 'status'>, message?: string) =>
  new ApiError('email_taken', { ...(message ? { message } : {}), ...(holder.status === 'invited' ? { details: { reason: 'invitation_pending' } } : {}) });

/**
 * Gives live user `userId` the address `email` by `update` (its UPDATE): 409 email_taken when another
 * live user holds it, found by the check or, committed after it, by the UPDATE's conflict.
 */
export async function assignEmail(tx: Tx, userId: string, email: string, update: () => Promise<unknown>): Promise<void> {
  const holder = await findLiveUserByEmail(tx, email);
  if (holder && holder.id !== userId) throw emailTaken(holder);
  const taken = await setEmailUnlessTaken(tx, email, update);
  if (taken) throw emailTaken(taken);
}

async function reload(tx: Tx, id: string): Promise<UserRow> {
  return (await findUserById(tx, id))!;
}

/**
 * Moves a user to `to` with the status table's side effects, in the caller's transaction: sessions
 * revoked on suspend and delete, access flips, the audit action and the user.* webhook event.
 * `opts.before` is the audit row's before when the request changed the row already (a restore with a
 * new email): the user as found.
 */
async function transition(
  tx: Tx, ctx: Ctx, user: UserRow, to: UserStatus, action: string, reason: AccessReason | null, webhook: string | null,
  opts: { note?: string; before?: UserRow } = {},
): Promise<UserRow> {
  const c = inTx(ctx, tx);
  const ending = to === 'suspended' || to === 'deleted';
  const change = async () => {
    // A pending email change ends with its link (below).
    await updateUserStatus(tx, user.id, to, ctx.now, ending);
    // An invitation ends with the invited status (deleted, or set active without a password): its
    // links open nothing any more, and an unsent invitation mail is not delivered.
    if (user.status === 'invited') await voidInvitations(tx, user.id, ctx.now);
    if (ending) {
      await revokeSessions(tx, { userId: user.id }, ctx.now);
      // Reset and email change links issued before end with the sessions: they work neither while the
      // user is suspended or deleted nor after a reactivation or restore.
      await voidAccountLinks(tx, user.id, ctx.now);
    } else {
      // A sign-in whose password step came before the suspension or delete starts no session after it.
      await voidMfaChallenges(tx, user.id, ctx.now);
    }
  };
  if (reason) await withAccessFlips(tx, c, { userIds: [user.id] }, reason, change);
  else await change();
  const after = await reload(tx, user.id);
  const { note, before = user } = opts;
  await recordAudit(tx, c, { action, target: { type: 'user', id: user.id }, targetUserId: user.id, before: toUser(before, ctx.now), after: { ...toUser(after, ctx.now), ...(note ? { reason: note } : {}) } });
  if (webhook) await emit(tx, c, { type: webhook, data: { user_id: user.id } });
  return after;
}

/** Suspends an active user; the optional reason is kept in the user.suspended audit row. */
export async function suspendUserRow(tx: Tx, ctx: Ctx, user: UserRow, reason?: string): Promise<UserRow> {
  if (user.status === 'suspended') return user; // 200 with no change and no events
  if (user.status !== 'active') throw invalidTransition(user.status, 'suspended');
  return transition(tx, ctx, user, 'suspended', 'user.suspended', 'user_suspended', 'user.suspended', { note: reason });
}

/** POST /v1/users/{id}/suspend (users.manage), body optional reason. */
export async function suspendUser(ctx: Ctx, idParam: string, reason?: string): Promise<User> {
  const { user, self, rightMayMove } = await targetUser(ctx, idParam, 'write', { allowSelf: false });
  if (self) throw new ApiError('status_change_forbidden');
  return toUser(await ctx.db.transaction(async (tx) => suspendUserRow(tx, ctx, await lockAccount(tx, ctx, user.id, rightMayMove), reason)), ctx.now);
}

/** Soft delete: shared by DELETE /v1/users/{id} and erasure requests. */
export async function softDeleteUserRow(tx: Tx, ctx: Ctx, user: UserRow): Promise<UserRow> {
  if (user.status === 'deleted') return user;
  return transition(tx, ctx, user, 'deleted', 'user.deleted', 'user_deleted', 'user.deleted');
}

/** DELETE /v1/users/{id}: self or users.manage. */
export async function deleteUser(ctx: Ctx, idParam: string): Promise<void> {
  const { user, rightMayMove } = await targetUser(ctx, idParam, 'write');
  await ctx.db.transaction(async (tx) => softDeleteUserRow(tx, ctx, await lockAccount(tx, ctx, user.id, rightMayMove)));
}

/**
 * PATCH /v1/users/{id}. Self sends only email (pending until verified, old address notified);
 * users.manage changes email at once (email_verified resets) and moves status per the table.
 */
export async function patchUser(ctx: Ctx, idParam: string, body: PatchUserBody): Promise<User> {
  const { user, self, rightMayMove } = await targetUser(ctx, idParam, 'write');
  // Nobody changes their own status, users.manage holders included: a superadmin who suspended
  // themselves would lose every session at once and could not undo it. Part A answers a self-service
  // `status` with 403 whatever else the body holds, so this comes before the read-only fields.
  if (self && body.status !== undefined) throw new ApiError('status_change_forbidden');
  assertNoReadOnlyFields(body, USER_READ_ONLY);
  // A change of one's own email goes through verification, users.manage holders included: a stolen
  // session must not move an account (and its password resets) to another mailbox at once.
  if (self) {
    return toUser(await ctx.db.transaction((tx) => requestEmailChange(tx, ctx, user, body.email!)), ctx.now);
  }
  return toUser(
    await ctx.db.transaction(async (tx) => {
      let current = await lockAccount(tx, ctx, user.id, rightMayMove);
      // PATCH status deleted or invited is rejected from any status, the current one included.
      if (body.status === 'deleted' || body.status === 'invited') throw invalidTransition(current.status, body.status);
      // The current email sent again (in any case) is no change, with a restore too: no mail, no audit.
      const newEmail = body.email !== undefined && body.email.toLowerCase() !== current.email.toLowerCase() ? body.email : undefined;
      if (body.status !== undefined && body.status !== current.status) current = await adminStatus(tx, ctx, current, body.status, newEmail);
      if (newEmail !== undefined && newEmail.toLowerCase() !== current.email.toLowerCase()) current = await adminEmail(tx, ctx, current, newEmail);
      return current;
    }),
    ctx.now,
  );
}

async function adminStatus(tx: Tx, ctx: Ctx, user: UserRow, to: UserStatus, newEmail: string | undefined): Promise<UserRow> {
  if (to === 'deleted' || to === 'invited') throw invalidTransition(user.status, to);
  if (to === 'suspended') return suspendUserRow(tx, ctx, user);
  // to active
  // An invited user may already hold grants (Part B allows them), so activation can flip access on.
  if (user.status === 'invited') return transition(tx, ctx, user, 'active', 'user.updated', 'user_reactivated', null);
  if (user.status === 'suspended') return transition(tx, ctx, user, 'active', 'user.reactivated', 'user_reactivated', 'user.reactivated');
  // deleted → active: restore
  const erasure = await findErasureStatus(tx, user.id);
  if (erasure === 'scheduled') throw new ApiError('erasure_scheduled');
  if (erasure === 'completed') throw new ApiError('user_not_found');
  let restored = user;
  const takenMeanwhile = newEmail === undefined ? 'The email was taken meanwhile; send a new email in the same request.' : undefined;
  if (newEmail !== undefined) {
    const holder = await findLiveUserByEmail(tx, newEmail);
    if (holder) throw emailTaken(holder);
    // The row is still deleted, outside users_email_live_key: the status change below is what can collide.
    await setDeletedUserEmail(tx, user.id, newEmail);
    await voidAddressTokens(tx, user.id, ctx.now);
    restored = await reload(tx, user.id);
  } else {
    const holder = await findLiveUserByEmail(tx, user.email);
    if (holder) throw emailTaken(holder, takenMeanwhile);
  }
  // Leaving deleted puts the address under users_email_live_key: a user a concurrent transaction gave it
  // after the check above answers as one found by it.
  let after!: UserRow;
  const taken = await setEmailUnlessTaken(tx, restored.email, async () => {
    after = await transition(tx, ctx, restored, 'active', 'user.reactivated', 'user_reactivated', 'user.reactivated', { before: user });
  });
  if (taken) throw emailTaken(taken, takenMeanwhile);
  // A new email sent with the restore is an admin email change: verification mail to the new address.
  if (newEmail !== undefined) {
    await sendVerification(tx, ctx, after);
    await recordAudit(tx, inTx(ctx, tx), { action: 'user.email_changed', target: { type: 'user', id: user.id }, targetUserId: user.id, before: { email: user.email }, after: { email: after.email } });
  }
  return after;
}

async function adminEmail(tx: Tx, ctx: Ctx, user: UserRow, email: string): Promise<UserRow> {
  await assignEmail(tx, user.id, email, () => updateUserEmail(tx, user.id, email, ctx.now));
  // Links mailed to the old address (a pending self-service change, verification, reset) die with it.
  await voidAddressTokens(tx, user.id, ctx.now);
  const after = await reload(tx, user.id);
  // A soft-deleted user's address is mailed nothing: its link would not work while the user is deleted.
  if (after.status !== 'deleted') await sendVerification(tx, ctx, after);
  // An invited user's way in went with the old address: the invitation goes to the new one.
  if (after.status === 'invited') await sendInvitation(tx, ctx, after);
  // An admin email change completes at once (Part A Events: email change completes → user.email_changed).
  await recordAudit(tx, inTx(ctx, tx), { action: 'user.email_changed', target: { type: 'user', id: user.id }, targetUserId: user.id, before: toUser(user, ctx.now), after: toUser(after, ctx.now) });
  return after;
}

async function requestEmailChange(tx: Tx, ctx: Ctx, found: UserRow, email: string): Promise<UserRow> {
  // Decided on the user as it is now, locked against an admin's email or status change meanwhile: the
  // notice goes to the address the account has, and a user suspended or deleted since the request was
  // authenticated (the session ended with it) starts no change whose link would outlive that.
  const user = await lockUser(tx, found.id);
  // Gone (the test purge) is as ended as suspended: the session went with the user.
  if (user?.status !== 'active') throw unauthenticated(true);
  if (email.toLowerCase() === user.email.toLowerCase()) {
    if (!user.pending_email) return user;
    // Back to the current address: the pending change is withdrawn and its link stops working.
    await voidEmailChangeTokens(tx, user.id, ctx.now);
    await clearPendingEmail(tx, user.id, ctx.now);
    return reload(tx, user.id);
  }
  const holder = await findLiveUserByEmail(tx, email);
  if (holder) throw emailTaken(holder);
  await takeEmailChangeQuota(tx, ctx, user.email, email);
  await setPendingEmail(tx, user.id, email, ctx.now);
  const token = await issueOneTimeToken(tx, ctx, { kind: 'email_change', userId: user.id, data: { email }, replacePrevious: true });
  await enqueueMail(tx, ctx, { template: 'email_change_verification', to: email, vars: { token }, userId: user.id });
  await enqueueMail(tx, ctx, { template: 'email_change_notice', to: user.email, vars: { newEmail: email }, userId: user.id });
  return reload(tx, user.id);
}

/**
 * A change request mails both addresses, each at most 3 times per rolling hour (Part A Limits): the
 * verification counts with the re-sends to the new address, the first included (a change can be
 * withdrawn and asked again at will), the notice in a count of its own for the current address.
 * Beyond either, 429 and nothing changes: no pending_email without a live link, no change unnoticed.
 */
async function takeEmailChangeQuota(tx: Tx, ctx: Ctx, current: string, email: string): Promise<void> {
  const verification = await takeResendQuota(tx, ctx, email);
  const notice = await takeSlidingQuota(tx, `mail:change-notice:${ctx.mode}:${current.toLowerCase()}`, RESEND_LIMIT_PER_HOUR, 3600, ctx.now);
  const retryAt = [verification.retryAt, notice.retryAt].filter((d): d is Date => d !== null);
  if (retryAt.length === 0) return;
  // The throw rolls back the transaction, the slot just taken of the other count included.
  throw new ApiError('rate_limited', {
    message: `At most ${RESEND_LIMIT_PER_HOUR} email change mails per address per hour.`,
    headers: { 'retry-after': String(retryAfterSeconds(new Date(Math.max(...retryAt.map((d) => d.getTime()))), ctx.now)) },
  });
}

/**
 * email-change-expiry (every 5 minutes): a pending_email whose change link expired (24 hours) no
 * longer awaits verification and is cleared.
 */
export async function expirePendingEmails(deps: Deps): Promise<{ cleared: number }> {
  const now = deps.clock.now();
  return { cleared: await clearExpiredPendingEmails(deps.database.scoped('system'), now) };
}
