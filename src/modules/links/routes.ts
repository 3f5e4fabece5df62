import { Type } from '@sinclair/typebox';
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import type { App } from '../types.js';
import type { Ctx, Deps } from '../../context.js';
import { ApiError } from '../../errors.js';
import { ctxOf } from '../../http/gate.js';
import { logServerError, toApiError } from '../../http/errors-plugin.js';
import { modeOf } from '../../db/types.js';
import { peekOneTimeToken, type OneTimeTokenKind } from '../../auth/one-time-tokens.js';
import type { WeakPasswordReason } from '../../auth/passwords.js';
import { findUserById } from '../users/store.js';
import { acceptInvitationWithoutSession, forgotPassword, resetPassword, verifyEmail } from '../auth/recovery.js';
import { addressBlind } from '../auth/routes.js';
import { assertCsrf, assertWellFormedPage, csrfToken, newBrowserSecret, pageHeaders, readBrowserSecret, signinSite } from '../signin/browser.js';
import { errorPage, STYLE_HASH } from '../signin/pages.js';
import { requestQuery, resolveAuthorizationRequest } from '../signin/params.js';
import { AuthorizationQuery } from '../signin/schemas.js';
import { messageOf as signinMessageOf } from '../signin/service.js';
import { donePage, forgotPasswordPage, forgotSentPage, linkErrorPage, passwordPage, verifyEmailPage, type ForgotForm, type LinkKind } from './pages.js';

// The pages the mailed links open (`<PUBLIC_URL>/verify-email?token=…`, `/reset-password?token=…`,
// `/accept-invitation?token=…`): HTML for people, outside /v1 and the OpenAPI document, built with the
// hosted sign-in page's machinery (headers, CSP, CSRF scheme, layout, escaping, per-IP throttle). A GET
// never uses the token up (mail scanners fetch links): it only shows the form; the POST calls the verb
// behind the API operation. The token travels only in the GET's URL and the form's hidden field.

export const LINK_COOKIE = 'platform_link';
const TOKEN_MAX = 200;

interface Step {
  kind: LinkKind;
  path: string;
  /** Token kinds the page takes (what the verb takes). */
  tokens: OneTimeTokenKind[];
}

const STEPS: Step[] = [
  { kind: 'verify_email', path: '/verify-email', tokens: ['email_verification', 'email_change'] },
  { kind: 'reset_password', path: '/reset-password', tokens: ['password_reset'] },
  { kind: 'accept_invitation', path: '/accept-invitation', tokens: ['invitation'] },
];

const text = (maxLength: number) => Type.Optional(Type.String({ maxLength }));
const LinkQuery = Type.Object({ token: text(TOKEN_MAX) }, { additionalProperties: true });
const LinkForm = Type.Object({ token: text(TOKEN_MAX), csrf: text(200), password: text(1024) }, { additionalProperties: true });
type LinkForm = { token?: string; csrf?: string; password?: string };

const CSRF_MESSAGE = 'This form has expired or was not sent from this page. Open the link from the email again.';
// The password is never echoed, nor is a value of any field.
const MALFORMED = 'This link is malformed (a parameter is repeated, not text, or too long).';
const INVALID_LINK = 'This link is invalid or has expired.';

const WEAK: Record<WeakPasswordReason, string> = {
  too_short: 'The password is too short: use at least 12 characters.',
  too_long: 'The password is too long: use at most 128 characters.',
  breached: 'This password is too common: it appears in lists of leaked passwords. Choose another.',
  matches_email: 'The password must not be your email address.',
};

/** What a refused request's page says. */
function messageOf(error: ApiError): string {
  if (error.code === 'invalid_token') return INVALID_LINK;
  return error.message;
}

/** The cookie anchoring the page's CSRF token: like the sign-in page's, scoped to this page's path. */
function linkCookie(path: string, secure: boolean, secret: string): string {
  return [`${LINK_COOKIE}=${secret}`, `Path=${path}`, 'HttpOnly', 'SameSite=Lax', ...(secure ? ['Secure'] : [])].join('; ');
}

