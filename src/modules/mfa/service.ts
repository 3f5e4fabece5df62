import { setTimeout as sleep } from 'node:timers/promises';
import type { Ctx, Deps } from '../../context.js';
import { hasPermission, inTx } from '../../context.js';
import type { Queryable, Tx } from '../../db/types.js';
import { ApiError, invalidField } from '../../errors.js';
import { newId } from '../../ids.js';
import { recordAudit } from '../../audit/record.js';
import { voidMfaChallenges } from '../../auth/one-time-tokens.js';
import { unauthenticated } from '../../auth/credentials.js';
import { enqueueMail } from '../../mail/outbox.js';
import { latestAcceptedStep, newRecoveryCodes, newTotpSecret, sealTotpSecret, totpContext, totpSecretOf, totpUri, verifyTotp } from '../../auth/totp.js';
import { resolveUserId } from '../users/service.js';
import { assertMayChangeAccount, holdAccountRight, targetUser } from '../users/access.js';
import { findUserById, holdUserAddress } from '../users/store.js';
import { claimAttempt, findPasswordIdentity, releaseAttempt, tooManyAttempts, type PasswordIdentity } from '../auth/identities.js';
import { hashRecoveryCode, withPasswordWork } from '../../auth/passwords.js';
import { recoveryCodeHashes, takeRecoveryCode, takeTotpStep, totpAfterStep, withRecoveryCodeWork } from '../auth/login.js';
import { deleteRecoveryCodes, insertRecoveryCode, lockTotpState, takePendingTotpStep, updatePendingTotpSecret, updateTotpConfirmed, updateTotpOff } from './store.js';
import type { ConfirmBody, DisableBody, TotpEnrollment } from './schemas.js';

/** At start: TOTP secrets in the clear or sealed with an old key are sealed with the current one. */
export const resealTotpSecrets = (deps: Deps): Promise<number> =>
  deps.secrets.resealColumns('identities', ['totp_secret', 'totp_pending_secret'], totpContext);

/** Self-service MFA endpoints act only on the caller: readers of the user get 403, anyone else 404. */
async function selfIdentity(ctx: Ctx, idParam: string): Promise<{ userId: string; email: string; identity: PasswordIdentity }> {
  const userId = resolveUserId(ctx, idParam);
  if (ctx.actor.type !== 'user' || ctx.actor.userId !== userId) {
    await targetUser(ctx, idParam, 'read');
    throw new ApiError('forbidden', { message: 'Only the user may change their MFA settings.' });
  }
  const user = (await findUserById(ctx.db, userId))!;
  const identity = await findPasswordIdentity(ctx.db, userId);
  if (!identity?.password_hash) throw new ApiError('password_identity_required');
  return { userId, email: user.email, identity };
}

/** POST /v1/users/{id}/mfa/totp: a new pending secret; TOTP turns on only at confirm. */
export async function beginTotp(ctx: Ctx, idParam: string): Promise<TotpEnrollment> {
  const { identity, email } = await selfIdentity(ctx, idParam);
  if (identity.totp_confirmed_at) throw new ApiError('mfa_already_enabled');
  const secret = newTotpSecret();
  // Only while TOTP is still off: an enrollment confirmed since the read above (another tab) keeps its
  // secret, and this one answers as a begin after it, not with a secret that could never be confirmed.
  // A restart forgets the step a code of the previous pending secret took.
  const rowCount = await updatePendingTotpSecret(ctx.db, identity.id, sealTotpSecret(ctx, identity.id, secret), ctx.now);
  if (rowCount !== 1) throw new ApiError('mfa_already_enabled');
  const issuer = new URL(ctx.deps.config.publicUrl).hostname;
  return { secret, otpauth_uri: totpUri(secret, email, issuer), algorithm: 'SHA1', digits: 6, period: 30 };
}

