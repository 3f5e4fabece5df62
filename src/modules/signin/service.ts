import type { Ctx } from '../../context.js';
import { modeOf } from '../../db/types.js';
import { ApiError } from '../../errors.js';
import { hashSecret } from '../../ids.js';
import { peekOneTimeToken } from '../../auth/one-time-tokens.js';
import { findUserById } from '../users/store.js';
import { login, verifyMfa } from '../auth/login.js';
import { issueAuthorizationCode } from '../oauth/authorization-codes.js';
import { errorRedirect, resolveAuthorizationRequest, type AuthorizationRequest } from './params.js';
import { deleteBrowserSession, findBrowserSession, insertBrowserSession, type BrowserSession } from './store.js';
import { newBrowserSecret } from './browser.js';
import type { AuthorizationQuery, SigninForm } from './schemas.js';

/** A checked authorization request and a ctx in its Application's mode (a test app signs in test users). */
export interface Page extends AuthorizationRequest {
  ctx: Ctx;
}

/** What the page answers; routes turn it into HTML or the redirect. */
export type Outcome =
  | { view: 'password'; status: number; message?: string; email?: string; signedInAs?: string; headers?: Record<string, string> }
  | { view: 'mfa'; status: number; mfaToken: string; email: string; message?: string; recovery?: boolean; headers?: Record<string, string> }
  | { view: 'denied'; status: 403; email: string; returnTo: string }
  | { view: 'redirect'; location: string };

export interface Result {
  page: Page;
  outcome: Outcome;
  /** Set when this request signed the browser in: the new cookie secret and how long it lasts. */
  signedIn?: { secret: string; expiresAt: Date };
}

/** Sign-in errors the user can act on; they re-render the form with the API's message and status. */
const RECOVERABLE = new Set(['invalid_credentials', 'account_suspended', 'too_many_attempts', 'service_unavailable']);
const MFA_EXPIRED = 'The MFA token is invalid or expired.';

async function openPage(baseCtx: Ctx, params: AuthorizationQuery): Promise<Page> {
  const checked = await resolveAuthorizationRequest(baseCtx.db, params);
  const mode = modeOf(checked.app.test_mode);
  return { ...checked, ctx: { ...baseCtx, mode, db: baseCtx.deps.database.scoped(mode) } };
}

/** GET /signin: the form, offering "Continue as" when this browser is still signed in. */
export async function showSignin(baseCtx: Ctx, params: AuthorizationQuery, secret: string | null): Promise<Result> {
  const page = await openPage(baseCtx, params);
  const current = secret ? await findBrowserSession(page.ctx.db, hashSecret(secret), page.ctx.now) : null;
  return { page, outcome: { view: 'password', status: 200, signedInAs: current?.email } };
}

/** POST /signin: email and password, exactly as POST /v1/auth/login (lockout, messages, MFA challenge). */
export async function signInWithPassword(baseCtx: Ctx, form: SigninForm, secret: string | null): Promise<Result> {
  const page = await openPage(baseCtx, form);
  const email = (form.email ?? '').trim();
  if (!email || !form.password) return { page, outcome: { view: 'password', status: 422, message: 'Enter your email and password.', email } };
  try {
    const result = await login(page.ctx, { email, password: form.password, test_mode: page.app.test_mode });
    if ('mfa_required' in result) {
      const account = await challengeEmail(page, result.mfa_token);
      return { page, outcome: { view: 'mfa', status: 200, mfaToken: result.mfa_token, email: account ?? email } };
    }
    return await completeSignin(page, result.session_id, secret);
  } catch (err) {
    if (err instanceof ApiError && RECOVERABLE.has(err.code)) return { page, outcome: { view: 'password', status: err.status, message: messageOf(err), email, headers: err.headers } };
    throw err;
  }
}

/** POST /signin/mfa: the TOTP or recovery code step, exactly as POST /v1/auth/mfa/verify. */
export async function verifySecondFactor(baseCtx: Ctx, form: SigninForm, secret: string | null): Promise<Result> {
  const page = await openPage(baseCtx, form);
  const mfaToken = form.mfa_token ?? '';
  const recovery = form.code === undefined && form.recovery_code !== undefined;
  // A challenge of the other mode is as unknown here as an expired one.
  const email = await challengeEmail(page, mfaToken);
  if (email === null) return restart(page, 401, `${MFA_EXPIRED} Please sign in again.`);

  const code = (form.code ?? '').replace(/\s+/g, '');
  const recoveryCode = (form.recovery_code ?? '').trim();
  if (!recovery && !/^[0-9]{6}$/.test(code)) {
    return { page, outcome: { view: 'mfa', status: 422, mfaToken, email, message: 'Enter the 6-digit code from your authenticator app.' } };
  }
  if (recovery && !recoveryCode) return { page, outcome: { view: 'mfa', status: 422, mfaToken, email, recovery, message: 'Enter one of your recovery codes.' } };
  try {
    const session = await verifyMfa(page.ctx, recovery ? { mfa_token: mfaToken, recovery_code: recoveryCode } : { mfa_token: mfaToken, code });
    return await completeSignin(page, session.session_id, secret);
  } catch (err) {
    if (!(err instanceof ApiError) || !RECOVERABLE.has(err.code)) throw err;
    // Five wrong codes void the challenge: then the only way on is to sign in again.
    if ((await challengeEmail(page, mfaToken)) === null) {
      return restart(page, err.status, err.code === 'too_many_attempts' ? messageOf(err) : `${err.message} Please sign in again.`, err.headers);
    }
    return { page, outcome: { view: 'mfa', status: err.status, mfaToken, email, recovery, message: messageOf(err), headers: err.headers } };
  }
}