export function linkRoutes(app: App, deps: Deps): void {
  const site = signinSite(deps.config.publicUrl);
  const base = site.paths.signin.slice(0, -'/signin'.length);
  const errorHandler = (err: FastifyError, request: FastifyRequest, reply: FastifyReply) => {
    const error = toApiError(err);
    logServerError(request, err, error);
    return pageHeaders(reply, STYLE_HASH, 'none').code(error.status).headers(error.headers).send(linkErrorPage(error, messageOf(error)));
  };

  for (const step of STEPS) {
    const action = `${base}${step.path}`;
    const form = `link:${step.kind}` as const;

    /** The form page (a weak password's reason, if any); a token no longer usable is the error page. */
    const render = async (ctx: Ctx, reply: FastifyReply, token: string, secret: string, message?: string) => {
      const email = await pendingEmail(ctx, step, token);
      const f = { action, token, csrf: csrfToken(secret, form) };
      pageHeaders(reply, STYLE_HASH, null).code(message ? 422 : 200);
      return reply.send(step.kind === 'verify_email' ? verifyEmailPage(f) : passwordPage(step.kind, f, email, message));
    };

    app.get(step.path, {
      schema: { hide: true, querystring: LinkQuery },
      attachValidation: true,
      config: { meta: { auth: 'none' } },
      errorHandler,
      handler: async (request, reply) => {
        assertWellFormedPage(request.validationError, request.query, LinkQuery, MALFORMED);
        const token = request.query.token;
        if (!token) throw new ApiError('invalid_token');
        const existing = readBrowserSecret(request.headers.cookie, LINK_COOKIE);
        const secret = existing ?? newBrowserSecret();
        if (!existing) reply.header('set-cookie', linkCookie(action, site.secure, secret));
        return render(ctxOf(deps, request), reply, token, secret);
      },
    });

    app.post(step.path, {
      schema: { hide: true, body: LinkForm },
      attachValidation: true,
      config: { meta: { auth: 'none', throttle: 'auth' } },
      errorHandler,
      handler: async (request, reply) => {
        const body = request.body as LinkForm;
        assertWellFormedPage(request.validationError, body, LinkForm, MALFORMED);
        const secret = readBrowserSecret(request.headers.cookie, LINK_COOKIE);
        assertCsrf(secret, form, body.csrf, CSRF_MESSAGE);
        const token = body.token;
        if (!token) throw new ApiError('invalid_token');
        const ctx = ctxOf(deps, request);
        try {
          if (step.kind === 'verify_email') await verifyEmail(ctx, { token });
          else if (step.kind === 'reset_password') await resetPassword(ctx, { token, password: body.password ?? '' });
          // The page signs no one in: it starts no session (no cookie is set, last_login_at stays null).
          else await acceptInvitationWithoutSession(ctx, { token, password: body.password ?? '' });
        } catch (err) {
          const reason = err instanceof ApiError && err.code === 'weak_password' ? (err.details.reason as WeakPasswordReason) : null;
          if (!reason) throw err;
          return render(ctx, reply, token, secret!, WEAK[reason] ?? (err as ApiError).message);
        }
        return pageHeaders(reply, STYLE_HASH, 'none').code(200).send(donePage(step.kind));
      },
    });
  }

  forgotRoutes(app, deps, `${base}${FORGOT_PATH}`, site.paths.signin, site.secure);
}

const FORGOT_PATH = '/forgot-password';
const FORGOT_FORM = 'link:forgot_password' as const;
const ForgotBody = Type.Object({ ...AuthorizationQuery.properties, csrf: text(200), email: text(320) }, { additionalProperties: true });
type ForgotBody = AuthorizationQuery & { csrf?: string; email?: string };
const AUTHORIZATION_PARAMS = Object.keys(AuthorizationQuery.properties) as (keyof AuthorizationQuery)[];
const FORGOT_CSRF_MESSAGE = 'This form has expired or was not sent from this page. Open the page again.';

