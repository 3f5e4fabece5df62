import type { Ctx } from '../../context.js';
import { inTx } from '../../context.js';
import { modeOf } from '../../db/types.js';
import { ApiError } from '../../errors.js';
import { hashSecret, newId, newSecret } from '../../ids.js';
import { addSeconds } from '../../clock.js';
import { recordAudit } from '../../audit/record.js';
import { SESSION_LIVE_SQL } from '../sessions/store.js';
import { ACCESS_TOKEN_SECONDS, REFRESH_IDLE_SECONDS, signAccessToken, type AuthMethod } from './sessions.js';
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
  const now = baseCtx.now;
  const tokenHash = hashSecret(input.refresh_token);
  // The rotation is one statement (one round trip, atomic on its own): mark the token used if it is
  // unused and its session live, and insert its successor.
  const next = newSecret('rtk_');
  const { rows: rotated } = await system.query<RotatedRow>(
    `WITH used AS (
       UPDATE refresh_tokens t SET used_at = $2
         FROM sessions s JOIN users u ON u.id = s.user_id
        WHERE t.token_hash = $1 AND t.used_at IS NULL AND s.id = t.session_id AND s.revoked_at IS NULL
          AND s.expires_at > $2 AND t.idle_expires_at > $2 AND u.status = 'active'
       RETURNING t.id, t.session_id, s.user_id, s.test_mode, s.amr, s.expires_at AS session_expires_at, u.email_verified
     ), successor AS (
       INSERT INTO refresh_tokens (id, session_id, token_hash, created_at, idle_expires_at, parent_id)
       SELECT $3, used.session_id, $4, $2, LEAST($5::timestamptz, used.session_expires_at), used.id FROM used
       RETURNING id
     )
     SELECT used.* FROM used, successor`,
    [tokenHash, now, newId('rtk'), hashSecret(next), addSeconds(now, REFRESH_IDLE_SECONDS)],
  );
  const won = rotated[0];
  if (won) {
    const mode = modeOf(won.test_mode);
    const ctx: Ctx = { ...baseCtx, mode, db: baseCtx.deps.database.scoped(mode) };
    const user = { id: won.user_id, email_verified: won.email_verified, test_mode: won.test_mode };
    return {
      token_type: 'Bearer' as const,
      access_token: await signAccessToken(ctx, user, won.session_id, won.amr),
      expires_in: ACCESS_TOKEN_SECONDS,
      refresh_token: next,
      refresh_token_expires_in: Math.min(REFRESH_IDLE_SECONDS, Math.floor((won.session_expires_at.getTime() - now.getTime()) / 1000)),
      session_id: won.session_id,
      user_id: won.user_id,
      email_verified: won.email_verified,
    };
  }

  // Not rotated: unknown, expired, a dead session, or already used (reuse ends the session).
  const { rows } = await system.query<TokenRow>(
    `SELECT t.id, t.session_id, t.used_at, t.idle_expires_at, s.user_id, s.test_mode, s.amr,
            s.expires_at AS session_expires_at, s.revoked_at AS session_revoked_at, u.status, u.email_verified
       FROM refresh_tokens t JOIN sessions s ON s.id = t.session_id JOIN users u ON u.id = s.user_id
      WHERE t.token_hash = $1`,
    [tokenHash],
  );
  const token = rows[0];
  if (token?.used_at) {
    const mode = modeOf(token.test_mode);
    await revokeForReuse({ ...baseCtx, mode, db: baseCtx.deps.database.scoped(mode) }, token);
  }
  throw new ApiError('invalid_refresh_token');
}

interface RotatedRow {
  id: string;
  session_id: string;
  user_id: string;
  test_mode: boolean;
  amr: AuthMethod[];
  session_expires_at: Date;
  email_verified: boolean;
}

/**
 * Reuse ends the session and is audited: `revoked` says whether this presentation ended it. A replay
 * after the session ended otherwise (logout, an admin revoke, a suspend, its 90 days, idling out) is
 * audited too, once per reused token, so a stolen token replayed after the owner signed out still
 * leaves a trace.
 */
async function revokeForReuse(ctx: Ctx, token: TokenRow): Promise<void> {
  await ctx.db.transaction(async (tx) => {
    // Concurrent replays of one token take their turn on the session row, so the one that audits has
    // committed before the next looks for its row: audited once, also on a session already ended.
    await tx.query('SELECT 1 FROM sessions WHERE id = $1 FOR NO KEY UPDATE', [token.session_id]);
    // A session that ended by itself (its 90 days, or idled out) has nothing left to revoke.
    const { rowCount } = await tx.query(`UPDATE sessions s SET revoked_at = $2 WHERE id = $1 AND ${SESSION_LIVE_SQL('s', '$2')}`, [token.session_id, ctx.now]);
    const revoked = rowCount === 1;
    if (!revoked) {
      const { rowCount: seen } = await tx.query(
        `SELECT 1 FROM audit_events WHERE action = 'session.refresh_token_reused' AND target_id = $1 AND after->>'refresh_token_id' = $2 LIMIT 1`,
        [token.session_id, token.id],
      );
      if (seen) return;
    }
    await recordAudit(tx, inTx(ctx, tx), {
      action: 'session.refresh_token_reused',
      target: { type: 'session', id: token.session_id },
      targetUserId: token.user_id,
      after: { session_id: token.session_id, refresh_token_id: token.id, revoked },
      actor: { type: 'system', id: null },
    });
  });
}
