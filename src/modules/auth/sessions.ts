import type { Ctx } from '../../context.js';
import type { Queryable } from '../../db/types.js';
import { CLEAR_LOCKOUT_SQL } from './identities.js';
import { addSeconds } from '../../clock.js';
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

/**
 * Starts a session: the `ses_` row, its first refresh token and last_login_at, in one statement
 * (atomic on its own, one round trip), then an access token. `clearLockoutOf` also resets that
 * password identity's failed attempts in the same statement (a successful password sign-in).
 */
export async function issueSession(db: Queryable, ctx: Ctx, user: SessionUser, amr: AuthMethod[], clearLockoutOf?: string): Promise<AuthSession> {
  const sessionId = newId('ses');
  const refreshToken = newSecret('rtk_');
  const sessionExpiresAt = addSeconds(ctx.now, SESSION_ABSOLUTE_SECONDS);
  const idle = addSeconds(ctx.now, REFRESH_IDLE_SECONDS);
  // Referential checks run at the end of the statement, when the session row exists.
  await db.query(
    `WITH s AS (
       INSERT INTO sessions (id, user_id, test_mode, amr, ip_address, user_agent, created_at, expires_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
     ), t AS (
       INSERT INTO refresh_tokens (id, session_id, token_hash, created_at, idle_expires_at, parent_id)
       VALUES ($9, $1, $10, $7, $11, NULL)
     ), u AS (
       UPDATE users SET last_login_at = $7 WHERE id = $2
     )${clearLockoutOf ? `, i AS (${CLEAR_LOCKOUT_SQL('$12', '$7')})` : ''}
     SELECT 1`,
    [
      sessionId, user.id, user.test_mode, amr, ctx.ip, ctx.userAgent?.slice(0, 512) ?? null, ctx.now, sessionExpiresAt,
      newId('rtk'), hashSecret(refreshToken), idle < sessionExpiresAt ? idle : sessionExpiresAt,
      ...(clearLockoutOf ? [clearLockoutOf] : []),
    ],
  );
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