/**
 * POST …/mfa/totp/confirm: the first code turns TOTP on and returns ten single-use recovery codes.
 * Their hashes are Argon2id with the password parameters, ten per confirm, so a confirm is admitted
 * as password work is (503 beyond the process's capacity, docs/decisions.md), and the code is taken
 * (its step, once, as at sign-in) before that work: of confirms sent at once with one code, one
 * hashes and the others are answered without hashing.
 */
export const confirmTotp = (ctx: Ctx, idParam: string, input: ConfirmBody): Promise<{ recovery_codes: string[] }> =>
  withPasswordWork(() => confirmTotpAdmitted(ctx, idParam, input));

async function confirmTotpAdmitted(ctx: Ctx, idParam: string, input: ConfirmBody): Promise<{ recovery_codes: string[] }> {
  const { userId, identity } = await selfIdentity(ctx, idParam);
  if (identity.totp_confirmed_at) throw new ApiError('mfa_already_enabled');
  if (!identity.totp_pending_secret) throw new ApiError('mfa_not_enabled', { message: 'Start enrollment first.' });
  const secret = totpSecretOf(ctx, identity.id, identity.totp_pending_secret);
  const step = await verifyTotp(secret, input.code, ctx.now, await totpAfterStep(ctx.db, identity, ctx.now));
  // A right code whose step is taken already may be a confirm's still under way (confirmRefusal).
  const codeStep = step ?? (await verifyTotp(secret, input.code, ctx.now, null));
  if (codeStep === null) throw new ApiError('invalid_mfa_code');
  const checked = { secret: identity.totp_pending_secret, step: codeStep };
  if (step === null) throw await confirmRefusal(ctx.db, userId, checked, true);
  const taken = await takePendingTotpStep(ctx.db, identity.id, step, identity.totp_pending_secret, latestAcceptedStep(ctx.now));
  if (taken !== 1) throw await confirmRefusal(ctx.db, userId, checked, true);
  const codes = newRecoveryCodes();
  const hashes = await Promise.all(codes.map((code) => hashRecoveryCode(userId, code)));
  await ctx.db.transaction(async (tx) => {
    // The account as it is now, held before its identity as a password change holds it: a delete or
    // suspension that committed while this confirm ran ended its session (401, nothing changes), and
    // the notice goes to the address the account has, an admin email change meanwhile included.
    const account = await holdUserAddress(tx, userId);
    if (account?.status !== 'active') throw unauthenticated(true);
    const rowCount = await updateTotpConfirmed(tx, identity.id, ctx.now, step, identity.totp_pending_secret!);
    if (rowCount !== 1) throw await confirmRefusal(tx, userId, checked, false);
    await replaceRecoveryCodes(tx, userId, hashes, ctx.now);
    // Turning a second factor on is a change of authentication details too (ASVS 4.0.3 V2.2.3): a
    // stolen access token could otherwise put its holder's authenticator on the account unnoticed and
    // keep the owner from signing in.
    await enqueueMail(tx, ctx, { template: 'mfa_enabled', to: account.email, vars: {}, userId });
    await recordAudit(tx, inTx(ctx, tx), { action: 'user.mfa_enabled', target: { type: 'user', id: userId }, targetUserId: userId });
  });
  return { recovery_codes: codes };
}

/** POST …/mfa/totp/disable: needs a current code or an unused recovery code. */
export const disableTotp = (ctx: Ctx, idParam: string, input: DisableBody): Promise<void> =>
  withRecoveryCodeWork(input, () => disableTotpAdmitted(ctx, idParam, input));

