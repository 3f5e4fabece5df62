import type { Ctx } from '../../context.js';
import { inTx } from '../../context.js';
import { modeOf } from '../../db/types.js';
import { ApiError } from '../../errors.js';
import { hashSecret } from '../../ids.js';
import { recordAudit } from '../../audit/record.js';
import { ACCESS_TOKEN_SECONDS, insertRefreshToken, REFRESH_IDLE_SECONDS, signAccessToken, type AuthMethod } from './sessions.js';
import type { AuthSession, RefreshBody } from './schemas.js';

interface TokenRow {
  id: string;
  session_id: string;
  used_at: Date | null;
  idle_expires_at: Date;
  user_id: string;
  test_mode: boolean;
  amr: AuthMethod[];
  session_expires_at: Date;
  session_revoked_at: Date | null;
  status: string;
  email_verified: boolean;
}

/**
 * POST /v1/auth/token/refresh. Single use and rotating: the token is marked used by one atomic
 * UPDATE, so of concurrent refreshes (on any number of processes) exactly one wins. Presenting an
 * already-used token is reuse (RFC 9700 §4.14.2): the whole session is revoked and audited.
 */
export async function refresh(baseCtx: Ctx, input: RefreshBody): Promise<AuthSession> {
  const system = baseCtx.deps.database.scoped('system');
  const { rows } = await system.query<TokenRow>(
    `SELECT t.id, t.session_id, t.used_at, t.idle_expires_at, s.user_id, s.test_mode, s.amr,
            s.expires_at AS session_expires_at, s.revoked_at AS session_revoked_at, u.status, u.email_verified
       FROM refresh_tokens t JOIN sessions s ON s.id = t.session_id JOIN users u ON u.id = s.user_id
      WHERE t.token_hash = $1`,
    [hashSecret(input.refresh_token)],
  );
  const token = rows[0];
  if (!token) throw new ApiError('invalid_refresh_token');
  const mode = modeOf(token.test_mode);
  const ctx: Ctx = { ...baseCtx, mode, db: baseCtx.deps.database.scoped(mode) };

  if (token.used_at) {
    await revokeForReuse(ctx, token);
    throw new ApiError('invalid_refresh_token');
  }
  if (token.session_revoked_at || token.session_expires_at <= ctx.now || token.idle_expires_at <= ctx.now || token.status !== 'active') {
    throw new ApiError('invalid_refresh_token');
  }

  const issued = await ctx.db.transaction(async (tx) => {
    const { rowCount } = await tx.query(
      `UPDATE refresh_tokens SET used_at = $2 WHERE id = $1 AND used_at IS NULL`,
      [token.id, ctx.now],
    );
    if (rowCount !== 1) return null; // lost the race: another refresh used it first
    const c = inTx(ctx, tx);
    const next = await insertRefreshToken(tx, c, token.session_id, token.id, token.session_expires_at);
    const user = { id: token.user_id, email_verified: token.email_verified, test_mode: token.test_mode };
    return {
      token_type: 'Bearer' as const,
      access_token: await signAccessToken(c, user, token.session_id, token.amr),
      expires_in: ACCESS_TOKEN_SECONDS,
      refresh_token: next,
      refresh_token_expires_in: Math.min(REFRESH_IDLE_SECONDS, Math.floor((token.session_expires_at.getTime() - ctx.now.getTime()) / 1000)),
      session_id: token.session_id,
      user_id: token.user_id,
      email_verified: token.email_verified,
    };
  });
  if (issued) return issued;
  await revokeForReuse(ctx, token);
  throw new ApiError('invalid_refresh_token');
}

async function revokeForReuse(ctx: Ctx, token: TokenRow): Promise<void> {
  await ctx.db.transaction(async (tx) => {
    const { rowCount } = await tx.query('UPDATE sessions SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL', [token.session_id, ctx.now]);
    if (rowCount === 1) {
      await recordAudit(tx, inTx(ctx, tx), {
        action: 'session.refresh_token_reused',
        target: { type: 'session', id: token.session_id },
        targetUserId: token.user_id,
        after: { session_id: token.session_id, refresh_token_id: token.id, revoked: true },
        actor: { type: 'system', id: null },
      });
    }
  });
}
