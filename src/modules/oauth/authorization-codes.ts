import type { Ctx } from '../../context.js';
import { ApiError, invalidField } from '../../errors.js';
import { findApplicationRow } from '../applications/store.js';
import { refusalFor } from '../applications/service.js';
import { assertAppAccess } from './access.js';
import { CODE_SECONDS, insertCode } from './store.js';
import { withResponseParams } from './redirect.js';
import type { AuthorizationCode, AuthorizationCodeBody } from './schemas.js';

const invalidRedirect = (message: string) =>
  invalidField('redirect_uri', message);

/**
 * POST /v1/auth/oauth/authorization-codes (Part A Rule 8), called by the hosted sign-in page for the
 * signed-in user. The code is single use, lives 60 seconds, is stored hashed and is bound to the
 * Application, the exact redirect_uri, the PKCE challenge and the caller's session.
 */
export async function issueAuthorizationCode(ctx: Ctx, body: AuthorizationCodeBody): Promise<AuthorizationCode> {
  if (ctx.actor.type !== 'user') throw new ApiError('user_token_required');
  const { userId, sessionId } = ctx.actor;
  const app = await findApplicationRow(ctx.db, body.application_id);
  if (!app) throw new ApiError('application_not_found');
  try {
    if (app.redirect_uris.length === 0) throw invalidRedirect('the Application has no registered redirect_uris');
    if (!app.redirect_uris.includes(body.redirect_uri)) throw invalidRedirect('must exactly match one of the Application\'s redirect_uris');
    await assertAppAccess(ctx.db, userId, app.id, ctx.now);
  } catch (refusal) {
    // A caller who can neither see the Application nor holds a path to it learns nothing of it: 404.
    throw await refusalFor(ctx, app.id, refusal);
  }

  const code = await ctx.db.transaction((tx) =>
    insertCode(tx, {
      applicationId: app.id,
      userId,
      sessionId,
      testMode: ctx.mode === 'test',
      redirectUri: body.redirect_uri,
      codeChallenge: body.code_challenge,
      now: ctx.now,
    }),
  );
  // RFC 9207: the client checks that the answer comes from the server it sent the user to (iss).
  const redirectTo = withResponseParams(body.redirect_uri, { code, state: body.state, iss: ctx.deps.config.publicUrl });
  return { code, expires_in: CODE_SECONDS, redirect_to: redirectTo };
}
