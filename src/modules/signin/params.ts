import type { Queryable } from '../../db/types.js';
import { ApiError } from '../../errors.js';
import type { FieldError } from '../../http/validation.js';
import { CHALLENGE_PATTERN, type AuthorizationCodeBody } from '../oauth/schemas.js';
import { withResponseParams } from '../oauth/redirect.js';
import { findSigninApp, type SigninApp } from './store.js';
import type { AuthorizationQuery } from './schemas.js';

const CHALLENGE = new RegExp(CHALLENGE_PATTERN);
export const STATE_MAX = 512;

export interface AuthorizationRequest {
  app: SigninApp;
  request: AuthorizationCodeBody;
}

/**
 * Checks an authorization request before anything is shown or done: a known, approved Application
 * whose Tenant is not suspended, a redirect_uri byte-identical to a registered one, an S256 challenge
 * of 43–128 base64url characters and a state of at most 512 characters. Any problem is a 400
 * `bad_request` listing every field, and nothing is ever sent to the redirect_uri.
 */
export async function resolveAuthorizationRequest(db: Queryable, q: AuthorizationQuery): Promise<AuthorizationRequest> {
  const problems: FieldError[] = [];
  const problem = (path: string, message: string) => problems.push({ path, message });

  const appId = q.application_id || q.client_id;
  if (q.application_id && q.client_id && q.application_id !== q.client_id) problem('client_id', 'must equal application_id when both are given');
  if (q.response_type !== undefined && q.response_type !== 'code') problem('response_type', 'must be code');
  if (!appId) problem('application_id', 'is required');
  if (!q.redirect_uri) problem('redirect_uri', 'is required');
  if (!q.code_challenge) problem('code_challenge', 'is required');
  else if (!CHALLENGE.test(q.code_challenge)) problem('code_challenge', 'must be 43 to 128 characters of A-Z, a-z, 0-9, - and _ (base64url of a SHA-256 digest)');
  if (q.code_challenge_method !== 'S256') problem('code_challenge_method', q.code_challenge_method ? 'must be S256' : 'is required and must be S256');
  // Characters are code points, as the API's schema counts them (an emoji is one).
  if (q.state !== undefined && [...q.state].length > STATE_MAX) problem('state', `must be at most ${STATE_MAX} characters`);

  const found = appId ? await findSigninApp(db, appId) : null;
  // Part B: an Application not approved is seen only by its owner, its own key and applications.manage.
  // To whoever opens this page it reads as an unknown one: neither its name nor its redirect URIs show.
  const app = found?.review_status === 'approved' ? found : null;
  if (appId && !app) problem('application_id', 'is not a known application available for sign-in');
  if (app) {
    if (app.tenant_suspended) problem('application_id', `${app.name} is not available for sign-in right now`);
    if (app.redirect_uris.length === 0) problem('redirect_uri', `${app.name} has no registered redirect URIs`);
    else if (q.redirect_uri && !app.redirect_uris.includes(q.redirect_uri)) problem('redirect_uri', `is not registered for ${app.name}`);
  }
  if (problems.length > 0 || !app) {
    throw new ApiError('bad_request', { message: 'This sign-in request is not valid.', details: { fields: problems } });
  }
  return {
    app,
    request: {
      application_id: app.id,
      redirect_uri: q.redirect_uri!,
      code_challenge: q.code_challenge!,
      code_challenge_method: 'S256',
      ...(q.state !== undefined ? { state: q.state } : {}),
    },
  };
}

/** The registered redirect_uri with an RFC 6749 §4.1.2.1 error (the state, verbatim, and the issuer: RFC 9207). */
export function errorRedirect(request: AuthorizationCodeBody, issuer: string, error: string, description: string): string {
  return withResponseParams(request.redirect_uri, { error, error_description: description, state: request.state, iss: issuer });
}

/** The query string that opens the page again for the same request. */
export function requestQuery(request: AuthorizationCodeBody): string {
  const q = new URLSearchParams({
    application_id: request.application_id,
    redirect_uri: request.redirect_uri,
    code_challenge: request.code_challenge,
    code_challenge_method: request.code_challenge_method,
  });
  if (request.state !== undefined) q.set('state', request.state);
  return q.toString();
}
