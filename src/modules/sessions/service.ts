import type { Ctx } from '../../context.js';
import { inTx } from '../../context.js';
import { recordAudit } from '../../audit/record.js';
import { ApiError } from '../../errors.js';
import { keyset, toPage, type PageParams } from '../../http/pagination.js';
import { holdAccountRight, targetUser } from '../users/access.js';
import { listActiveSessions, revokeSessions } from './store.js';
import type { LogoutBody } from './schemas.js';

/** GET /v1/users/{id}/sessions: self or users.manage (Part A Auth endpoints). */
export async function listSessions(ctx: Ctx, idParam: string, page: PageParams) {
  const userId = (await targetUser(ctx, idParam, 'write', { readOnly: true })).user.id;
  const ks = keyset(page, 3);
  const rows = await listActiveSessions(ctx.db, userId, ctx.now, ks);
  const current = ctx.actor.type === 'user' ? ctx.actor.sessionId : null;
  return toPage(rows, ks.limit, (r) => ({
    id: r.id,
    created_at: r.created_at.toISOString(),
    expires_at: r.expires_at.toISOString(),
    ip_address: r.ip_address,
    user_agent: r.user_agent,
    current: r.id === current,
  }));
}

/**
 * DELETE /v1/users/{id}/sessions/{sessionId}. Ending someone else's session (users.manage) is a security
 * change to their account, audited `session.revoked` on them with the revocation; ending one's own, like
 * logout, is not (docs/decisions.md "Audit actions beyond the spec's tables").
 */
export async function revokeSession(ctx: Ctx, idParam: string, sessionId: string): Promise<void> {
  const { user, self, rightMayMove } = await targetUser(ctx, idParam, 'write');
  await ctx.db.transaction(async (tx) => {
    await holdAccountRight(tx, ctx, user.id, rightMayMove);
    const revoked = await revokeSessions(tx, { userId: user.id, sessionId }, ctx.now);
    if (revoked.length === 0) throw new ApiError('session_not_found');
    if (!self) await recordAudit(tx, inTx(ctx, tx), { action: 'session.revoked', target: { type: 'session', id: sessionId }, targetUserId: user.id });
  });
}

/** Ends the calling session, or with all_sessions every session of the user. */
export async function logout(ctx: Ctx, body: LogoutBody): Promise<void> {
  if (ctx.actor.type !== 'user') throw new ApiError('user_token_required');
  await revokeSessions(ctx.db, { userId: ctx.actor.userId, sessionId: body.all_sessions ? undefined : ctx.actor.sessionId }, ctx.now);
}
