import type { Queryable } from '../../db/types.js';
import { SESSION_LIVE_SQL } from '../sessions/store.js';
import type { AuthMethod } from './store.js';

/** A refresh token rotated: the used one and its session's user. */
export interface RotatedRow {
  id: string;
  session_id: string;
  user_id: string;
  test_mode: boolean;
  amr: AuthMethod[];
  session_expires_at: Date;
  email_verified: boolean;
}

/** A refresh token as found, with its session and user. */
export interface TokenRow {
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
 * The rotation, one statement (one round trip, atomic on its own): marks the token used if it is
 * unused and its session live, and inserts its successor; no row when it was not rotated.
 */
export async function rotateRefreshToken(
  db: Queryable, tokenHash: string, now: Date, successorId: string, successorHash: string, idleExpiresAt: Date,
): Promise<RotatedRow | undefined> {
  const { rows } = await db.query<RotatedRow>(
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
    [tokenHash, now, successorId, successorHash, idleExpiresAt],
  );
  return rows[0];
}

export async function findRefreshToken(db: Queryable, tokenHash: string): Promise<TokenRow | undefined> {
  const { rows } = await db.query<TokenRow>(
    `SELECT t.id, t.session_id, t.used_at, t.idle_expires_at, s.user_id, s.test_mode, s.amr,
            s.expires_at AS session_expires_at, s.revoked_at AS session_revoked_at, u.status, u.email_verified
       FROM refresh_tokens t JOIN sessions s ON s.id = t.session_id JOIN users u ON u.id = s.user_id
      WHERE t.token_hash = $1`,
    [tokenHash],
  );
  return rows[0];
}

/** Locks the session row as a write to it does (FOR NO KEY UPDATE). */
export async function lockSession(db: Queryable, sessionId: string): Promise<void> {
  await db.query('SELECT 1 FROM sessions WHERE id = $1 FOR NO KEY UPDATE', [sessionId]);
}

/** Revokes the session while it is live (SESSION_LIVE_SQL); the number revoked (0 or 1). */
export async function revokeLiveSession(db: Queryable, sessionId: string, now: Date): Promise<number> {
  const { rowCount } = await db.query(`UPDATE sessions s SET revoked_at = $2 WHERE id = $1 AND ${SESSION_LIVE_SQL('s', '$2')}`, [sessionId, now]);
  return rowCount;
}

/** Whether the reuse of this refresh token was audited already: 1 if so, else 0. */
export async function countReuseAudits(db: Queryable, sessionId: string, refreshTokenId: string): Promise<number> {
  const { rowCount } = await db.query(
    `SELECT 1 FROM audit_events WHERE action = 'session.refresh_token_reused' AND target_id = $1 AND after->>'refresh_token_id' = $2 LIMIT 1`,
    [sessionId, refreshTokenId],
  );
  return rowCount;
}
