import type { Ctx } from '../../context.js';
import type { Queryable } from '../../db/types.js';
import { CLEAR_LOCKOUT_SQL } from './identities.js';
import { addSeconds } from '../../clock.js';
import { ApiError } from '../../errors.js';
import { hashSecret, newId, newSecret } from '../../ids.js';
import { PLATFORM_AUDIENCE } from '../../auth/signing-keys.js';
import type { AuthSession } from './schemas.js';

export const ACCESS_TOKEN_SECONDS = 15 * 60;
export const REFRESH_IDLE_SECONDS = 30 * 24 * 3600;
export const SESSION_ABSOLUTE_SECONDS = 90 * 24 * 3600;

export type AuthMethod = 'pwd' | 'otp' | 'recovery_code' | 'sso';

export interface SessionUser {
  id: string;
  email_verified: boolean;
  test_mode: boolean;
}

/** The password a sign-in verified: the session is issued only while it is still the identity's. */
export interface VerifiedPassword {
  identityId: string;
  passwordHash: string;
}

/**
 * Starts a session: the `ses_` row, its first refresh token and last_login_at, in one statement
 * (atomic on its own, one round trip), then an access token. The session is issued only while the
 * user is still active and, for a password sign-in (`password`), the password it verified is still
 * the identity's; that sign-in's failed attempts are reset in the same statement. A suspension,
 * delete, password reset or change that ended the user's sessions while the password was being
 * verified is thus either seen (no session: 403 account_suspended or 401 invalid_credentials) or,
 * holding the user's or the identity's row lock, waits for this statement and then ends the session
 * it issued: no session outlives the change that ended them all.
 */
export async function issueSession(db: Queryable, ctx: Ctx, user: SessionUser, amr: AuthMethod[], password?: VerifiedPassword): Promise<AuthSession> {
  const sessionId = newId('ses');
  const refreshToken = newSecret('rtk_');
  const sessionExpiresAt = addSeconds(ctx.now, SESSION_ABSOLUTE_SECONDS);
  const idle = addSeconds(ctx.now, REFRESH_IDLE_SECONDS);
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
      sessionId, user.id, user.test_mode, amr, ctx.ip, ctx.userAgent?.slice(0, 512) ?? null, ctx.now, sessionExpiresAt,
      newId('rtk'), hashSecret(refreshToken), idle < sessionExpiresAt ? idle : sessionExpiresAt,
      ...(password ? [password.identityId, password.passwordHash] : []),
    ],
  );
  if (rows.length === 0) {
    // Ended meanwhile: suspended (or deleted), or a new password set; read as committed now.
    const { rows: now } = await db.query<{ status: string }>('SELECT status FROM users WHERE id = $1', [user.id]);
    throw new ApiError(now[0]?.status === 'suspended' ? 'account_suspended' : 'invalid_credentials');
  }
  return {
    token_type: 'Bearer',
    access_token: await signAccessToken(ctx, user, sessionId, amr),
    expires_in: ACCESS_TOKEN_SECONDS,
    refresh_token: refreshToken,
    refresh_token_expires_in: REFRESH_IDLE_SECONDS,
    session_id: sessionId,
    user_id: user.id,
    email_verified: user.email_verified,
  };
}

/** Claims exactly as Part A "Platform access token claims"; no permissions. */
export function signAccessToken(ctx: Ctx, user: SessionUser, sessionId: string, amr: AuthMethod[]): Promise<string> {
  return ctx.deps.keys.sign(
    {
      sub: user.id,
      sid: sessionId,
      amr,
      email_verified: user.email_verified,
      test_mode: user.test_mode,
      jti: newId('atk'),
    },
    PLATFORM_AUDIENCE,
    ACCESS_TOKEN_SECONDS,
  );
}
