import type { Ctx } from '../../context.js';
import type { Queryable } from '../../db/types.js';
import { addSeconds } from '../../clock.js';
import { ApiError } from '../../errors.js';
import { hashSecret, newId, newSecret } from '../../ids.js';
import { PLATFORM_AUDIENCE } from '../../auth/signing-keys.js';
import { findUserStatus, insertSession, type AuthMethod } from './store.js';
import type { AuthSession } from './schemas.js';

export type { AuthMethod } from './store.js';

export const ACCESS_TOKEN_SECONDS = 15 * 60;
export const REFRESH_IDLE_SECONDS = 30 * 24 * 3600;
export const SESSION_ABSOLUTE_SECONDS = 90 * 24 * 3600;

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
  const rows = await insertSession(db, {
    sessionId, userId: user.id, testMode: user.test_mode, amr, ip: ctx.ip, userAgent: ctx.userAgent?.slice(0, 512) ?? null, now: ctx.now, expiresAt: sessionExpiresAt,
    refreshTokenId: newId('rtk'), refreshTokenHash: hashSecret(refreshToken), idleExpiresAt: idle < sessionExpiresAt ? idle : sessionExpiresAt,
    password,
  });
  if (rows.length === 0) {
    // Ended meanwhile: suspended (or deleted), or a new password set; read as committed now.
    const status = await findUserStatus(db, user.id);
    throw new ApiError(status === 'suspended' ? 'account_suspended' : 'invalid_credentials');
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