/** POST /signin/continue: a code for the session this browser already signed in with. */
export async function continueSignedIn(baseCtx: Ctx, form: SigninForm, secret: string | null): Promise<Result> {
  const page = await openPage(baseCtx, form);
  const current = secret ? await findBrowserSession(page.ctx.db, hashSecret(secret), page.ctx.now) : null;
  if (!current) return restart(page, 401, 'Your session has ended. Please sign in again.');
  return { page, outcome: await authorize(page, current) };
}

/** Binds a fresh cookie secret to the new session (forgetting the browser's previous one), then authorizes. */
async function completeSignin(page: Page, sessionId: string, previousSecret: string | null): Promise<Result> {
  const secret = newBrowserSecret();
  const { ctx } = page;
  const current = await ctx.db.transaction(async (tx) => {
    if (previousSecret) await deleteBrowserSession(tx, hashSecret(previousSecret));
    await insertBrowserSession(tx, hashSecret(secret), sessionId, ctx.now);
    return findBrowserSession(tx, hashSecret(secret), ctx.now);
  });
  // Ended between the sign-in and this binding (an admin's DELETE, a suspension): nothing is issued.
  if (!current) return restart(page, 401, 'Your session has ended. Please sign in again.');
  return { page, outcome: await authorize(page, current), signedIn: { secret, expiresAt: current.expires_at } };
}

/**
 * Issues the authorization code through the same verb as POST /v1/auth/oauth/authorization-codes,
 * for the signed-in user's session. A user without access is told so on the page, with a link that
 * returns `error=access_denied` to the (registered) redirect_uri.
 */
async function authorize(page: Page, current: BrowserSession): Promise<Outcome> {
  const { ctx, request } = page;
  const actorCtx: Ctx = {
    ...ctx,
    actor: { type: 'user', userId: current.user_id, sessionId: current.session_id, mode: ctx.mode, permissions: new Set() },
  };
  try {
    const code = await issueAuthorizationCode(actorCtx, request);
    return { view: 'redirect', location: code.redirect_to };
  } catch (err) {
    // The page showed the Application already: a user who may not see it (an internal one) has no access to it.
    if (!(err instanceof ApiError) || (err.code !== 'entitlement_required' && err.code !== 'application_not_found')) throw err;
    const returnTo = errorRedirect(request, ctx.deps.config.publicUrl, 'access_denied', 'The user has no access to this application.');
    return { view: 'denied', status: 403, email: current.email, returnTo };
  }
}

/**
 * The email of the account a live MFA challenge (of the Application's mode) is for; null when the
 * challenge is not usable: unknown, used, expired or void (turning TOTP off, by a disable or a
 * support reset, voids the account's challenges), or of the other mode.
 */
async function challengeEmail(page: Page, mfaToken: string): Promise<string | null> {
  if (!mfaToken) return null;
  const pending = await peekOneTimeToken(page.ctx.deps.database.scoped('system'), ['mfa_challenge'], mfaToken, page.ctx.now);
  if (!pending || pending.test_mode !== page.app.test_mode) return null;
  const user = await findUserById(page.ctx.db, pending.user_id);
  return user ? user.email : null;
}

const restart = (page: Page, status: number, message: string, headers?: Record<string, string>): Result => ({
  page,
  outcome: { view: 'password', status, message, headers },
});

/** The API's message; lockouts and throttles also say when to try again (their Retry-After). */
export function messageOf(err: ApiError): string {
  const seconds = Number(err.headers['retry-after']);
  if ((err.code !== 'too_many_attempts' && err.code !== 'rate_limited') || !Number.isFinite(seconds)) return err.message;
  const minutes = Math.ceil(seconds / 60);
  const wait = seconds < 60 ? `${seconds} second${seconds === 1 ? '' : 's'}` : `${minutes} minute${minutes === 1 ? '' : 's'}`;
  return `${err.code === 'too_many_attempts' ? 'Too many attempts' : 'Too many requests'}; try again in ${wait}.`;
}