async function disableTotpAdmitted(ctx: Ctx, idParam: string, input: DisableBody): Promise<void> {
  if ((input.code === undefined) === (input.recovery_code === undefined)) {
    throw invalidField('code', 'send exactly one of code or recovery_code');
  }
  const { userId, identity } = await selfIdentity(ctx, idParam);
  if (!identity.totp_confirmed_at || !identity.totp_secret) throw new ApiError('mfa_not_enabled');
  // Wrong codes count toward the identity's lockout, as at sign-in: a stolen access token does not buy
  // unlimited guesses at the code that turns MFA off. The slot is taken before the code is evaluated.
  const claim = await claimAttempt(ctx.db, identity.id, ctx.now);
  if (claim.refused) throw tooManyAttempts(claim.lockedUntil, ctx.now);
  const step = input.code !== undefined ? await verifyTotp(totpSecretOf(ctx, identity.id, identity.totp_secret), input.code, ctx.now, await totpAfterStep(ctx.db, identity, ctx.now)) : null;
  const recoveryHashes = input.code === undefined ? await recoveryCodeHashes(userId, input.recovery_code!) : [];
  // A wrong code answers 422 invalid_mfa_code, the fifth too; the lock it sets refuses the next ones.
  // A refusal that changes nothing and counts no failure is answered after the attempt is released.
  let refusal: ApiError | null = null;
  await ctx.db.transaction(async (tx) => {
    // The account as it is now, held first (before its challenges and identity), as in confirmTotpAdmitted:
    // a delete or suspension meanwhile ended this session (401, nothing changes, no failed attempt),
    // and the notice goes to the address the account has.
    const account = await holdUserAddress(tx, userId);
    if (account?.status !== 'active') {
      refusal = unauthenticated(true);
      return;
    }
    // Locked and read again: a disable or support reset that committed since the identity was read has
    // turned TOTP off (with its audit row and notice), and the code it took is free again; this one
    // changes nothing, as a disable with TOTP off. The user's pending MFA challenges die with TOTP (they
    // can no longer be met, and must not come back to life if TOTP is turned on again before they
    // expire); voided before the identity is locked, in the order an MFA sign-in takes them (the
    // challenge, then the identity), as a password reset does, so the two at once cannot deadlock. A
    // wrong code rolls the void back.
    await voidMfaChallenges(tx, userId, ctx.now);
    if (!(await lockTotpState(tx, identity.id))?.totp_confirmed_at) {
      refusal = new ApiError('mfa_not_enabled');
      return;
    }
    const ok =
      input.code !== undefined ? step !== null && (await takeTotpStep(tx, identity.id, step, ctx.now)) : await takeRecoveryCode(tx, userId, recoveryHashes, ctx.now);
    if (!ok) throw new ApiError('invalid_mfa_code');
    await turnOff(tx, identity.id, userId, ctx.now);
    await enqueueMail(tx, ctx, { template: 'mfa_disabled', to: account.email, vars: { bySupport: false }, userId });
    await recordAudit(tx, inTx(ctx, tx), { action: 'user.mfa_disabled', target: { type: 'user', id: userId }, targetUserId: userId });
  });
  // A right code was no failure (nor a code that was never checked).
  await releaseAttempt(ctx.db, identity.id, ctx.now, claim.lockedUntil !== null);
  if (refusal) throw refusal;
}

/**
 * DELETE /v1/users/{id}/mfa/totp: support reset by users.manage; 204 whether or not TOTP was on. It is
 * for someone else's account: on their own, a users.manage holder turns TOTP off as everyone does, with
 * a current code or a recovery code (403 forbidden here). A stolen access token must not strip the
 * second factor that still guards the account after an email change and a password reset.
 */
