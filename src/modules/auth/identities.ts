import type { Mode, Queryable } from '../../db/types.js';
import { addSeconds, beyondStep, stepBoundSeconds } from '../../clock.js';
import { ApiError } from '../../errors.js';
import { retryAfterSeconds } from '../../http/counters.js';
import { hashSecret, newId } from '../../ids.js';
import { mayBeStoredEmail } from '../users/store.js';

export const LOCKOUT_THRESHOLD = 5;
export const LOCKOUT_WINDOW_SECONDS = 15 * 60;
export const LOCKOUT_SECONDS = 15 * 60;

/** 429 too_many_attempts while an identity (or an email) is locked, with Retry-After. */
export const tooManyAttempts = (until: Date, now: Date) =>
  new ApiError('too_many_attempts', { headers: { 'retry-after': String(retryAfterSeconds(until, now)) } });

export interface PasswordIdentity {
  id: string;
  user_id: string;
  password_hash: string | null;
  totp_secret: string | null;
  totp_pending_secret: string | null;
  totp_confirmed_at: Date | null;
  totp_last_step: number | null;
  locked_until: Date | null;
}

const COLUMNS = 'id, user_id, password_hash, totp_secret, totp_pending_secret, totp_confirmed_at, totp_last_step, locked_until';

export async function findPasswordIdentity(db: Queryable, userId: string): Promise<PasswordIdentity | null> {
  const { rows } = await db.query<PasswordIdentity>(`SELECT ${COLUMNS} FROM identities WHERE user_id = $1 AND method = 'password'`, [userId]);
  return rows[0] ?? null;
}

/** Sets (or first creates) the password identity and clears its lockout. */
export async function setPassword(db: Queryable, userId: string, passwordHash: string, now: Date): Promise<void> {
  await db.query(
    `INSERT INTO identities (id, user_id, method, password_hash, created_at, updated_at) VALUES ($1, $2, 'password', $3, $4, $4)
     ON CONFLICT (user_id, method) DO UPDATE
       SET password_hash = EXCLUDED.password_hash, failed_attempts = 0, first_failed_at = NULL, recent_failures = '{}', locked_until = NULL, updated_at = $4`,
    [newId('idn'), userId, passwordHash, now],
  );
}

/**
 * Replaces a password only while the identity still holds `currentHash` (the one the caller verified),
 * clearing its lockout; false when a reset or another change set a new one meanwhile (under READ
 * COMMITTED a concurrent change is waited for and its result re-read).
 */
export async function replacePassword(db: Queryable, identityId: string, currentHash: string, passwordHash: string, now: Date): Promise<boolean> {
  const { rowCount } = await db.query(
    `UPDATE identities SET password_hash = $3, failed_attempts = 0, first_failed_at = NULL, recent_failures = '{}', locked_until = NULL, updated_at = $4
      WHERE id = $1 AND password_hash = $2`,
    [identityId, currentHash, passwordHash, now],
  );
  return rowCount === 1;
}

/** The outcome of taking an attempt slot: refused (locked), or taken, possibly as the one that locks. */
export type AttemptClaim = { refused: true; lockedUntil: Date } | { refused: false; lockedUntil: Date | null };

// One claim, for identities and for login_lockouts alike: the attempt is counted as a failure before
// the password is evaluated (a success clears it), so parallel guesses cannot evaluate more than
// LOCKOUT_THRESHOLD passwords; a locked row is not updated and the attempt is refused unevaluated.
// A failure stamped further ahead than the skew bound was stamped before the clock stepped back: it
// counts as made now (`now` names the parameter holding now), so it leaves the window 15 minutes
// after the step is noticed, not 15 minutes plus the step (docs/decisions.md, "Clocks of several processes").
const FAILURES = (t: string, now: string) =>
  `(SELECT CASE WHEN f > ${now}::timestamptz + make_interval(secs => ${stepBoundSeconds(0)}) THEN ${now}::timestamptz ELSE f END AS f FROM unnest(${t}.recent_failures) AS f)`;
