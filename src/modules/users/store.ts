import type { Queryable, Tx } from '../../db/types.js';
import type { User, UserStatus } from './schemas.js';

export interface UserRow {
  id: string;
  email: string;
  email_verified: boolean;
  pending_email: string | null;
  /** When the link that would complete pending_email stops working (null: none is live). */
  pending_email_expires_at: Date | null;
  status: UserStatus;
  mfa_enabled: boolean;
  signup_application_id: string | null;
  test_mode: boolean;
  created_at: Date;
  updated_at: Date;
  last_login_at: Date | null;
  deleted_at: Date | null;
  erased_at: Date | null;
}

// mfa_enabled is a scalar subquery, one index probe per row: as an EXISTS, a list page was planned as
// a hashed scan of every confirmed identity (docs/conventions.md, Queries at scale). So is
// pending_email_expires_at, only for the rare user with a pending_email (CASE evaluates it no further).
export const USER_COLUMNS = `u.id, u.email, u.email_verified, u.pending_email, u.status, u.signup_application_id, u.test_mode,
  u.created_at, u.updated_at, u.last_login_at, u.deleted_at, u.erased_at,
  COALESCE((SELECT true FROM identities i WHERE i.user_id = u.id AND i.totp_confirmed_at IS NOT NULL LIMIT 1), false) AS mfa_enabled,
  CASE WHEN u.pending_email IS NULL THEN NULL ELSE
    (SELECT max(t.expires_at) FROM one_time_tokens t WHERE t.user_id = u.id AND t.kind = 'email_change' AND t.used_at IS NULL) END
    AS pending_email_expires_at`;

/**
 * The User resource at `now`. pending_email shows only while its change link is live: from the
 * instant the link expires (24 hours) it reads null, as the email-change-expiry job (every 5
 * minutes) later stores it; the link and the field never disagree.
 */
export function toUser(row: UserRow, now: Date): User {
  const pendingLive = row.pending_email !== null && row.pending_email_expires_at !== null && row.pending_email_expires_at > now;
  return {
    id: row.id,
    email: row.email,
    email_verified: row.email_verified,
    pending_email: pendingLive ? row.pending_email : null,
    status: row.status,
    mfa_enabled: row.mfa_enabled,
    signup_application_id: row.signup_application_id,
    test_mode: row.test_mode,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
    last_login_at: row.last_login_at?.toISOString() ?? null,
  };
}

export async function findUserById(db: Queryable, id: string): Promise<UserRow | null> {
  const { rows } = await db.query<UserRow>(`SELECT ${USER_COLUMNS} FROM users u WHERE u.id = $1`, [id]);
  return rows[0] ?? null;
}

/**
 * The user's row as it is now, locked until the transaction ends: a status change decides on this,
 * never on a row read before its transaction (two concurrent changes would both pass the table).
 */
export async function lockUser(tx: Queryable, id: string): Promise<UserRow | null> {
  const { rows } = await tx.query<UserRow>(`SELECT ${USER_COLUMNS} FROM users u WHERE u.id = $1 FOR UPDATE OF u`, [id]);
  return rows[0] ?? null;
}

/**
 * The user's row first, then their one-time links and MFA challenges: a status, email or link change
 * takes the user (lockUser) and then voids or issues links, so a transaction that uses a link (a
 * reset, a verification) or voids them (a password change) takes the user before its link (one that
 * decides on the user's status or address, a re-send or an acceptance, locks it with lockUnchanged or
 * lockUser instead), or the two at once deadlock (each holding what the other waits for). FOR KEY SHARE
 * waits only for those FOR UPDATE holders: a sign-in's session statement (the identity, then the user
 * FOR NO KEY UPDATE) neither waits for it nor is waited for, so taking the identity after it is safe.
 */
export async function holdUserBeforeLinks(tx: Queryable, id: string): Promise<UserStatus | null> {
  return (await holdUserAddress(tx, id))?.status ?? null;
}

/**
 * holdUserBeforeLinks, with the address the account has now: a notice mailed in the transaction goes
 * there, as an admin email change holds the user FOR UPDATE too (it committed before this or waits for it).
 */
export async function holdUserAddress(tx: Queryable, id: string): Promise<Pick<UserRow, 'status' | 'email'> | null> {
  // The status as it is now: a status change holds the user FOR UPDATE, so it committed before this or waits for it.
  // Null when the row is gone (the test purge deleted it meanwhile, its links and sessions with it).
  const { rows } = await tx.query<Pick<UserRow, 'status' | 'email'>>('SELECT status, email FROM users WHERE id = $1 FOR KEY SHARE', [id]);
  return rows[0] ?? null;
}

/** Not deleted and not erased: who a grant, an assignment or a membership may target. */
const isLive = (user: Pick<UserRow, 'status' | 'erased_at'>): boolean => user.status !== 'deleted' && !user.erased_at;

/** The user, unless deleted or erased. */
export async function findLiveUser(db: Queryable, id: string): Promise<UserRow | null> {
  const user = await findUserById(db, id);
  return user && isLive(user) ? user : null;
}

/**
 * Whether the user is live as they are now, held FOR KEY SHARE (the lock an insert referencing them
 * takes anyway): a soft delete or the test purge, each holding the user FOR UPDATE, has committed by
 * the time this answers. `update`: held FOR UPDATE instead, as a platform Role's assignment holds them,
 * so that a write to their account under way (holding them, FOR KEY SHARE at least) has committed
 * first or reads their permissions after it (holdAccountRight).
 */
export async function holdLiveUser(tx: Queryable, id: string, update = false): Promise<boolean> {
  const { rows } = await tx.query<Pick<UserRow, 'status' | 'erased_at'>>(`SELECT status, erased_at FROM users WHERE id = $1 FOR ${update ? 'UPDATE' : 'KEY SHARE'}`, [id]);
  return rows.length === 1 && isLive(rows[0]);
}

