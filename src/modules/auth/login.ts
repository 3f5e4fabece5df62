import type { Ctx } from '../../context.js';
import { inTx } from '../../context.js';
import { modeOf, type Queryable, type Tx } from '../../db/types.js';
import { ApiError, invalidField } from '../../errors.js';
import { verifyAgainstDummy, verifyPassword, withPasswordWork, hashRecoveryCode } from '../../auth/passwords.js';
import { consumeOneTimeToken, issueOneTimeToken, peekOneTimeToken, TOKEN_LIFETIME_SECONDS, type OneTimeTokenRow } from '../../auth/one-time-tokens.js';
import { latestAcceptedStep, legacyRecoveryCodeHash, totpSecretOf, verifyTotp } from '../../auth/totp.js';
import { claimAttempt, claimEmailAttempt, clearFailures, findAndClaim, findPasswordIdentity, releaseAttempt, tooManyAttempts, type PasswordIdentity } from './identities.js';
import { issueSession, type AuthMethod } from './sessions.js';
import { findSessionUser } from './store.js';
import {
  claimChallengeAttempt, findSteppedFloor, hasUnusedRecoveryCode, lockIdentity, releaseChallengeAttempt, takeRecoveryCode, takeTotpStep, updateChallengeUsed,
} from './mfa-store.js';
import type { AuthSession, LoginBody, MfaChallenge, MfaVerifyBody } from './schemas.js';

export { takeRecoveryCode, takeTotpStep, TOTP_STEPS_CLEARED, totpStepFree, totpStepTaken } from './mfa-store.js';

/** Wrong codes a single MFA challenge tolerates before it is void. */
const MFA_CHALLENGE_ATTEMPTS = 5;

/**
 * POST /v1/auth/login. Unknown email, wrong password, an invited user without a password and an
 * SSO-only user all get the same 401 after the same Argon2id work; suspension is revealed only to
 * correct credentials. Five failures in 15 minutes lock the identity for 15 minutes. Refused with
 * 503 before anything else when the process has no room for more password work (withPasswordWork).
 */
export const login = (ctx: Ctx, input: LoginBody): Promise<AuthSession | MfaChallenge> => withPasswordWork(() => loginAdmitted(ctx, input));

async function loginAdmitted(ctx: Ctx, input: LoginBody): Promise<AuthSession | MfaChallenge> {
  // The user, its password identity and an attempt slot on it: one statement.
  const user = await findAndClaim(ctx.db, input.email, ctx.now);
  if (!user?.claim) {
    // Unknown email, invited or SSO-only: the same Argon2 work and the same lockout as an account.
    const claim = await claimEmailAttempt(ctx.db, ctx.mode, input.email, ctx.now);
    if (claim.refused) throw tooManyAttempts(claim.lockedUntil, ctx.now);
    await verifyAgainstDummy(input.password);
    // The failure that sets the lock still answers as a failure; the lock refuses the next attempts.
    throw new ApiError('invalid_credentials');
  }
  const { claim } = user;
  const identityId = user.identity_id!;
  if (claim.refused) throw tooManyAttempts(claim.lockedUntil, ctx.now);
  if (!(await verifyPassword(user.password_hash!, input.password))) {
    // Five failures, then 429 (Part A Login lockout; catalog AU-4): the fifth wrong password answers
    // 401 like the four before it and sets the lock that refuses every later attempt.
    throw new ApiError('invalid_credentials');
  }
  // The password was right: the attempt was no failure. A session resets the counter in its own
  // statement; without one (MFA pending, suspended) only this attempt's slot is given back, so wrong
  // MFA codes keep counting toward the lockout across challenges.
  if (user.status !== 'active' || user.totp_confirmed_at) await releaseAttempt(ctx.db, identityId, ctx.now, claim.lockedUntil !== null);
  if (user.status !== 'active') throw new ApiError(user.status === 'suspended' ? 'account_suspended' : 'invalid_credentials');
  if (user.totp_confirmed_at) return ctx.db.transaction((tx) => challenge(tx, ctx, user.id, identityId));
  // Suspended meanwhile: a right password still gives its slot back. A password set meanwhile
  // (reset, change) cleared the counter itself; the old one is no longer right.
  return issueSession(ctx.db, ctx, user, ['pwd'], { identityId, passwordHash: user.password_hash! }).catch(async (err) => {
    if (err instanceof ApiError && err.code === 'account_suspended') await releaseAttempt(ctx.db, identityId, ctx.now, claim.lockedUntil !== null);
    throw err;
  });
}

