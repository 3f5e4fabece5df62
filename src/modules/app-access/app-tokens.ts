import type { Ctx } from '../../context.js';
import { ApiError } from '../../errors.js';
import { newId } from '../../ids.js';
import { checkAccessForCaller } from '../../access/check.js';
import type { AppToken, AppTokenBody } from './schemas.js';

export const APP_TOKEN_SECONDS = 5 * 60;

/**
 * POST /v1/auth/app-tokens (User token): a 5-minute RS256 token for one Application, only while the
 * user's resolved access to it is active, the Application approved and its Tenant not suspended.
 */
export async function issueAppToken(ctx: Ctx, body: AppTokenBody): Promise<AppToken> {
  if (ctx.actor.type !== 'user') throw new ApiError('user_token_required');
  // The caller's session is confirmed in the same round trip as the access check (session: 'fused').
  const { app, access } = (await checkAccessForCaller(ctx, ctx.actor.userId, body.application_id)).check;
  if (!app || !access) throw new ApiError('application_not_found');
  if (app.review_status !== 'approved') throw new ApiError('application_not_available', { details: { review_status: app.review_status } });
  if (app.tenant_suspended) throw new ApiError('tenant_suspended');
  if (!access.allowed) throw new ApiError('entitlement_required', { details: { entitlement_status: access.entitlement_status } });
  if (body.organization_id) {
    const viaOrg = access.access_paths.some((p) => p.organization_id === body.organization_id && p.status === 'active' && p.member_decision === 'included');
    if (!viaOrg) throw new ApiError('entitlement_required', { message: 'No active access through that Organization.', details: { organization_id: body.organization_id } });
  }
  const token = await ctx.deps.keys.sign(
    {
      sub: ctx.actor.userId,
      sid: ctx.actor.sessionId,
      jti: newId('atk'),
      test_mode: ctx.mode === 'test',
      ...(body.organization_id ? { org_id: body.organization_id } : {}),
    },
    app.id,
    APP_TOKEN_SECONDS,
  );
  return { token_type: 'Bearer', access_token: token, expires_in: APP_TOKEN_SECONDS, application_id: app.id, organization_id: body.organization_id ?? null };
}
