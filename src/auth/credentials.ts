import type { Actor, Deps } from '../context.js';
import { ApiError } from '../errors.js';
import { hashSecret } from '../ids.js';
import { PLATFORM_AUDIENCE } from './signing-keys.js';
import { modeOf } from '../db/types.js';
import { USER_COLUMNS, type UserRow } from '../modules/users/store.js';

export const API_KEY_PREFIX = { live: 'plat_live_', test: 'plat_test_' } as const;
const LAST_USED_RESOLUTION_MS = 60_000;

/** 401 in the envelope with a WWW-Authenticate challenge (RFC 6750). */
export function unauthenticated(presented: boolean): ApiError {
  const challenge = presented
    ? 'Bearer realm="platform", error="invalid_token", error_description="The credential is invalid, expired or revoked."'
    : 'Bearer realm="platform"';
  return new ApiError('unauthenticated', {
    message: presented ? 'The credential is invalid, expired or revoked.' : 'A valid credential is required.',
    headers: { 'www-authenticate': challenge },
  });
}

export function bearerToken(header: string | undefined): string | null {
  if (!header) return null;
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
  if (!match) throw unauthenticated(true);
  return match[1];
}

/** Resolves a bearer to an actor with one indexed query; throws 401 for anything not currently valid. */
export const isApiKeySecret = (token: string) => token.startsWith(API_KEY_PREFIX.live) || token.startsWith(API_KEY_PREFIX.test);

export async function resolveBearer(deps: Deps, token: string): Promise<Actor> {
  if (isApiKeySecret(token)) return resolveApiKey(deps, token);
  return resolveAccessToken(deps, token);
}

interface KeyRow {
  id: string;
  scope: string;
  permissions: string[];
  test_mode: boolean;
  restrict_destructive: boolean;
  expires_at: Date | null;
  revoked_at: Date | null;
  last_used_at: Date | null;
}

async function resolveApiKey(deps: Deps, secret: string): Promise<Actor> {
  const { rows } = await deps.database
    .scoped('system')
    .query<KeyRow>(
      `SELECT id, scope, permissions, test_mode, restrict_destructive, expires_at, revoked_at, last_used_at
         FROM api_keys WHERE secret_hash = $1`,
      [hashSecret(secret)],
    );
  const key = rows[0];
  const now = deps.clock.now();
  if (!key || key.revoked_at || (key.expires_at && key.expires_at <= now)) throw unauthenticated(true);
  if (secret.startsWith(API_KEY_PREFIX.test) !== key.test_mode) throw unauthenticated(true);
  if (!key.last_used_at || now.getTime() - key.last_used_at.getTime() >= LAST_USED_RESOLUTION_MS) {
    // At most one write a minute per key, off the request's path; losing one is harmless.
    deps.database
      .scoped('system')
      .query(
        `UPDATE api_keys SET last_used_at = $2
          WHERE id = $1 AND (last_used_at IS NULL OR last_used_at <= $2::timestamptz - interval '1 minute')`,
        [key.id, now],
      )
      .catch((err) => deps.log.warn({ err }, 'api key last_used_at update failed'));
  }
  return {
    type: 'api_key',
    keyId: key.id,
    scope: key.scope,
    mode: modeOf(key.test_mode),
    permissions: new Set(key.permissions),
    restrictDestructive: key.restrict_destructive,
  };
}

export interface SessionRow extends UserRow {
  user_id: string;
  session_test_mode: boolean;
  expires_at: Date;
  revoked_at: Date | null;
  permissions: string[];
}

export interface AccessTokenClaims {
  sub: string;
  sid: string;
  test_mode: boolean;
}

/** A platform access token's signature, issuer, audience and expiry, without its session (no query). */
export async function verifyAccessTokenClaims(deps: Deps, token: string): Promise<AccessTokenClaims> {
  const claims = await deps.keys.verify(token, PLATFORM_AUDIENCE);
  if (!claims || typeof claims.sid !== 'string' || typeof claims.sub !== 'string') throw unauthenticated(true);
  return { sub: claims.sub, sid: claims.sid, test_mode: claims.test_mode === true };
}

/**
 * The session of an access token, its user and the user's platform permissions, as one SELECT with the
 * session id as parameter `$n` (a route may embed it in its own query to authenticate in the same
 * round trip). A revoked session fails at once; a Role change applies on the next request.
 */
export const SESSION_SQL = (n: number) => `
     SELECT s.user_id, s.test_mode AS session_test_mode, s.expires_at, s.revoked_at, ${USER_COLUMNS},
            COALESCE((SELECT array_agg(DISTINCT p) FROM role_assignments ra
                        JOIN roles r ON r.id = ra.role_id AND r.scope = 'platform'
                        CROSS JOIN LATERAL unnest(r.permissions) AS p
                       WHERE ra.user_id = s.user_id), '{}') AS permissions
       FROM sessions s JOIN users u ON u.id = s.user_id
      WHERE s.id = $${n}`;

async function resolveAccessToken(deps: Deps, token: string): Promise<Actor> {
  return confirmSession(deps, await verifyAccessTokenClaims(deps, token));
}

/** The user actor of verified claims once its session is read; 401 unless it is live. */
export async function confirmSession(deps: Deps, claims: AccessTokenClaims): Promise<Actor> {
  const { rows } = await deps.database.scoped('system').query<SessionRow>(SESSION_SQL(1), [claims.sid]);
  return actorOfSession(claims, rows[0], deps.clock.now());
}

/** The user actor of a verified token and its session row; 401 unless the session is live and the user active. */
export function actorOfSession(claims: AccessTokenClaims, session: SessionRow | undefined, now: Date): Actor {
  if (
    !session ||
    session.user_id !== claims.sub ||
    session.revoked_at ||
    session.expires_at <= now ||
    session.status !== 'active' ||
    session.session_test_mode !== claims.test_mode
  ) {
    throw unauthenticated(true);
  }
  return {
    type: 'user',
    userId: session.user_id,
    sessionId: claims.sid,
    mode: modeOf(session.session_test_mode),
    permissions: new Set(session.permissions),
    user: session,
    sessionExpiresAt: session.expires_at,
  };
}
