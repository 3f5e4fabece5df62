import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import type { App } from '../types.js';
import type { Ctx, Deps } from '../../context.js';
import { ApiError } from '../../errors.js';
import { ctxOf } from '../../http/gate.js';
import { logServerError, toApiError } from '../../http/errors-plugin.js';
import { AuthorizationQuery, SigninForm, type FormName } from './schemas.js';
import { assertCsrf, assertWellFormedPage, browserCookie, csrfToken, newBrowserSecret, pageHeaders, readBrowserSecret, redirectSource, signinSite, type SigninSite } from './browser.js';
import { continueSignedIn, messageOf, showSignin, signInWithPassword, verifySecondFactor, type Result } from './service.js';
import { deniedPage, errorPage, mfaPage, passwordPage, STYLE_HASH, type View } from './pages.js';

type Verb = (ctx: Ctx, form: SigninForm, secret: string | null) => Promise<Result>;

// The hosted sign-in page: HTML for people, outside /v1 and the OpenAPI document. Every route renders
// its own errors as a page (never JSON, never a redirect); the POSTs share the auth endpoints' per-IP
// throttle and each checks the CSRF token of its form.
const MALFORMED = 'This sign-in request is malformed (a parameter is repeated, not text, or too long).';

export function signinRoutes(app: App, deps: Deps): void {
  const site = signinSite(deps.config.publicUrl);
  const errorHandler = (err: FastifyError, request: FastifyRequest, reply: FastifyReply) => {
    const error = toApiError(err);
    logServerError(request, err, error);
    return pageHeaders(reply, STYLE_HASH, 'none').code(error.status).headers(error.headers).send(errorPage(error, messageOf(error)));
  };

  app.get('/signin', {
    schema: { hide: true, querystring: AuthorizationQuery },
    attachValidation: true,
    config: { meta: { auth: 'none' } },
    errorHandler,
    handler: async (request, reply) => {
      assertWellFormedPage(request.validationError, request.query, AuthorizationQuery, MALFORMED);
      const existing = readBrowserSecret(request.headers.cookie);
      const secret = existing ?? newBrowserSecret();
      const result = await showSignin(ctxOf(deps, request), request.query, existing);
      if (!existing) reply.header('set-cookie', browserCookie(site, secret));
      return respond(reply, site, result, secret);
    },
  });

  const post = (url: string, form: FormName, verb: Verb) =>
    app.post(url, {
      schema: { hide: true, body: SigninForm },
      attachValidation: true,
      config: { meta: { auth: 'none', throttle: 'auth' } },
      errorHandler,
      handler: async (request, reply) => {
        assertWellFormedPage(request.validationError, request.body, SigninForm, MALFORMED);
        const secret = readBrowserSecret(request.headers.cookie);
        assertCsrf(secret, form, request.body.csrf);
        const result = await verb(ctxOf(deps, request), request.body, secret);
        if (result.signedIn) {
          const seconds = (result.signedIn.expiresAt.getTime() - deps.clock.now().getTime()) / 1000;
          reply.header('set-cookie', browserCookie(site, result.signedIn.secret, seconds));
        }
        return respond(reply, site, result, result.signedIn?.secret ?? secret!);
      },
    });
  post('/signin', 'password', signInWithPassword);
  post('/signin/mfa', 'mfa', verifySecondFactor);
  post('/signin/continue', 'continue', continueSignedIn);

  // Opening a form's address (a reload, a bookmark) gets a page, not the API's JSON 405.
  for (const url of ['/signin/mfa', '/signin/continue']) {
    app.get(url, {
      schema: { hide: true },
      config: { meta: { auth: 'none', refusesMethod: true } },
      errorHandler,
      handler: async () => {
        throw new ApiError('method_not_allowed', {
          message: 'This step cannot be opened directly. Go back to the application and start signing in again.',
          headers: { allow: 'POST' },
        });
      },
    });
  }
}

/** A step's outcome as the browser gets it: the 303 back to the Application, or the page to show. */
function respond(reply: FastifyReply, site: SigninSite, { page, outcome }: Result, secret: string) {
  if (outcome.view === 'redirect') {
    // 303: the browser follows with a GET; the code travels only in this Location.
    return reply.code(303).header('location', outcome.location).header('cache-control', 'no-store').header('referrer-policy', 'no-referrer').send();
  }
  const view: View = { app: page.app, request: page.request, site, csrf: (form) => csrfToken(secret, form) };
  if (outcome.view === 'denied') return pageHeaders(reply, STYLE_HASH, 'none').code(outcome.status).send(deniedPage(view, outcome));
  pageHeaders(reply, STYLE_HASH, redirectSource(page.request.redirect_uri)).code(outcome.status).headers(outcome.headers ?? {});
  return reply.send(outcome.view === 'mfa' ? mfaPage(view, outcome) : passwordPage(view, outcome));
}
