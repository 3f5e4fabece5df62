import type { KeysetSql, Queryable } from '../../db/types.js';

export interface SessionRow {
  id: string;
  user_id: string;
  created_at: Date;
  expires_at: Date;
  ip_address: string | null;
  user_agent: string | null;
}

/**
 * A session idles out with its tokens: it is in use while one of its refresh tokens (the platform's,
 * or an Application's from the hosted flow) is unused and inside its 30 idle days. `s` is the sessions
 * alias, `now` the parameter holding the instant. Revocation and the 90-day end are checked apart.
 */
export const SESSION_IN_USE_SQL = (s: string, now: string) => `(
  EXISTS (SELECT 1 FROM refresh_tokens r WHERE r.session_id = ${s}.id AND r.used_at IS NULL AND r.idle_expires_at > ${now})
  OR EXISTS (SELECT 1 FROM oauth_refresh_tokens o WHERE o.session_id = ${s}.id AND o.used_at IS NULL AND o.revoked_at IS NULL AND o.idle_expires_at > ${now}))`;

/**
 * The session `s` is live at `now`: not revoked, inside its 90 days and in use (SESSION_IN_USE_SQL);
 * what the list shows and what a revocation can still end.
 */
export const SESSION_LIVE_SQL = (s: string, now: string) => `(${s}.revoked_at IS NULL AND ${s}.expires_at > ${now} AND ${SESSION_IN_USE_SQL(s, now)})`;

/**
 * Active sessions of a user (not revoked, not past 90 days, not idled out), newest first, one keyset
 * page: `ks` numbered from $3.
 */
export async function listActiveSessions(db: Queryable, userId: string, now: Date, ks: KeysetSql): Promise<SessionRow[]> {
  const { rows } = await db.query<SessionRow>(
    `SELECT id, user_id, created_at, expires_at, ip_address, user_agent FROM sessions s
      WHERE user_id = $1 AND ${SESSION_LIVE_SQL('s', '$2')} AND ${ks.condition}
      ${ks.orderLimit}`,
    [userId, now, ...ks.params],
  );
  return rows;
}

/**
 * Revokes sessions (and with them every refresh token); returns the ids revoked. One session
 * (`sessionId`) is revoked only while it is active, as the list shows them: one that ended by itself
 * (its 90 days, or idled out) is no more to revoke than a revoked one.
 */
export async function revokeSessions(db: Queryable, where: { userId: string; sessionId?: string }, now: Date): Promise<string[]> {
  const { rows } = await db.query<{ id: string }>(
    `UPDATE sessions s SET revoked_at = $2
      WHERE user_id = $1 AND ${where.sessionId ? `id = $3 AND ${SESSION_LIVE_SQL('s', '$2')}` : 'revoked_at IS NULL'} RETURNING id`,
    where.sessionId ? [where.userId, now, where.sessionId] : [where.userId, now],
  );
  return rows.map((r) => r.id);
}
