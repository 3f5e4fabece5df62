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
export async function resolveBearer(deps: Deps, token: string): Promise<Actor> {
  if (token.startsWith(API_KEY_PREFIX.live) || token.startsWith(API_KEY_PREFIX.test)) return resolveApiKey(deps, token);
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

interface SessionRow extends UserRow {
  user_id: string;
  session_test_mode: boolean;
  expires_at: Date;
  revoked_at: Date | null;
  permissions: string[];
}

async function resolveAccessToken(deps: Deps, token: string): Promise<Actor> {
  const claims = await deps.keys.verify(token, PLATFORM_AUDIENCE);
  if (!claims || typeof claims.sid !== 'string' || typeof claims.sub !== 'string') throw unauthenticated(true);
  // Session state and platform permissions in one query: a revoked session fails at once, and a
  // Role change applies on the next request (tokens carry no permissions).
  const { rows } = await deps.database.scoped('system').query<SessionRow>(
    `SELECT s.user_id, s.test_mode AS session_test_mode, s.expires_at, s.revoked_at, ${USER_COLUMNS},
            COALESCE((SELECT array_agg(DISTINCT p) FROM role_assignments ra
                        JOIN roles r ON r.id = ra.role_id AND r.scope = 'platform'
                        CROSS JOIN LATERAL unnest(r.permissions) AS p
                       WHERE ra.user_id = s.user_id), '{}') AS permissions
       FROM sessions s JOIN users u ON u.id = s.user_id
      WHERE s.id = $1`,
    [claims.sid],
  );
  const session = rows[0];
  const now = deps.clock.now();
  if (
    !session ||
    session.user_id !== claims.sub ||
    session.revoked_at ||
    session.expires_at <= now ||
    session.status !== 'active' ||
    session.session_test_mode !== (claims.test_mode === true)
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
  };
}