/** The challenge's `methods` are those that can complete it: `recovery_code` only while an unused code remains. */
async function challenge(tx: Tx, ctx: Ctx, userId: string, identityId: string): Promise<MfaChallenge> {
  const token = await issueOneTimeToken(tx, ctx, { kind: 'mfa_challenge', userId, data: { identity_id: identityId } });
  const methods: MfaChallenge['methods'] = (await hasUnusedRecoveryCode(tx, userId)) ? ['totp', 'recovery_code'] : ['totp'];
  return { mfa_required: true, mfa_token: token, methods, expires_in: TOKEN_LIFETIME_SECONDS.mfa_challenge };
}

/** POST /v1/auth/mfa/verify: the second step, with a TOTP code (once only) or a recovery code. */
export const verifyMfa = (baseCtx: Ctx, input: MfaVerifyBody): Promise<AuthSession> => withRecoveryCodeWork(input, () => verifyMfaAdmitted(baseCtx, input));

async function verifyMfaAdmitted(baseCtx: Ctx, input: MfaVerifyBody): Promise<AuthSession> {
  if ((input.code === undefined) === (input.recovery_code === undefined)) {
    throw invalidField(input.code === undefined ? 'code' : 'recovery_code', 'send exactly one of code or recovery_code');
  }
  const { ctx, pending, identity } = await openMfaChallenge(baseCtx, input.mfa_token);
  const attempt = await claimMfaAttempt(ctx, pending, identity);
  const proof = await readMfaProof(ctx, pending, identity, input);
  const session = await spendMfaProof(ctx, pending, identity, proof, attempt.release);
  if (session) return session;
  return failMfaAttempt(ctx, pending, attempt.attempts);
}

type MfaProof = { method: AuthMethod; step: number | null; recoveryHashes: string[] };

/** The pending challenge, its user's identity with TOTP, and the context of the challenge's mode. */
async function openMfaChallenge(baseCtx: Ctx, mfaToken: string): Promise<{ ctx: Ctx; pending: OneTimeTokenRow; identity: PasswordIdentity }> {
  const pending = await peekOneTimeToken(baseCtx.deps.database.scoped('system'), ['mfa_challenge'], mfaToken, baseCtx.now);
  if (!pending) throw new ApiError('invalid_credentials', { message: 'The MFA token is invalid or expired.' });
  const mode = modeOf(pending.test_mode);
  const ctx: Ctx = { ...baseCtx, mode, db: baseCtx.deps.database.scoped(mode) };
  const identity = await findPasswordIdentity(ctx.db, pending.user_id);
  if (!identity?.totp_secret) throw new ApiError('invalid_credentials', { message: 'The MFA token is invalid or expired.' });
  return { ctx, pending, identity };
}

/**
 * The attempt is counted before the code is evaluated, against the identity's lockout and against
 * the challenge, so parallel guesses cannot evaluate more codes than either allows; a right code
 * gives the slots back (a session clears the lockout, the challenge is spent).
 */
async function claimMfaAttempt(ctx: Ctx, pending: OneTimeTokenRow, identity: PasswordIdentity): Promise<{ attempts: number; release: () => Promise<void> }> {
  const claim = await claimAttempt(ctx.db, identity.id, ctx.now);
  if (claim.refused) throw tooManyAttempts(claim.lockedUntil, ctx.now);
  const attempts = await claimChallengeAttempt(ctx.db, pending.id, ctx.now, MFA_CHALLENGE_ATTEMPTS);
  const release = () => releaseAttempt(ctx.db, identity.id, ctx.now, claim.lockedUntil !== null);
  if (attempts === null) {
    // Spent or void meanwhile: no code was evaluated.
    await release();
    throw new ApiError('invalid_credentials', { message: 'The MFA token is invalid or expired.' });
  }
  return { attempts, release };
}

/** The TOTP step the code is for (null: not valid now), or the hashes the recovery code may be stored as. */
async function readMfaProof(ctx: Ctx, pending: OneTimeTokenRow, identity: PasswordIdentity, input: MfaVerifyBody): Promise<MfaProof> {
  const method: AuthMethod = input.code !== undefined ? 'otp' : 'recovery_code';
  const step = input.code !== undefined ? await verifyTotp(totpSecretOf(ctx, identity.id, identity.totp_secret!), input.code, ctx.now, await totpAfterStep(ctx.db, identity, ctx.now)) : null;
  const recoveryHashes = input.code === undefined ? await recoveryCodeHashes(pending.user_id, input.recovery_code!) : [];
  return { method, step, recoveryHashes };
}

