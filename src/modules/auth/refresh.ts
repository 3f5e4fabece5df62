import type { Ctx } from '../../context.js';
import { inTx } from '../../context.js';
import { modeOf } from '../../db/types.js';
import { ApiError } from '../../errors.js';
import { hashSecret, newId, newSecret } from '../../ids.js';
import { addSeconds } from '../../clock.js';
import { recordAudit } from '../../audit/record.js';
import { ACCESS_TOKEN_SECONDS, REFRESH_IDLE_SECONDS, signAccessToken } from './sessions.js';
import { countReuseAudits, findRefreshToken, lockSession, revokeLiveSession, rotateRefreshToken, type TokenRow } from './refresh-store.js';
import type { AuthSession, RefreshBody } from './schemas.js';

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
  const won = await rotateRefreshToken(system, tokenHash, now, newId('rtk'), hashSecret(next), addSeconds(now, REFRESH_IDLE_SECONDS));
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
  const token = await findRefreshToken(system, tokenHash);
  if (token?.used_at) {
    const mode = modeOf(token.test_mode);
    await revokeForReuse({ ...baseCtx, mode, db: baseCtx.deps.database.scoped(mode) }, token);
  }
  throw new ApiError('invalid_refresh_token');
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
    await lockSession(tx, token.session_id);
    // A session that ended by itself (its 90 days, or idled out) has nothing left to revoke.
    const revoked = (await revokeLiveSession(tx, token.session_id, ctx.now)) === 1;
    if (!revoked) {
      const seen = await countReuseAudits(tx, token.session_id, token.id);
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
