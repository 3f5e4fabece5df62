import type { Mode, Queryable } from '../../db/types.js';
import { addSeconds, beyondStep } from '../../clock.js';
import { ApiError } from '../../errors.js';
import { retryAfterSeconds } from '../../http/counters.js';
import { hashSecret } from '../../ids.js';
import { mayBeStoredEmail } from '../users/store.js';
import {
  findEmailLock, findIdentityLock, findUserAndClaimIdentity, LOCKOUT_SECONDS, shortenEmailLock, shortenIdentityLock, updateIdentityAttempt, upsertEmailAttempt, type SignInRow,
} from './lockout-store.js';

export { findPasswordIdentity, replacePassword, setPassword, type PasswordIdentity } from './store.js';
export { CLEAR_LOCKOUT_SQL, clearFailures, LOCKOUT_SECONDS, LOCKOUT_THRESHOLD, LOCKOUT_WINDOW_SECONDS, releaseAttempt } from './lockout-store.js';

/** 429 too_many_attempts while an identity (or an email) is locked, with Retry-After. */
export const tooManyAttempts = (until: Date, now: Date) =>
  new ApiError('too_many_attempts', { headers: { 'retry-after': String(retryAfterSeconds(until, now)) } });

/** The outcome of taking an attempt slot: refused (locked), or taken, possibly as the one that locks. */
export type AttemptClaim = { refused: true; lockedUntil: Date } | { refused: false; lockedUntil: Date | null };

function claimOf(
  rows: { locked_until: Date | null }[], now: Date, current: () => Promise<Date | null>, shorten: () => Promise<Date | null>,
): Promise<AttemptClaim> | AttemptClaim {
  if (rows.length === 0) {
    return current().then(async (found) => {
      const until = found && found > beyondStep(now, LOCKOUT_SECONDS) ? ((await shorten()) ?? found) : found;
      return { refused: true as const, lockedUntil: until && until > now ? until : addSeconds(now, 1) };
    });
  }
  const until = rows[0].locked_until;
  return { refused: false, lockedUntil: until && until > now ? until : null };
}

/** Takes an attempt slot on a password identity before its password is evaluated. */
export async function claimAttempt(db: Queryable, identityId: string, now: Date): Promise<AttemptClaim> {
  const rows = await updateIdentityAttempt(db, identityId, now);
  return claimOf(rows, now, () => findIdentityLock(db, identityId), () => shortenIdentityLock(db, identityId, now));
}

/**
 * The same slot for an email without a password identity, so its answers match a real account's.
 * Keyed in ASCII case only, as accounts are matched (mayBeStoredEmail): JavaScript lowers the Kelvin
 * sign to `k`, so its spelling would lock the ASCII address it names for no account, never for one.
 */
export async function claimEmailAttempt(db: Queryable, mode: Mode, email: string, now: Date): Promise<AttemptClaim> {
  const key = `${mode}:${hashSecret(email.replace(/[A-Z]+/g, (s) => s.toLowerCase()))}`;
  const rows = await upsertEmailAttempt(db, key, now);
  return claimOf(rows, now, () => findEmailLock(db, key), () => shortenEmailLock(db, key, now));
}

/** What a password sign-in needs of a user, found by email, with its attempt slot already taken. */
export interface SignInCandidate extends Omit<SignInRow, 'claimed' | 'claimed_lock' | 'current_lock'> {
  /** The attempt slot: taken (and whether this attempt locked the identity), or refused (locked). */
  claim: AttemptClaim | null;
}

/**
 * Finds the user of an email (in the handle's mode) and its password identity and, when the
 * identity has a password, takes an attempt slot on it, in one statement. `claim` is null when
 * there is no password to evaluate (the caller counts the attempt against the email instead).
 */
export async function findAndClaim(db: Queryable, email: string, now: Date): Promise<SignInCandidate | null> {
  if (!mayBeStoredEmail(email)) return null;
  const row = await findUserAndClaimIdentity(db, email, now);
  if (!row) return null;
  const { claimed, claimed_lock, current_lock, ...candidate } = row;
  if (!claimed && !(candidate.identity_id && candidate.password_hash)) return { ...candidate, claim: null };
  // Refused when not claimed: locked. The statement's snapshot may predate a lock set meanwhile.
  const claim = await claimOf(claimed ? [{ locked_until: claimed_lock }] : [], now, async () =>
    current_lock && current_lock > now
      ? current_lock
      : await findIdentityLock(db, candidate.identity_id!),
    () => shortenIdentityLock(db, candidate.identity_id!, now),
  );
  return { ...candidate, claim };
}
