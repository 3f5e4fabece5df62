import type { Queryable } from '../../db/types.js';
import { addSeconds, stepBoundSeconds } from '../../clock.js';

export const LOCKOUT_THRESHOLD = 5;
export const LOCKOUT_WINDOW_SECONDS = 15 * 60;
export const LOCKOUT_SECONDS = 15 * 60;

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

/** COUNT_ATTEMPT's parameters $2 to $5 at `now`: the window's start, now, the threshold, the end of a lock set now. */
const attemptParams = (now: Date) => [addSeconds(now, -LOCKOUT_WINDOW_SECONDS), now, LOCKOUT_THRESHOLD, addSeconds(now, LOCKOUT_SECONDS)];

// A lock ending further ahead than LOCKOUT_SECONDS plus the skew bound was set before the clock stepped
// back: it is moved to end LOCKOUT_SECONDS from now (and its failures to now), so a 15-minute lock
// never lasts 15 minutes plus the step. No attempt is evaluated meanwhile; the lock only gets shorter.
const FAR_LOCK = (t: string) =>
  `${t}.locked_until > $2::timestamptz + make_interval(secs => ${stepBoundSeconds(LOCKOUT_SECONDS)})`;
const SHORTEN_LOCK = (t: string, where: string) =>
  `UPDATE ${t} SET locked_until = $2::timestamptz + make_interval(secs => ${LOCKOUT_SECONDS}),
          recent_failures = ARRAY(SELECT f FROM ${FAILURES(t, '$2')} AS r ORDER BY f DESC)
    WHERE ${where} AND ${FAR_LOCK(t)} RETURNING locked_until`;

/** Counts an attempt on a password identity not locked at `now`: its lock after it, or no row (locked). */
export async function updateIdentityAttempt(db: Queryable, identityId: string, now: Date): Promise<{ locked_until: Date | null }[]> {
  const { rows } = await db.query<{ locked_until: Date | null }>(
    `UPDATE identities SET ${COUNT_ATTEMPT('identities')}
      WHERE id = $1 AND (locked_until IS NULL OR locked_until <= $3) RETURNING locked_until`,
    [identityId, ...attemptParams(now)],
  );
  return rows;
}

export async function findIdentityLock(db: Queryable, identityId: string): Promise<Date | null> {
  return (await db.query<{ locked_until: Date | null }>('SELECT locked_until FROM identities WHERE id = $1', [identityId])).rows[0]?.locked_until ?? null;
}

/** Moves a lock set before the clock stepped back to end LOCKOUT_SECONDS from now; its new end, or null. */
async function shortenLock(db: Queryable, table: 'identities' | 'login_lockouts', where: string, id: string, now: Date): Promise<Date | null> {
  const { rows } = await db.query<{ locked_until: Date }>(SHORTEN_LOCK(table, where), [id, now]);
  return rows[0]?.locked_until ?? null;
}

export const shortenIdentityLock = (db: Queryable, identityId: string, now: Date): Promise<Date | null> =>
  shortenLock(db, 'identities', 'id = $1', identityId, now);

/** Counts an attempt on an email's login_lockouts row (made on the first) not locked at `now`: its lock after it, or no row (locked). */
export async function upsertEmailAttempt(db: Queryable, key: string, now: Date): Promise<{ locked_until: Date | null }[]> {
  const { rows } = await db.query<{ locked_until: Date | null }>(
    `INSERT INTO login_lockouts AS l (key, recent_failures, expires_at) VALUES ($1, ARRAY[$3::timestamptz], $6)
     ON CONFLICT (key) DO UPDATE SET ${COUNT_ATTEMPT('l')}, expires_at = $6
      WHERE l.locked_until IS NULL OR l.locked_until <= $3
     RETURNING locked_until`,
    [key, ...attemptParams(now), addSeconds(now, LOCKOUT_WINDOW_SECONDS + LOCKOUT_SECONDS)],
  );
  return rows;
}

export async function findEmailLock(db: Queryable, key: string): Promise<Date | null> {
  return (await db.query<{ locked_until: Date | null }>('SELECT locked_until FROM login_lockouts WHERE key = $1', [key])).rows[0]?.locked_until ?? null;
}

export const shortenEmailLock = (db: Queryable, key: string, now: Date): Promise<Date | null> =>
  shortenLock(db, 'login_lockouts', 'key = $1', key, now);

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

/** A user found by email (in the handle's mode), its password identity, and whether this statement took an attempt slot on it. */
export interface SignInRow {
  id: string;
  status: string;
  email_verified: boolean;
  test_mode: boolean;
  identity_id: string | null;
  password_hash: string | null;
  totp_confirmed_at: Date | null;
  claimed: boolean;
  claimed_lock: Date | null;
  current_lock: Date | null;
}

/**
 * Finds the user of an email and its password identity and, when the identity has a password and is
 * not locked at `now`, counts an attempt on it, in one statement.
 */
export async function findUserAndClaimIdentity(db: Queryable, email: string, now: Date): Promise<SignInRow | undefined> {
  const { rows } = await db.query<SignInRow>(
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
    [email, ...attemptParams(now)],
  );
  return rows[0];
}
