import type { Queryable } from '../../db/types.js';
import { keyset, type PageParams } from '../../http/pagination.js';

export interface SessionRow {
  id: string;
  user_id: string;
  created_at: Date;
  expires_at: Date;
  ip_address: string | null;
  user_agent: string | null;
}

/** Active sessions of a user, newest first, keyset-paginated. */
export async function listActiveSessions(db: Queryable, userId: string, now: Date, page: PageParams) {
  const ks = keyset(page, 3);
  const { rows } = await db.query<SessionRow>(
    `SELECT id, user_id, created_at, expires_at, ip_address, user_agent FROM sessions
      WHERE user_id = $1 AND revoked_at IS NULL AND expires_at > $2 AND ${ks.condition}
      ${ks.orderLimit}`,
    [userId, now, ...ks.params],
  );
  return { rows, limit: ks.limit };
}

/** Revokes sessions (and with them every refresh token); returns the ids revoked. */
export async function revokeSessions(db: Queryable, where: { userId: string; sessionId?: string }, now: Date): Promise<string[]> {
  const { rows } = await db.query<{ id: string }>(
    `UPDATE sessions SET revoked_at = $2 WHERE user_id = $1 AND revoked_at IS NULL ${where.sessionId ? 'AND id = $3' : ''} RETURNING id`,
    where.sessionId ? [where.userId, now, where.sessionId] : [where.userId, now],
  );
  return rows.map((r) => r.id);
}
