import type { Queryable, Tx } from '../../db/types.js';
import { addSeconds } from '../../clock.js';
import { hashSecret, newId, newSecret } from '../../ids.js';

export const CODE_SECONDS = 60;
export const APP_REFRESH_IDLE_SECONDS = 30 * 24 * 3600;

export interface CodeRow {
  id: string;
  application_id: string;
  user_id: string;
  session_id: string;
  test_mode: boolean;
  redirect_uri: string;
  code_challenge: string;
  expires_at: Date;
  used_at: Date | null;
  session_expires_at: Date;
  session_revoked_at: Date | null;
}

export interface RefreshRow {
  id: string;
  application_id: string;
  session_id: string;
  authorization_code_id: string;
  test_mode: boolean;
  idle_expires_at: Date;
  used_at: Date | null;
  revoked_at: Date | null;
  user_id: string;
  session_expires_at: Date;
  session_revoked_at: Date | null;
}

export async function insertCode(
  tx: Tx,
  c: { applicationId: string; userId: string; sessionId: string; testMode: boolean; redirectUri: string; codeChallenge: string; now: Date },
): Promise<string> {
  const code = newSecret('oac_');
  await tx.query(
    `INSERT INTO oauth_authorization_codes (id, code_hash, application_id, user_id, session_id, test_mode, redirect_uri, code_challenge, created_at, expires_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
    [newId('idn'), hashSecret(code), c.applicationId, c.userId, c.sessionId, c.testMode, c.redirectUri, c.codeChallenge, c.now, addSeconds(c.now, CODE_SECONDS)],
  );
  return code;
}

/** Looked up on the system connection: the token endpoint learns the mode from the code. */
export async function findCode(db: Queryable, code: string): Promise<CodeRow | null> {
  const { rows } = await db.query<CodeRow>(
    `SELECT c.id, c.application_id, c.user_id, c.session_id, c.test_mode, c.redirect_uri, c.code_challenge, c.expires_at, c.used_at,
            s.expires_at AS session_expires_at, s.revoked_at AS session_revoked_at
       FROM oauth_authorization_codes c JOIN sessions s ON s.id = c.session_id
      WHERE c.code_hash = $1`,
    [hashSecret(code)],
  );
  return rows[0] ?? null;
}

/**
 * The grant's session, share-locked until the exchange commits, or false once it has ended: a logout,
 * suspension or password reset (which revoke sessions) either commits first and is seen here, or waits
 * for the exchange and then revokes what it issued. Nothing is issued on a session that has ended.
 */
export async function lockLiveSession(tx: Tx, sessionId: string, now: Date): Promise<boolean> {
  const { rows } = await tx.query('SELECT 1 FROM sessions WHERE id = $1 AND revoked_at IS NULL AND expires_at > $2 FOR SHARE', [sessionId, now]);
  return rows.length === 1;
}

/** Uses a code up atomically: of two concurrent exchanges exactly one wins. */
export async function consumeCode(tx: Tx, id: string, now: Date): Promise<boolean> {
  const { rowCount } = await tx.query('UPDATE oauth_authorization_codes SET used_at = $2 WHERE id = $1 AND used_at IS NULL', [id, now]);
  return rowCount === 1;
}

/** An app refresh token idles out after 30 days and never outlives its session. */
export async function insertAppRefreshToken(
  tx: Tx,
  r: { applicationId: string; sessionId: string; codeId: string; parentId: string | null; testMode: boolean; sessionExpiresAt: Date; now: Date },
): Promise<{ token: string; expiresIn: number }> {
  const token = newSecret('rtk_');
  const idle = addSeconds(r.now, APP_REFRESH_IDLE_SECONDS);
  const expiresAt = idle < r.sessionExpiresAt ? idle : r.sessionExpiresAt;
  await tx.query(
    `INSERT INTO oauth_refresh_tokens (id, token_hash, application_id, session_id, authorization_code_id, parent_id, test_mode, created_at, idle_expires_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
    [newId('rtk'), hashSecret(token), r.applicationId, r.sessionId, r.codeId, r.parentId, r.testMode, r.now, expiresAt],
  );
  return { token, expiresIn: Math.max(0, Math.floor((expiresAt.getTime() - r.now.getTime()) / 1000)) };
}

export async function findAppRefreshToken(db: Queryable, token: string): Promise<RefreshRow | null> {
  const { rows } = await db.query<RefreshRow>(
    `SELECT t.id, t.application_id, t.session_id, t.authorization_code_id, t.test_mode, t.idle_expires_at, t.used_at, t.revoked_at,
            s.user_id, s.expires_at AS session_expires_at, s.revoked_at AS session_revoked_at
       FROM oauth_refresh_tokens t JOIN sessions s ON s.id = t.session_id
      WHERE t.token_hash = $1`,
    [hashSecret(token)],
  );
  return rows[0] ?? null;
}

/** Marks a live token used; false when another request used (or a replay revoked) it first. */
export async function useAppRefreshToken(tx: Tx, id: string, now: Date): Promise<boolean> {
  const { rowCount } = await tx.query('UPDATE oauth_refresh_tokens SET used_at = $2 WHERE id = $1 AND used_at IS NULL AND revoked_at IS NULL', [id, now]);
  return rowCount === 1;
}

/**
 * A rotation's hold on its grant (the code row, FOR KEY SHARE), taken before the token is used: a
 * replay's revokeGrant waits for the rotation to commit and then revokes what it issued too.
 */
export async function lockGrant(tx: Tx, codeId: string): Promise<void> {
  await tx.query('SELECT 1 FROM oauth_authorization_codes WHERE id = $1 FOR KEY SHARE', [codeId]);
}

/**
 * Revokes every app refresh token issued from one authorization code; returns how many it marked
 * revoked (the grant's already-rotated tokens included: they were not revoked before).
 * The code row is locked first, so a rotation of the grant under way (lockGrant) commits before the
 * update reads the tokens: without it, the token that rotation inserts is not in the update's
 * snapshot and would outlive the replay.
 */
export async function revokeGrant(tx: Tx, codeId: string, now: Date): Promise<number> {
  await tx.query('SELECT 1 FROM oauth_authorization_codes WHERE id = $1 FOR UPDATE', [codeId]);
  const { rowCount } = await tx.query('UPDATE oauth_refresh_tokens SET revoked_at = $2 WHERE authorization_code_id = $1 AND revoked_at IS NULL', [codeId, now]);
  return rowCount ?? 0;
}

export async function applicationExists(db: Queryable, id: string): Promise<boolean> {
  const { rows } = await db.query('SELECT 1 FROM applications WHERE id = $1', [id]);
  return rows.length > 0;
}
