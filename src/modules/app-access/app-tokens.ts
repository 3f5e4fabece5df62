import type { Ctx } from '../../context.js';
import { ApiError } from '../../errors.js';
import { newId } from '../../ids.js';
import { checkAccessForCaller } from '../../access/check.js';
import { accessEndsAt } from '../../access/resolve.js';
import { refusalFor } from '../applications/service.js';
import type { AppToken, AppTokenBody } from './schemas.js';

export const APP_TOKEN_SECONDS = 5 * 60;

/**
 * POST /v1/auth/app-tokens (User token): a 5-minute RS256 token for one Application, only while the
 * user's resolved access to it is active, the Application approved and its Tenant not suspended. The
 * Application verifies it locally, so it never outlives what it stands for: its exp is no later than
 * the end of the access it was issued on (the ends_at of the paths giving it) and of the session.
 */
export async function issueAppToken(ctx: Ctx, body: AppTokenBody): Promise<AppToken> {
  if (ctx.actor.type !== 'user') throw new ApiError('user_token_required');
  // The caller's session is confirmed in the same round trip as the access check (session: 'fused').
  const { ctx: confirmed, check } = await checkAccessForCaller(ctx, ctx.actor.userId, body.application_id);
  const { app, access } = check;
  if (!app || !access) throw new ApiError('application_not_found');
  try {
    if (app.review_status !== 'approved') throw new ApiError('application_not_available', { details: { review_status: app.review_status } });
    if (app.tenant_suspended) throw new ApiError('tenant_suspended');
    if (!access.allowed) throw new ApiError('entitlement_required', { details: { entitlement_status: access.entitlement_status } });
    if (body.organization_id) {
      const viaOrg = access.access_paths.some((p) => p.organization_id === body.organization_id && p.status === 'active' && p.member_decision === 'included');
      if (!viaOrg) throw new ApiError('entitlement_required', { message: 'No active access through that Organization.', details: { organization_id: body.organization_id } });
    }
  } catch (refusal) {
    // A caller who can neither see the Application nor holds a path to it learns nothing of it: 404.
    throw await refusalFor(confirmed, app.id, refusal);
  }
  const accessEnd = accessEndsAt(check.paths, ctx.actor.userId, app.id, ctx.now, body.organization_id);
  const sessionEnd = confirmed.actor.type === 'user' ? (confirmed.actor.sessionExpiresAt ?? null) : null;
  const { token, expiresIn } = await ctx.deps.keys.signUntil(
    {
      sub: ctx.actor.userId,
      sid: ctx.actor.sessionId,
      jti: newId('atk'),
      test_mode: ctx.mode === 'test',
      ...(body.organization_id ? { org_id: body.organization_id } : {}),
    },
    app.id,
    APP_TOKEN_SECONDS,
    earliest(accessEnd, sessionEnd),
  );
  return { token_type: 'Bearer', access_token: token, expires_in: expiresIn, application_id: app.id, organization_id: body.organization_id ?? null };
}

/** The earlier of two instants, null standing for never. */
export const earliest = (a: Date | null, b: Date | null): Date | null => (a && b ? (a < b ? a : b) : (a ?? b));
