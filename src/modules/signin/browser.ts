import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { FastifyReply } from 'fastify';
import type { TObject } from '@sinclair/typebox';
import { ApiError } from '../../errors.js';
import { fieldErrors, unstorableText } from '../../http/validation.js';
import type { FormName } from './schemas.js';

// The page's one cookie holds a random secret (HttpOnly, SameSite=Lax, Path=/signin, Secure unless
// the service runs on loopback http). Before sign-in it only anchors the CSRF tokens; after sign-in
// its SHA-256 names the browser's platform session (signin_browser_sessions). A fresh secret is
// issued at every sign-in, so a secret planted before sign-in is never bound to a session.

export const COOKIE_NAME = 'platform_signin';
const SECRET = /^[A-Za-z0-9_-]{43}$/;

export interface SigninSite {
  /** Public paths of the page (PUBLIC_URL's path, if any, then /signin). */
  paths: { signin: string; mfa: string; continue: string; forgot: string };
  /** Secure cookies, except on http://localhost, 127.0.0.1 or [::1] (development). */
  secure: boolean;
}

/** PUBLIC_URL's path without its trailing slash ('' when it has none): the base of every page's path. */
export const publicPathBase = (publicUrl: string): string => new URL(publicUrl).pathname.replace(/\/+$/, '');

export function signinSite(publicUrl: string): SigninSite {
  const url = new URL(publicUrl);
  const base = publicPathBase(publicUrl);
  const signin = `${base}/signin`;
  const loopback = ['localhost', '127.0.0.1', '[::1]'].includes(url.hostname);
  return { paths: { signin, mfa: `${signin}/mfa`, continue: `${signin}/continue`, forgot: `${base}/forgot-password` }, secure: !(url.protocol === 'http:' && loopback) };
}

export const newBrowserSecret = (): string => randomBytes(32).toString('base64url');

/** The secret of the page cookie, when the request carries a well-formed one. */
export function readBrowserSecret(cookieHeader: string | undefined, name = COOKIE_NAME): string | null {
  for (const part of (cookieHeader ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) {
      const value = part.slice(eq + 1).trim();
      if (SECRET.test(value)) return value;
    }
  }
  return null;
}

/** A session cookie before sign-in; after sign-in it lasts as long as the platform session. */
export function browserCookie(site: SigninSite, secret: string, maxAgeSeconds?: number): string {
  const parts = [`${COOKIE_NAME}=${secret}`, `Path=${site.paths.signin}`, 'HttpOnly', 'SameSite=Lax'];
  if (maxAgeSeconds !== undefined) parts.push(`Max-Age=${Math.max(0, Math.floor(maxAgeSeconds))}`);
  if (site.secure) parts.push('Secure');
  return parts.join('; ');
}

/**
 * Each form's token is an HMAC of its name keyed with the cookie secret: unforgeable without the cookie.
 * The hosted link pages (src/modules/links) use the same scheme with their own cookie and form names.
 */
export const csrfToken = (secret: string, form: FormName | `link:${string}`): string =>
  createHmac('sha256', secret).update(`signin-csrf:${form}`).digest('base64url');

export function assertCsrf(
  secret: string | null,
  form: FormName | `link:${string}`,
  token: string | undefined,
  message = 'This form has expired or was not sent from the sign-in page. Go back to the application and start signing in again.',
): void {
  const expected = secret ? Buffer.from(csrfToken(secret, form)) : null;
  const given = Buffer.from(token ?? '');
  if (!expected || expected.length !== given.length || !timingSafeEqual(expected, given)) {
    throw new ApiError('forbidden', {
      message,
      details: { reason: secret ? 'csrf_token_mismatch' : 'csrf_cookie_missing' },
    });
  }
}

/** The CSP source a form may navigate to after the final redirect: the redirect_uri's origin (or scheme). */
export function redirectSource(redirectUri: string): string | null {
  const url = new URL(redirectUri);
  const source = url.protocol === 'http:' || url.protocol === 'https:' ? url.origin : url.protocol;
  return /^[a-z][a-z0-9+.-]*:(\/\/[A-Za-z0-9.\-[\]:]+)?$/.test(source) ? source : null;
}

/**
 * Headers of every page: no caching, no framing, no referrer, nothing loaded but the inline style
 * (by hash) and https or data: images. `formTarget`, when forms may end in the redirect to the
 * Application, is added to form-action: Chromium checks redirects after a form POST against it.
 */
export function pageHeaders(reply: FastifyReply, styleHash: string, formTarget: string | null | 'none'): FastifyReply {
  const formAction = formTarget === 'none' ? "'none'" : `'self'${formTarget ? ` ${formTarget}` : ''}`;
  return reply
    .type('text/html; charset=utf-8')
    .header('cache-control', 'no-store')
    .header('pragma', 'no-cache')
    .header(
      'content-security-policy',
      `default-src 'none'; style-src '${styleHash}'; img-src https: data:; form-action ${formAction}; frame-ancestors 'none'; base-uri 'none'`,
    )
    .header('x-frame-options', 'DENY')
    .header('referrer-policy', 'no-referrer')
    .header('x-content-type-options', 'nosniff');
}

type ValidationError = Error & { validation?: any[]; validationContext?: string };

/**
 * Refuses a page's request whose parameters its schema refused, or that text columns cannot hold:
 * 400 `bad_request` with `details.fields`, shown in the error page's alert. Only the names the page
 * knows are shown: the query is whoever made the link's, and a name of their choosing ("Your account
 * is locked. Call …") would stand in the alert of a page on this service's origin. No value is shown.
 */
export function assertWellFormedPage(validationError: ValidationError | undefined, params: unknown, schema: TObject, message: string): void {
  const unstorable = validationError ? null : unstorableText(params, '');
  if (!validationError && !unstorable) return;
  const known = new Set(Object.keys(schema.properties));
  const fields = (unstorable ? [unstorable] : fieldErrors(validationError!.validation ?? [], validationError!.validationContext)).map((f) => {
    const path = f.path.replace(/^(query|body)\./, '');
    return {
      path: known.has(path.split('.')[0]!) ? path : 'a parameter',
      message: f.message === 'must be string' ? 'must be given once, as text' : f.message,
    };
  });
  throw new ApiError('bad_request', { message, details: { fields } });
}