const COUNT_ATTEMPT = (t: string) => `
  recent_failures = ARRAY(SELECT f FROM (SELECT f FROM ${FAILURES(t, '$3')} AS r UNION ALL SELECT $3::timestamptz) AS a WHERE f > $2 ORDER BY f DESC LIMIT $4),
  locked_until = CASE WHEN (SELECT count(*) FROM (SELECT f FROM ${FAILURES(t, '$3')} AS r UNION ALL SELECT $3::timestamptz) AS a WHERE f > $2) >= $4
                      THEN $5 ELSE ${t}.locked_until END`;

// A lock ending further ahead than LOCKOUT_SECONDS plus the skew bound was set before the clock stepped
// back: it is moved to end LOCKOUT_SECONDS from now (and its failures to now), so a 15-minute lock
// never lasts 15 minutes plus the step. No attempt is evaluated meanwhile; the lock only gets shorter.
const FAR_LOCK = (t: string) =>
  `${t}.locked_until > $2::timestamptz + make_interval(secs => ${stepBoundSeconds(LOCKOUT_SECONDS)})`;
const SHORTEN_LOCK = (t: string, where: string) =>
  `UPDATE ${t} SET locked_until = $2::timestamptz + make_interval(secs => ${LOCKOUT_SECONDS}),
          recent_failures = ARRAY(SELECT f FROM ${FAILURES(t, '$2')} AS r ORDER BY f DESC)
    WHERE ${where} AND ${FAR_LOCK(t)} RETURNING locked_until`;

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
  const { rows } = await db.query<{ locked_until: Date | null }>(
    `UPDATE identities SET ${COUNT_ATTEMPT('identities')}
      WHERE id = $1 AND (locked_until IS NULL OR locked_until <= $3) RETURNING locked_until`,
    [identityId, addSeconds(now, -LOCKOUT_WINDOW_SECONDS), now, LOCKOUT_THRESHOLD, addSeconds(now, LOCKOUT_SECONDS)],
  );
  return claimOf(rows, now, async () => (await db.query<{ locked_until: Date | null }>('SELECT locked_until FROM identities WHERE id = $1', [identityId])).rows[0]?.locked_until ?? null,
    () => shortenLock(db, 'identities', 'id = $1', identityId, now));
}

/** Moves a lock set before the clock stepped back to end LOCKOUT_SECONDS from now; its new end, or null. */
async function shortenLock(db: Queryable, table: 'identities' | 'login_lockouts', where: string, id: string, now: Date): Promise<Date | null> {
  const { rows } = await db.query<{ locked_until: Date }>(SHORTEN_LOCK(table, where), [id, now]);
  return rows[0]?.locked_until ?? null;
}

/**
 * The same slot for an email without a password identity, so its answers match a real account's.
 * Keyed in ASCII case only, as accounts are matched (mayBeStoredEmail): JavaScript lowers the Kelvin
 * sign to `k`, so its spelling would lock the ASCII address it names for no account, never for one.
 */
export async function claimEmailAttempt(db: Queryable, mode: Mode, email: string, now: Date): Promise<AttemptClaim> {
  const key = `${mode}:${hashSecret(email.replace(/[A-Z]+/g, (s) => s.toLowerCase()))}`;
  const { rows } = await db.query<{ locked_until: Date | null }>(
    `INSERT INTO login_lockouts AS l (key, recent_failures, expires_at) VALUES ($1, ARRAY[$3::timestamptz], $6)
     ON CONFLICT (key) DO UPDATE SET ${COUNT_ATTEMPT('l')}, expires_at = $6
      WHERE l.locked_until IS NULL OR l.locked_until <= $3
     RETURNING locked_until`,
    [key, addSeconds(now, -LOCKOUT_WINDOW_SECONDS), now, LOCKOUT_THRESHOLD, addSeconds(now, LOCKOUT_SECONDS),
      addSeconds(now, LOCKOUT_WINDOW_SECONDS + LOCKOUT_SECONDS)],
  );
  return claimOf(rows, now, async () => (await db.query<{ locked_until: Date | null }>('SELECT locked_until FROM login_lockouts WHERE key = $1', [key])).rows[0]?.locked_until ?? null,
    () => shortenLock(db, 'login_lockouts', 'key = $1', key, now));
}

