import type { Queryable } from '../../db/types.js';
import { newId } from '../../ids.js';
import { SESSION_IN_USE_SQL } from '../sessions/store.js';

export interface SigninApp {
  id: string;
  name: string;
  icon_url: string | null;
  redirect_uris: string[];
  review_status: string;
  test_mode: boolean;
  tenant_suspended: boolean;
}

/** What the page shows and checks of an Application (the table is not moded: any scope reads it). */
export async function findSigninApp(db: Queryable, id: string): Promise<SigninApp | null> {
  const { rows } = await db.query<SigninApp>(
    `SELECT a.id, a.name, a.icon_url, a.redirect_uris, a.review_status, a.test_mode, COALESCE(t.suspended, false) AS tenant_suspended
       FROM applications a LEFT JOIN tenants t ON t.id = a.tenant_id
      WHERE a.id = $1`,
    [id],
  );
  return rows[0] ?? null;
}

export interface BrowserSession {
  session_id: string;
  user_id: string;
  email: string;
  expires_at: Date;
}

/**
 * The platform session a browser signed in with, while it lasts: not revoked, not expired, not idled
 * out (no token of it used in 30 days), its user active. Read on a mode-scoped connection, so a live page never sees a test session and vice versa.
 */
export async function findBrowserSession(db: Queryable, cookieHash: string, now: Date): Promise<BrowserSession | null> {
  const { rows } = await db.query<BrowserSession>(
    `SELECT b.session_id, s.user_id, u.email, s.expires_at
       FROM signin_browser_sessions b
       JOIN sessions s ON s.id = b.session_id
       JOIN users u ON u.id = s.user_id
      WHERE b.cookie_hash = $1 AND s.revoked_at IS NULL AND s.expires_at > $2 AND ${SESSION_IN_USE_SQL('s', '$2')} AND u.status = 'active'`,
    [cookieHash, now],
  );
  return rows[0] ?? null;
}

export async function insertBrowserSession(db: Queryable, cookieHash: string, sessionId: string, now: Date): Promise<void> {
  await db.query('INSERT INTO signin_browser_sessions (id, cookie_hash, session_id, created_at) VALUES ($1, $2, $3, $4)', [
    newId('idn'), cookieHash, sessionId, now,
  ]);
}

/** Forgets a browser's previous sign-in (the platform session itself stays: apps may hold tokens of it). */
export async function deleteBrowserSession(db: Queryable, cookieHash: string): Promise<void> {
  await db.query('DELETE FROM signin_browser_sessions WHERE cookie_hash = $1', [cookieHash]);
}
