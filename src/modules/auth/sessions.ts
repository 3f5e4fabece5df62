import type { Ctx } from '../../context.js';
import type { Tx } from '../../db/types.js';
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

/** Starts a session: the `ses_` row, its first refresh token, an access token; sets last_login_at. */
export async function issueSession(tx: Tx, ctx: Ctx, user: SessionUser, amr: AuthMethod[]): Promise<AuthSession> {
  const sessionId = newId('ses');
  await tx.query(
    `INSERT INTO sessions (id, user_id, test_mode, amr, ip_address, user_agent, created_at, expires_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
    [sessionId, user.id, user.test_mode, amr, ctx.ip, ctx.userAgent?.slice(0, 512) ?? null, ctx.now, addSeconds(ctx.now, SESSION_ABSOLUTE_SECONDS)],
  );
  await tx.query('UPDATE users SET last_login_at = $2 WHERE id = $1', [user.id, ctx.now]);
  const refreshToken = await insertRefreshToken(tx, ctx, sessionId, null, addSeconds(ctx.now, SESSION_ABSOLUTE_SECONDS));
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

/** A refresh token idles out after 30 days and never outlives its session (90 days absolute). */
export async function insertRefreshToken(tx: Tx, ctx: Ctx, sessionId: string, parentId: string | null, sessionExpiresAt: Date): Promise<string> {
  const token = newSecret('rtk_');
  const idle = addSeconds(ctx.now, REFRESH_IDLE_SECONDS);
  await tx.query(
    `INSERT INTO refresh_tokens (id, session_id, token_hash, created_at, idle_expires_at, parent_id) VALUES ($1, $2, $3, $4, $5, $6)`,
    [newId('rtk'), sessionId, hashSecret(token), ctx.now, idle < sessionExpiresAt ? idle : sessionExpiresAt, parentId],
  );
  return token;
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
