import { createHash } from 'node:crypto';
import type { Ctx } from '../../context.js';
import { inTx } from '../../context.js';
import { modeOf, type Tx } from '../../db/types.js';
import { ApiError } from '../../errors.js';
import { newId } from '../../ids.js';
import { recordAudit } from '../../audit/record.js';
import { APP_TOKEN_SECONDS, earliest } from '../app-access/app-tokens.js';
import { assertAppAccess } from './access.js';
import {
  applicationExists, consumeCode, findAppRefreshToken, findCode, insertAppRefreshToken, lockGrant, lockLiveSession, revokeGrant, useAppRefreshToken,
} from './store.js';
import { OAuthError, type TokenBody, type TokenResponse } from './schemas.js';

const VERIFIER = /^[A-Za-z0-9\-._~]{43,128}$/;

/** POST /v1/auth/oauth/token: the public-client exchanges. Every failure is an OAuthError. */
export async function exchangeToken(baseCtx: Ctx, body: TokenBody): Promise<TokenResponse> {
  const grantType = param(body, 'grant_type');
  if (grantType === 'authorization_code') return exchangeCode(baseCtx, body);
  if (grantType === 'refresh_token') return exchangeRefreshToken(baseCtx, body);
  // Not echoed: error_description allows only printable ASCII without " and \ (RFC 6749 §5.2).
  throw new OAuthError('unsupported_grant_type', 'This grant_type is not supported; use authorization_code or refresh_token.');
}

function param(body: TokenBody, name: string): string {
  const value = body[name];
  if (value === undefined || value === null || value === '') throw new OAuthError('invalid_request', `${name} is required.`);
  if (typeof value !== 'string') throw new OAuthError('invalid_request', `${name} must be a string.`);
  return value;
}

/** A known client_id that is not the grant's Application is invalid_grant; an unknown one invalid_client. */
async function checkClient(ctx: Ctx, clientId: string, boundTo: string | null): Promise<void> {
  if (clientId === boundTo) return;
  if (!(await applicationExists(ctx.db, clientId))) throw new OAuthError('invalid_client', 'Unknown client_id.');
  if (boundTo !== null) throw new OAuthError('invalid_grant', 'The grant was issued to another client.');
}

async function exchangeCode(baseCtx: Ctx, body: TokenBody): Promise<TokenResponse> {
  const code = param(body, 'code');
  const verifier = param(body, 'code_verifier');
  const redirectUri = param(body, 'redirect_uri');
  const clientId = param(body, 'client_id');
  if (!VERIFIER.test(verifier)) throw new OAuthError('invalid_request', 'code_verifier must be 43-128 characters of [A-Za-z0-9-._~].');

  const row = await findCode(baseCtx.deps.database.scoped('system'), code);
  if (!row) {
    await checkClient(baseCtx, clientId, null);
    throw new OAuthError('invalid_grant', 'The authorization code is invalid.');
  }
  const ctx = modeCtx(baseCtx, row.test_mode);
  if (row.used_at) {
    // Revoked whoever presents it (as a refresh token replay); the answer is about the request as sent.
    await revokeForReplay(ctx, row, row.id, 'oauth.authorization_code_reused');
    await checkClient(ctx, clientId, row.application_id);
    throw new OAuthError('invalid_grant', 'The authorization code was already used; tokens issued from it are revoked.');
  }
  await checkClient(ctx, clientId, row.application_id);
  if (row.expires_at <= ctx.now) throw new OAuthError('invalid_grant', 'The authorization code has expired.');
  if (redirectUri !== row.redirect_uri) throw new OAuthError('invalid_grant', 'redirect_uri does not match the authorization request.');
  if (createHash('sha256').update(verifier).digest('base64url') !== row.code_challenge) {
    throw new OAuthError('invalid_grant', 'code_verifier does not match the code_challenge.');
  }
  assertSessionActive(row, ctx.now);
  const accessEnd = await recheckAccess(ctx, row.user_id, row.application_id);

  const issued = await ctx.db.transaction(async (tx) => {
    if (!(await lockLiveSession(tx, row.session_id, ctx.now))) return SESSION_ENDED; // ended since it was read
    if (!(await consumeCode(tx, row.id, ctx.now))) return null; // lost the race: another exchange used it first
    return issueTokens(tx, ctx, { ...row, codeId: row.id, parentId: null, accessEnd });
  });
  if (issued === SESSION_ENDED) throw sessionEnded();
  if (issued) return issued;
  await revokeForReplay(ctx, row, row.id, 'oauth.authorization_code_reused');
  throw new OAuthError('invalid_grant', 'The authorization code was already used; tokens issued from it are revoked.');
}

