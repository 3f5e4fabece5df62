import type { Queryable } from '../../db/types.js';
import { newId } from '../../ids.js';
import { CLEAR_LOCKOUT_SQL } from './lockout-store.js';

export type AuthMethod = 'pwd' | 'otp' | 'recovery_code' | 'sso';

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

/** A new session and its first refresh token, in the order the INSERT takes them. */
export interface NewSession {
  sessionId: string;
  userId: string;
  testMode: boolean;
  amr: AuthMethod[];
  ip: string | null;
  userAgent: string | null;
  now: Date;
  expiresAt: Date;
  refreshTokenId: string;
  refreshTokenHash: string;
  idleExpiresAt: Date;
  /** A password sign-in's verified password: the session only while it is still the identity's. */
  password?: { identityId: string; passwordHash: string };
}

/**
 * The `ses_` row, its first refresh token and last_login_at in one statement, only while the user is
 * active (and, with `password`, the identity still holds the verified hash, whose failed attempts are
 * reset); the user's id, or no row when nothing was issued.
 */
export async function insertSession(db: Queryable, s: NewSession): Promise<{ id: string }[]> {
  const password = s.password;
  // `i` locks the identity only while it still holds the verified hash (under READ COMMITTED a row
  // changed meanwhile is re-read at its newest version), `u` the user only while active; the rows are
  // written only through `u`. The identity's lock is the one `c` writes under (FOR NO KEY UPDATE, not
  // FOR SHARE): two sign-ins of one account holding it shared would each wait for the other to let go
  // before clearing its counter, a deadlock. Referential checks run at the end of the statement.
  const { rows } = await db.query<{ id: string }>(
    `WITH ${password ? `i AS (
       SELECT id FROM identities WHERE id = $12 AND password_hash = $13 FOR NO KEY UPDATE
     ), ` : ''}u AS (
       UPDATE users SET last_login_at = $7 ${password ? 'FROM i ' : ''}WHERE users.id = $2 AND users.status = 'active' RETURNING users.id
     ), s AS (
       INSERT INTO sessions (id, user_id, test_mode, amr, ip_address, user_agent, created_at, expires_at)
       SELECT $1, u.id, $3, $4, $5, $6, $7, $8 FROM u
     ), t AS (
       INSERT INTO refresh_tokens (id, session_id, token_hash, created_at, idle_expires_at, parent_id)
       SELECT $9, $1, $10, $7, $11, NULL FROM u
     )${password ? `, c AS (${CLEAR_LOCKOUT_SQL('$12', '$7')} AND EXISTS (SELECT 1 FROM u))` : ''}
     SELECT id FROM u`,
    [
      s.sessionId, s.userId, s.testMode, s.amr, s.ip, s.userAgent, s.now, s.expiresAt,
      s.refreshTokenId, s.refreshTokenHash, s.idleExpiresAt,
      ...(password ? [password.identityId, password.passwordHash] : []),
    ],
  );
  return rows;
}

export async function findUserStatus(db: Queryable, userId: string): Promise<string | undefined> {
  const { rows } = await db.query<{ status: string }>('SELECT status FROM users WHERE id = $1', [userId]);
  return rows[0]?.status;
}

/** What a session is issued for, as its user is now. */
export interface SessionUserRow {
  id: string;
  status: string;
  email_verified: boolean;
  test_mode: boolean;
}

export async function findSessionUser(db: Queryable, userId: string): Promise<SessionUserRow | undefined> {
  const { rows } = await db.query<SessionUserRow>(
    'SELECT id, status, email_verified, test_mode FROM users WHERE id = $1',
    [userId],
  );
  return rows[0];
}

/** Ends every session of the user but `keepSessionId` (not yet revoked). */
export async function revokeOtherSessions(db: Queryable, userId: string, keepSessionId: string, now: Date): Promise<void> {
  await db.query('UPDATE sessions SET revoked_at = $3 WHERE user_id = $1 AND id <> $2 AND revoked_at IS NULL', [userId, keepSessionId, now]);
}

export async function updateEmailVerified(db: Queryable, userId: string, now: Date): Promise<void> {
  await db.query('UPDATE users SET email_verified = true, updated_at = $2 WHERE id = $1', [userId, now]);
}

/** The pending address becomes the user's, verified. */
export async function updateEmailConfirmed(db: Queryable, userId: string, email: string, now: Date): Promise<void> {
  await db.query('UPDATE users SET email = $2, pending_email = NULL, email_verified = true, updated_at = $3 WHERE id = $1', [userId, email, now]);
}

/** An invited user becomes active, their address verified. */
export async function updateUserActivated(db: Queryable, userId: string, now: Date): Promise<void> {
  await db.query(`UPDATE users SET status = 'active', email_verified = true, updated_at = $2 WHERE id = $1`, [userId, now]);
}

/** 1 when an Application has this id, else 0. */
export async function countApplication(db: Queryable, applicationId: string): Promise<number> {
  const { rowCount } = await db.query('SELECT 1 FROM applications WHERE id = $1', [applicationId]);
  return rowCount;
}
