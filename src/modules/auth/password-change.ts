import type { Ctx } from '../../context.js';
import { inTx } from '../../context.js';
import { ApiError } from '../../errors.js';
import { unauthenticated } from '../../auth/credentials.js';
import { assertStrongPassword, hashPassword, verifyPassword, withPasswordWork } from '../../auth/passwords.js';
import { enqueueMail } from '../../mail/outbox.js';
import { voidPasswordTokens } from '../../auth/one-time-tokens.js';
import { recordAudit } from '../../audit/record.js';
import { resolveUserId } from '../users/service.js';
import { targetUser } from '../users/access.js';
import { findUserById, holdUserAddress } from '../users/store.js';
import { claimAttempt, clearFailures, findPasswordIdentity, releaseAttempt, replacePassword, tooManyAttempts } from './identities.js';
import { revokeOtherSessions } from './store.js';
import type { ChangePasswordBody } from './schemas.js';

/**
 * POST /v1/users/{id}/password, self only (admins never set passwords). Needs the current
 * password; wrong guesses count toward the identity's lockout. Other sessions end.
 */
export const changePassword = (ctx: Ctx, idParam: string, input: ChangePasswordBody): Promise<void> => withPasswordWork(() => changePasswordAdmitted(ctx, idParam, input));

async function changePasswordAdmitted(ctx: Ctx, idParam: string, input: ChangePasswordBody): Promise<void> {
  const id = resolveUserId(ctx, idParam);
  if (ctx.actor.type !== 'user' || ctx.actor.userId !== id) {
    // Readers of the user get 403, anyone else 404 (decisions "403 or 404").
    await targetUser(ctx, idParam, 'read');
    throw new ApiError('forbidden', { message: 'Only the user may change their password.' });
  }
  const sessionId = ctx.actor.sessionId;
  const user = (await findUserById(ctx.db, id))!;
  const identity = await findPasswordIdentity(ctx.db, id);
  if (!identity?.password_hash) throw new ApiError('password_identity_required');
  // The attempt is counted before the password is evaluated, so parallel guesses cannot evaluate more
  // than the lockout allows; a right password clears it again.
  const claim = await claimAttempt(ctx.db, identity.id, ctx.now);
  if (claim.refused) throw tooManyAttempts(claim.lockedUntil, ctx.now);
  if (!(await verifyPassword(identity.password_hash, input.current_password))) {
    throw new ApiError('invalid_current_password');
  }
  // A right current password is no failure, but no successful login either: it gives its own slot
  // back and keeps the earlier failures (Part A Login lockout); a completed change clears them below.
  await releaseAttempt(ctx.db, identity.id, ctx.now, claim.lockedUntil !== null);
  assertStrongPassword(input.new_password, user.email);
  const passwordHash = await hashPassword(input.new_password);
  const currentHash = identity.password_hash;
  await ctx.db.transaction(async (tx) => {
    // The user before the links it voids, as password/forgot and a suspension take them (the user, then
    // its links and sessions): in the other order a change and one of those at once deadlocked.
    // A suspension or delete that committed while this one ran ended its session: it changes nothing
    // (401, as an email change request answers then), however valid the session was when it began. The
    // notice goes to the address the account has now: an admin email change meanwhile moved it.
    const account = await holdUserAddress(tx, id);
    if (account?.status !== 'active') throw unauthenticated(true);
    // The challenges before the identity, in the order an MFA sign-in takes them (it uses its challenge,
    // then takes the identity): in the other order the two at once deadlocked.
    await voidPasswordTokens(tx, id, ctx.now);
    // A reset (which ended every session) or another change that completed while this one was hashing
    // is not undone by the password verified before it: that password is no longer the current one.
    if (!(await replacePassword(tx, identity.id, currentHash, passwordHash, ctx.now))) throw new ApiError('invalid_current_password');
    await clearFailures(tx, identity.id, ctx.now);
    await revokeOtherSessions(tx, id, sessionId, ctx.now);
    await enqueueMail(tx, ctx, { template: 'password_changed', to: account.email, vars: {}, userId: user.id });
    await recordAudit(tx, inTx(ctx, tx), { action: 'user.password_changed', target: { type: 'user', id }, targetUserId: id });
  });
}