async function exchangeRefreshToken(baseCtx: Ctx, body: TokenBody): Promise<TokenResponse> {
  const presented = param(body, 'refresh_token');
  const clientId = param(body, 'client_id');
  const row = await findAppRefreshToken(baseCtx.deps.database.scoped('system'), presented);
  if (!row) {
    await checkClient(baseCtx, clientId, null);
    throw new OAuthError('invalid_grant', 'The refresh token is invalid.');
  }
  const ctx = modeCtx(baseCtx, row.test_mode);
  // A used token presented again ends its grant whoever presents it (RFC 9700 §4.14.2), client_id or not.
  if (row.used_at && !row.revoked_at) {
    await revokeForReplay(ctx, row, row.authorization_code_id, 'oauth.refresh_token_reused');
  }
  await checkClient(ctx, clientId, row.application_id);
  if (row.used_at || row.revoked_at) throw new OAuthError('invalid_grant', 'The refresh token was already used or is revoked.');
  if (row.idle_expires_at <= ctx.now) throw new OAuthError('invalid_grant', 'The refresh token has expired.');
  assertSessionActive(row, ctx.now);
  const accessEnd = await recheckAccess(ctx, row.user_id, row.application_id);

  const issued = await ctx.db.transaction(async (tx) => {
    if (!(await lockLiveSession(tx, row.session_id, ctx.now))) return SESSION_ENDED;
    await lockGrant(tx, row.authorization_code_id); // a concurrent replay revokes what this issues
    if (!(await useAppRefreshToken(tx, row.id, ctx.now))) return null;
    return issueTokens(tx, ctx, { ...row, codeId: row.authorization_code_id, parentId: row.id, accessEnd });
  });
  if (issued === SESSION_ENDED) throw sessionEnded();
  if (issued) return issued;
  await revokeForReplay(ctx, row, row.authorization_code_id, 'oauth.refresh_token_reused');
  throw new OAuthError('invalid_grant', 'The refresh token was already used or is revoked.');
}

const modeCtx = (baseCtx: Ctx, testMode: boolean): Ctx => {
  const mode = modeOf(testMode);
  return { ...baseCtx, mode, db: baseCtx.deps.database.scoped(mode) };
};

const SESSION_ENDED = 'session_ended' as const;
const sessionEnded = () => new OAuthError('invalid_grant', 'The sign-in session has ended.');

function assertSessionActive(row: { session_revoked_at: Date | null; session_expires_at: Date }, now: Date): void {
  if (row.session_revoked_at || row.session_expires_at <= now) throw sessionEnded();
}

/** Access is re-checked on every exchange; any refusal of the app-tokens rule is invalid_grant. Returns when the access ends. */
async function recheckAccess(ctx: Ctx, userId: string, appId: string): Promise<Date | null> {
  try {
    return await assertAppAccess(ctx.db, userId, appId, ctx.now);
  } catch (err) {
    if (err instanceof ApiError) throw new OAuthError('invalid_grant', `${err.code}: ${err.message}`);
    throw err;
  }
}

interface Grant {
  application_id: string;
  session_id: string;
  user_id: string;
  test_mode: boolean;
  session_expires_at: Date;
  codeId: string;
  parentId: string | null;
  /** When the access the tokens are issued on ends with time alone (null: never). */
  accessEnd: Date | null;
}

/**
 * The app token has the claims of POST /v1/auth/app-tokens (aud = the Application, 5 minutes, never
 * past the access's end or the session's).
 */
async function issueTokens(tx: Tx, ctx: Ctx, g: Grant): Promise<TokenResponse> {
  const refresh = await insertAppRefreshToken(tx, {
    applicationId: g.application_id, sessionId: g.session_id, codeId: g.codeId, parentId: g.parentId,
    testMode: g.test_mode, sessionExpiresAt: g.session_expires_at, now: ctx.now,
  });
  const { token: accessToken, expiresIn } = await ctx.deps.keys.signUntil(
    { sub: g.user_id, sid: g.session_id, jti: newId('atk'), test_mode: g.test_mode },
    g.application_id,
    APP_TOKEN_SECONDS,
    earliest(g.accessEnd, g.session_expires_at),
  );
  return {
    access_token: accessToken, token_type: 'Bearer', expires_in: expiresIn, refresh_token: refresh.token, refresh_token_expires_in: refresh.expiresIn,
    application_id: g.application_id, organization_id: null,
  };
}

/**
 * RFC 6749 §4.1.2 / RFC 9700 §4.14.2: a replay revokes every token issued from that code, audited once,
 * as an event of the grant's Application (its own audit.view key and its Tenant owner see it).
 */
async function revokeForReplay(ctx: Ctx, grant: { user_id: string; application_id: string }, codeId: string, action: string): Promise<void> {
  await ctx.db.transaction(async (tx) => {
    const revoked = await revokeGrant(tx, codeId, ctx.now);
    if (revoked > 0) {
      await recordAudit(tx, inTx(ctx, tx), {
        action,
        target: { type: 'user', id: grant.user_id },
        targetUserId: grant.user_id,
        applicationId: grant.application_id,
        after: { authorization_code_id: codeId, revoked_refresh_tokens: revoked },
        actor: { type: 'system', id: null },
      });
    }
  });
}