/** Spends the challenge and the code and issues the session, all or nothing; null when the code is not accepted. */
async function spendMfaProof(ctx: Ctx, pending: OneTimeTokenRow, identity: PasswordIdentity, { method, step, recoveryHashes }: MfaProof, releaseClaim: () => Promise<void>): Promise<AuthSession | null> {
  // Every step or none: a challenge another request already used, or a user no longer active, rolls
  // back the code it would have spent (a losing recovery code stays usable).
  const rejected = new Error('mfa verification rejected');
  // Spent by another request meanwhile (a double-submit): no code of this one was judged, as when
  // the challenge is found spent before (claimMfaAttempt).
  const spent = new ApiError('invalid_credentials', { message: 'The MFA token is invalid or expired.' });
  const suspended = new ApiError('account_suspended');
  // A right code for a user deleted after the password step: 401, as for a deleted user's password,
  // and no failure either (a right code is none; the user may be restored within the window).
  const gone = new ApiError('invalid_credentials', { message: 'The MFA token is invalid or expired.' });
  return ctx.db
    .transaction(async (tx) => {
      if (!(await consumeOneTimeToken(tx, pending.id, ctx.now))) throw spent;
      // The identity before a recovery code, as a disable or a support reset takes them (they turn TOTP
      // off and delete the codes): in the other order, the same code sent to both deadlocked.
      if (method === 'recovery_code') await lockIdentity(tx, identity.id);
      const accepted =
        method === 'otp'
          ? step !== null && (await takeTotpStep(tx, identity.id, step, ctx.now))
          : await takeRecoveryCode(tx, pending.user_id, recoveryHashes, ctx.now);
      if (!accepted) throw rejected;
      const user = await findSessionUser(tx, pending.user_id);
      // A right code for a suspended user: 403, as for a right password (nothing is spent or counted).
      if (user?.status === 'suspended') throw suspended;
      if (!user || user.status !== 'active') throw gone;
      await clearFailures(tx, identity.id, ctx.now);
      // Suspended or deleted since the read above (issueSession waits for the user's row lock).
      return issueSession(tx, inTx(ctx, tx), user, ['pwd', method]).catch((err) => {
        throw err instanceof ApiError ? (err.code === 'account_suspended' ? suspended : gone) : err;
      });
    })
    .catch(async (err) => {
      if (err === rejected) return null;
      if (err === spent) await releaseClaim();
      if (err === suspended || err === gone) {
        await releaseClaim();
        await releaseChallengeAttempt(ctx.db, pending.id);
      }
      throw err;
    });
}

/** A wrong code stays counted; the challenge's last allowed one voids it. */
async function failMfaAttempt(ctx: Ctx, pending: OneTimeTokenRow, attempts: number): Promise<never> {
  if (attempts >= MFA_CHALLENGE_ATTEMPTS) {
    await updateChallengeUsed(ctx.db, pending.id, ctx.now);
  }
  throw new ApiError('invalid_credentials', { message: 'The code is not valid.' });
}

/** The step at or below which verifyTotp refuses codes for this identity now (the replay guard, mfa-store.ts); null: none used. */
export async function totpAfterStep(db: Queryable, identity: Pick<PasswordIdentity, 'id' | 'totp_last_step'>, now: Date): Promise<number | null> {
  const last = identity.totp_last_step;
  const bound = latestAcceptedStep(now);
  if (last === null || last <= bound) return last;
  const floor = await findSteppedFloor(db, identity.id, bound);
  return floor === null || floor === undefined ? last : Number(floor);
}

/**
 * A request carrying a recovery code hashes it with Argon2id to look it up: it is password work,
 * admitted or refused with 503 before anything else (withPasswordWork). A TOTP code is not.
 */
export const withRecoveryCodeWork = <T>(input: { recovery_code?: string }, fn: () => Promise<T>): Promise<T> =>
  input.recovery_code === undefined ? fn() : withPasswordWork(fn);

/** What a recovery code someone sent may be stored as: computed before the transaction (it hashes). */
export async function recoveryCodeHashes(userId: string, code: string): Promise<string[]> {
  return [await hashRecoveryCode(userId, code), legacyRecoveryCodeHash(code)];
}