/**
 * GET/POST /forgot-password, linked from the sign-in page's password step: the verb of POST
 * /v1/auth/password/forgot behind a form. Opened with the /signin parameters, they are checked as
 * /signin checks them (a bad request is the 400 page), the Application's mode is the mode (a test
 * Application resets test users) and both pages link back to /signin with them; opened without, live.
 * The answer is the same page, no sooner than the API route's floor, whatever the address.
 */
function forgotRoutes(app: App, deps: Deps, action: string, signinPath: string, secure: boolean): void {
  const errorHandler = (err: FastifyError, request: FastifyRequest, reply: FastifyReply) => {
    const error = toApiError(err);
    logServerError(request, err, error);
    return pageHeaders(reply, STYLE_HASH, 'none').code(error.status).headers(error.headers).send(errorPage(error, signinMessageOf(error)));
  };

  /** The sign-in request the page was opened with (checked, as /signin does), and the ctx in its Application's mode. */
  const open = async (request: FastifyRequest, params: AuthorizationQuery, secret: string): Promise<{ ctx: Ctx; form: ForgotForm }> => {
    const base = ctxOf(deps, request, 'live');
    const given = AUTHORIZATION_PARAMS.some((name) => params[name] !== undefined);
    if (!given) return { ctx: base, form: { action, csrf: csrfToken(secret, FORGOT_FORM), request: null, back: null, app: null } };
    const checked = await resolveAuthorizationRequest(base.db, params);
    const mode = modeOf(checked.app.test_mode);
    const query = requestQuery(checked.request);
    return {
      ctx: { ...base, mode, db: deps.database.scoped(mode) },
      form: { action, csrf: csrfToken(secret, FORGOT_FORM), request: Object.fromEntries(new URLSearchParams(query)), back: `${signinPath}?${query}`, app: checked.app },
    };
  };

  app.get(FORGOT_PATH, {
    schema: { hide: true, querystring: AuthorizationQuery },
    attachValidation: true,
    config: { meta: { auth: 'none' } },
    errorHandler,
    handler: async (request, reply) => {
      assertWellFormedPage(request.validationError, request.query, AuthorizationQuery, MALFORMED);
      const existing = readBrowserSecret(request.headers.cookie, LINK_COOKIE);
      const secret = existing ?? newBrowserSecret();
      const { form } = await open(request, request.query, secret);
      if (!existing) reply.header('set-cookie', linkCookie(action, secure, secret));
      return pageHeaders(reply, STYLE_HASH, null).code(200).send(forgotPasswordPage(form));
    },
  });

  app.post(FORGOT_PATH, {
    schema: { hide: true, body: ForgotBody },
    attachValidation: true,
    config: { meta: { auth: 'none', throttle: 'auth' } },
    errorHandler,
    handler: async (request, reply) => {
      const body = request.body as ForgotBody;
      assertWellFormedPage(request.validationError, body, ForgotBody, MALFORMED);
      const secret = readBrowserSecret(request.headers.cookie, LINK_COOKIE);
      assertCsrf(secret, FORGOT_FORM, body.csrf, FORGOT_CSRF_MESSAGE);
      const { ctx, form } = await open(request, body, secret!);
      const email = (body.email ?? '').trim();
      if (!email) return pageHeaders(reply, STYLE_HASH, null).code(422).send(forgotPasswordPage(form, 'Enter your email address.'));
      await addressBlind(forgotPassword(ctx, { email, test_mode: ctx.mode === 'test' }));
      return pageHeaders(reply, STYLE_HASH, 'none').code(200).send(forgotSentPage(form));
    },
  });
}

/** The address the token is for (shown on the password forms), or the invalid-link error when it is not usable. */
async function pendingEmail(ctx: Ctx, step: Step, token: string): Promise<string | null> {
  const pending = await peekOneTimeToken(ctx.deps.database.scoped('system'), step.tokens, token, ctx.now);
  if (!pending) throw new ApiError('invalid_token');
  const user = await findUserById(ctx.deps.database.scoped(modeOf(pending.test_mode)), pending.user_id);
  if (!user || user.status === 'deleted' || (step.kind === 'accept_invitation' && user.status !== 'invited')) throw new ApiError('invalid_token');
  return step.kind === 'verify_email' ? null : user.email;
}