/** Holds the user FOR KEY SHARE (the weakest row lock; an assignment of a platform Role waits for it). */
export async function holdUser(tx: Queryable, id: string): Promise<void> {
  await tx.query('SELECT 1 FROM users WHERE id = $1 FOR KEY SHARE', [id]);
}

/**
 * Whether `email` could be a stored address. Addresses are stored only after the `email` format check,
 * which admits ASCII alone, so "case-insensitive" is ASCII case; but PostgreSQL's lower() also folds a
 * few other letters into ASCII ones (with glibc and in PGlite: U+0130 `İ` into `i`, the Kelvin sign
 * U+212A into `k`), which let `kİm@example.com`, another mailbox to any mail server, sign in to, reset
 * and find the account of `kim@example.com`. Such text names no account.
 */
export const mayBeStoredEmail = (email: string): boolean => /^[\x00-\x7f]*$/.test(email);

/**
 * The non-deleted user holding this email (ASCII case-insensitive) in the connection's mode. Compared
 * on email_lower (the stored lower(email)): under row-level security a lower(email) condition cannot
 * use an index. With `share`, the row is held FOR SHARE: a status change under way (a deletion)
 * commits first and the row is judged as it left it, so a user deleted meanwhile is not returned.
 */
export async function findLiveUserByEmail(db: Queryable, email: string, opts: { share?: boolean } = {}): Promise<UserRow | null> {
  if (!mayBeStoredEmail(email)) return null;
  const { rows } = await db.query<UserRow>(
    `SELECT ${USER_COLUMNS} FROM users u WHERE u.email_lower = lower($1) AND u.status <> 'deleted'${opts.share ? ' FOR SHARE OF u' : ''}`,
    [email],
  );
  return rows[0] ?? null;
}

/**
 * Runs `update`, a write giving a live user the address `email` (an UPDATE of the address, or a
 * restore's status change out of deleted), undone alone (a savepoint) when a live
 * user a concurrent transaction committed after the caller's check holds it (users_email_live_key):
 * returns that holder, so the caller answers as for one found before (email_taken, invitation_pending
 * for an invited one); null when the address was set.
 */
export async function setEmailUnlessTaken(tx: Tx, email: string, update: () => Promise<unknown>): Promise<UserRow | null> {
  await tx.exec('SAVEPOINT set_email');
  try {
    await update();
  } catch (err) {
    const e = err as { code?: string; constraint?: string };
    if (e?.code !== '23505' || e.constraint !== 'users_email_live_key') throw err;
    await tx.exec('ROLLBACK TO SAVEPOINT set_email');
    const holder = await findLiveUserByEmail(tx, email);
    if (!holder) throw err;
    return holder;
  }
  await tx.exec('RELEASE SAVEPOINT set_email');
  return null;
}

export interface NewUser {
  id: string;
  email: string;
  emailVerified: boolean;
  status: UserStatus;
  signupApplicationId: string | null;
  testMode: boolean;
  displayName: string;
  now: Date;
}

/**
 * User, default Profile and Settings (Part A: created together, in the caller's transaction).
 * `unlessEmailTaken`: when a live user holds the email (also one a concurrent transaction is creating:
 * the insert waits for it on users_email_live_key), nothing is inserted and the result is false.
 */
export async function insertUser(db: Queryable, u: NewUser, unlessEmailTaken = false): Promise<boolean> {
  const { rowCount } = await db.query(
    `INSERT INTO users (id, email, email_verified, status, signup_application_id, test_mode, created_at, updated_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $7)
     ${unlessEmailTaken ? `ON CONFLICT (test_mode, lower(email)) WHERE status <> 'deleted' DO NOTHING` : ''}`,
    [u.id, u.email, u.emailVerified, u.status, u.signupApplicationId, u.testMode, u.now],
  );
  if (rowCount === 0) return false;
  await db.query('INSERT INTO profiles (user_id, display_name, updated_at) VALUES ($1, $2, $3)', [u.id, u.displayName, u.now]);
  await db.query('INSERT INTO settings (user_id, updated_at) VALUES ($1, $2)', [u.id, u.now]);
  return true;
}

export async function insertPasswordIdentity(db: Queryable, id: string, userId: string, passwordHash: string, now: Date): Promise<void> {
  await db.query(
    `INSERT INTO identities (id, user_id, method, password_hash, created_at) VALUES ($1, $2, 'password', $3, $4)`,
    [id, userId, passwordHash, now],
  );
}

export async function assignRole(
  db: Queryable,
  a: { userId: string; roleId: string; applicationId: string | null; now: Date; byType: string | null; byId: string | null },
): Promise<boolean> {
  const { rowCount } = await db.query(
    `INSERT INTO role_assignments (user_id, role_id, application_id, assigned_at, assigned_by_type, assigned_by_id)
     VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING`,
    [a.userId, a.roleId, a.applicationId, a.now, a.byType, a.byId],
  );
  return rowCount === 1;
}

/**
 * The email_from_name of the Application if it is approved; null otherwise (none, or pending review,
 * rejected or suspended: such an Application has no standing to send in its name).
 */
export async function findApprovedEmailFromName(db: Queryable, applicationId: string): Promise<string | null> {
  const { rows } = await db.query<{ email_from_name: string | null }>(`SELECT email_from_name FROM applications WHERE id = $1 AND review_status = 'approved'`, [applicationId]);
  return rows[0]?.email_from_name ?? null;
}

/** Takes the transaction-scoped advisory lock `key`, waiting for its holder. */
export async function takeAdvisoryLock(db: Queryable, key: number): Promise<void> {
  await db.query('SELECT pg_advisory_xact_lock($1)', [key]);
}
