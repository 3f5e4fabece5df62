import { Type } from '@sinclair/typebox';
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import type { App } from '../types.js';
import type { Ctx, Deps } from '../../context.js';
import { ApiError } from '../../errors.js';
import { ctxOf } from '../../http/gate.js';
import { logServerError, toApiError } from '../../http/errors-plugin.js';
import { fieldErrors, unstorableText } from '../../http/validation.js';
import { modeOf } from '../../db/types.js';
import { peekOneTimeToken, type OneTimeTokenKind } from '../../auth/one-time-tokens.js';
import type { WeakPasswordReason } from '../../auth/passwords.js';
import { findUserById } from '../users/store.js';
import { revokeSessions } from '../sessions/store.js';
import { acceptInvitation, resetPassword, verifyEmail } from '../auth/recovery.js';
import { assertCsrf, csrfToken, newBrowserSecret, pageHeaders, readBrowserSecret, signinSite } from '../signin/browser.js';
import { STYLE_HASH } from '../signin/pages.js';
import { donePage, linkErrorPage, passwordPage, verifyEmailPage, type LinkKind } from './pages.js';

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
        assertWellFormed(request.validationError, request.query);
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
        assertWellFormed(request.validationError, body);
        const secret = readBrowserSecret(request.headers.cookie, LINK_COOKIE);
        assertCsrf(secret, form, body.csrf, CSRF_MESSAGE);
        const token = body.token;
        if (!token) throw new ApiError('invalid_token');
        const ctx = ctxOf(deps, request);
        try {
          if (step.kind === 'verify_email') await verifyEmail(ctx, { token });
          else if (step.kind === 'reset_password') await resetPassword(ctx, { token, password: body.password ?? '' });
          else {
            // The page signs no one in: the session the verb opens is ended at once (no cookie is set).
            const pending = await peekOneTimeToken(deps.database.scoped('system'), step.tokens, token, ctx.now);
            const session = await acceptInvitation(ctx, { token, password: body.password ?? '' });
            await revokeSessions(deps.database.scoped(modeOf(pending?.test_mode === true)), { userId: session.user_id, sessionId: session.session_id }, deps.clock.now());
          }
        } catch (err) {
          const reason = err instanceof ApiError && err.code === 'weak_password' ? (err.details.reason as WeakPasswordReason) : null;
          if (!reason) throw err;
          return render(ctx, reply, token, secret!, WEAK[reason] ?? (err as ApiError).message);
        }
        return pageHeaders(reply, STYLE_HASH, 'none').code(200).send(donePage(step.kind));
      },
    });
  }
}

/** The address the token is for (shown on the password forms), or the invalid-link error when it is not usable. */
async function pendingEmail(ctx: Ctx, step: Step, token: string): Promise<string | null> {
  const pending = await peekOneTimeToken(ctx.deps.database.scoped('system'), step.tokens, token, ctx.now);
  if (!pending) throw new ApiError('invalid_token');
  const user = await findUserById(ctx.deps.database.scoped(modeOf(pending.test_mode)), pending.user_id);
  if (!user || user.status === 'deleted' || (step.kind === 'accept_invitation' && user.status !== 'invited')) throw new ApiError('invalid_token');
  return step.kind === 'verify_email' ? null : user.email;
}

/** A repeated parameter, a non-string or an oversized value, or text PostgreSQL cannot hold (U+0000): a 400 page. */
function assertWellFormed(validationError: (Error & { validation?: any[]; validationContext?: string }) | undefined, params: unknown): void {
  const unstorable = validationError ? null : unstorableText(params, '');
  if (!validationError && !unstorable) return;
  const fields = unstorable ? [{ path: unstorable.path, message: unstorable.message }] : fieldErrors(validationError!.validation ?? [], validationError!.validationContext).map((f) => ({
    path: f.path.replace(/^query\./, ''),
    message: f.message === 'must be string' ? 'must be given once, as text' : f.message,
  }));
  // The password is never echoed, nor is a value of any field.
  throw new ApiError('bad_request', { message: 'This link is malformed (a parameter is repeated, not text, or too long).', details: { fields } });
}