/** The statement that resets an identity's counter; `id` and `now` are parameter references. */
export const CLEAR_LOCKOUT_SQL = (id: string, now: string) =>
  `UPDATE identities SET failed_attempts = 0, first_failed_at = NULL, recent_failures = '{}', locked_until = NULL, last_used_at = ${now}
    WHERE id = ${id}`;

/** A success resets the counter. */
export async function clearFailures(db: Queryable, identityId: string, now: Date): Promise<void> {
  await db.query(CLEAR_LOCKOUT_SQL('$1', '$2'), [identityId, now]);
}

/**
 * Gives back the attempt slot a claim took at `now` when the password was right but no session is
 * issued yet (MFA pending, or a suspended user): a right password is no failure, but only a session
 * resets the counter, so the failures before it (wrong passwords, wrong MFA codes) stay. When this
 * attempt was the one that set the lock, the lock goes with it.
 */
export async function releaseAttempt(db: Queryable, identityId: string, now: Date, lockedByThisAttempt: boolean): Promise<void> {
  await db.query(
    `UPDATE identities SET
        recent_failures = CASE WHEN array_position(recent_failures, $2::timestamptz) IS NULL THEN recent_failures
          ELSE recent_failures[:array_position(recent_failures, $2::timestamptz) - 1] || recent_failures[array_position(recent_failures, $2::timestamptz) + 1:] END,
        locked_until = CASE WHEN $3::boolean THEN NULL ELSE locked_until END
      WHERE id = $1`,
    [identityId, now, lockedByThisAttempt],
  );
}

/** What a password sign-in needs of a user, found by email, with its attempt slot already taken. */
export interface SignInCandidate {
  id: string;
  status: string;
  email_verified: boolean;
  test_mode: boolean;
  identity_id: string | null;
  password_hash: string | null;
  totp_confirmed_at: Date | null;
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
  const { rows } = await db.query<Omit<SignInCandidate, 'claim'> & { claimed: boolean; claimed_lock: Date | null; current_lock: Date | null }>(
    `WITH u AS (
       SELECT id, status, email_verified, test_mode FROM users WHERE email_lower = lower($1) AND status <> 'deleted'
     ), claimed AS (
       UPDATE identities SET ${COUNT_ATTEMPT('identities')}
         FROM u
        WHERE identities.user_id = u.id AND identities.method = 'password' AND identities.password_hash IS NOT NULL
          AND (identities.locked_until IS NULL OR identities.locked_until <= $3)
       RETURNING identities.id, identities.locked_until
     )
     SELECT u.id, u.status, u.email_verified, u.test_mode, i.id AS identity_id, i.password_hash, i.totp_confirmed_at,
            claimed.id IS NOT NULL AS claimed, claimed.locked_until AS claimed_lock, i.locked_until AS current_lock
       FROM u LEFT JOIN identities i ON i.user_id = u.id AND i.method = 'password'
       LEFT JOIN claimed ON claimed.id = i.id`,
    [email, addSeconds(now, -LOCKOUT_WINDOW_SECONDS), now, LOCKOUT_THRESHOLD, addSeconds(now, LOCKOUT_SECONDS)],
  );
  const row = rows[0];
  if (!row) return null;
  const { claimed, claimed_lock, current_lock, ...candidate } = row;
  if (!claimed && !(candidate.identity_id && candidate.password_hash)) return { ...candidate, claim: null };
  // Refused when not claimed: locked. The statement's snapshot may predate a lock set meanwhile.
  const claim = await claimOf(claimed ? [{ locked_until: claimed_lock }] : [], now, async () =>
    current_lock && current_lock > now
      ? current_lock
      : ((await db.query<{ locked_until: Date | null }>('SELECT locked_until FROM identities WHERE id = $1', [candidate.identity_id])).rows[0]?.locked_until ?? null),
    () => shortenLock(db, 'identities', 'id = $1', candidate.identity_id!, now),
  );
  return { ...candidate, claim };
}