export async function resetTotp(ctx: Ctx, idParam: string): Promise<void> {
  const userId = resolveUserId(ctx, idParam);
  if (!hasPermission(ctx.actor, 'users.manage')) throw new ApiError('user_not_found');
  if (ctx.actor.type === 'user' && ctx.actor.userId === userId) {
    throw new ApiError('forbidden', { message: 'Turn off your own TOTP with a current code or a recovery code (POST /v1/users/me/mfa/totp/disable).' });
  }
  const user = await findUserById(ctx.db, userId);
  // An erased user's tombstone is 404 like every other path about them (docs/decisions.md "Erasure").
  if (!user || user.erased_at) throw new ApiError('user_not_found');
  const rightMayMove = await assertMayChangeAccount(ctx, userId);
  const identity = await findPasswordIdentity(ctx.db, userId);
  if (!identity?.totp_confirmed_at && !identity?.totp_pending_secret) return;
  await ctx.db.transaction(async (tx) => {
    // The account as it is now, held before its challenges and identity: a delete or an admin email
    // change that committed since the read above decides whether and where the notice goes, and a
    // platform Role assigned meanwhile whether the caller may reset it at all.
    await holdAccountRight(tx, ctx, userId, rightMayMove);
    const account = await holdUserAddress(tx, userId);
    // Locked and read again: a reset or disable that committed since the read has its own audit row and
    // notice, and an enrollment confirmed since is a TOTP that protected the account. Pending MFA
    // challenges die with TOTP, voided before the identity is locked (as in disableTotp).
    await voidMfaChallenges(tx, userId, ctx.now);
    const current = await lockTotpState(tx, identity.id);
    if (!current?.totp_confirmed_at && !current?.totp_pending_secret) return;
    await turnOff(tx, identity.id, userId, ctx.now);
    // A pending enrollment that never protected the account, and a soft-deleted user, get no notice.
    if (current.totp_confirmed_at && account && account.status !== 'deleted') {
      await enqueueMail(tx, ctx, { template: 'mfa_disabled', to: account.email, vars: { bySupport: true }, userId });
    }
    await recordAudit(tx, inTx(ctx, tx), { action: 'user.mfa_reset', target: { type: 'user', id: userId }, targetUserId: userId });
  });
}

/** How long a confirm whose code's step a confirm of the same secret took waits for that one to commit. */
const RIVAL_CONFIRM_WAIT_MS = 3000;
const RIVAL_CONFIRM_POLL_MS = 25;

/**
 * Why a confirm whose code was right (for the pending secret it read, `checked`) changed nothing:
 * confirmed meanwhile, its code's step taken, or its enrollment begun again or reset. When the step
 * was taken for that same pending secret, the confirm that took it may still be hashing its recovery
 * codes: unless `waitForRival` is false, this one waits for it (bounded, holding no connection), so
 * that of confirms sent at once with one code the others answer 409 mfa_already_enabled, and 422 only
 * when that confirm did not complete. An enrollment begun again or reset meanwhile is named: the code
 * was right for a secret the account no longer has.
 */
async function confirmRefusal(db: Queryable, userId: string, checked: { secret: string; step: number }, waitForRival: boolean): Promise<ApiError> {
  const deadline = Date.now() + RIVAL_CONFIRM_WAIT_MS;
  for (;;) {
    const current = await findPasswordIdentity(db, userId);
    if (current?.totp_confirmed_at) return new ApiError('mfa_already_enabled');
    if (current?.totp_pending_secret !== checked.secret) return new ApiError('invalid_mfa_code', { message: ENROLLMENT_REPLACED });
    const rivalPending = waitForRival && Number(current.totp_last_step) === checked.step;
    if (!rivalPending || Date.now() >= deadline) return new ApiError('invalid_mfa_code');
    await sleep(RIVAL_CONFIRM_POLL_MS);
  }
}

const ENROLLMENT_REPLACED = 'The enrollment was begun again or reset while this code was checked: confirm with a code of the current secret, or begin again.';

async function turnOff(tx: Tx, identityId: string, userId: string, now: Date): Promise<void> {
  await updateTotpOff(tx, identityId, now);
  await deleteRecoveryCodes(tx, userId);
}

async function replaceRecoveryCodes(tx: Tx, userId: string, hashes: string[], now: Date): Promise<void> {
  await deleteRecoveryCodes(tx, userId);
  for (const hash of hashes) {
    await insertRecoveryCode(tx, newId('idn'), userId, hash, now);
  }
}
