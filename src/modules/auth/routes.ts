import { setTimeout as sleep } from 'node:timers/promises';
import { Type } from '@sinclair/typebox';
import type { App } from '../types.js';
import type { Deps } from '../../context.js';
import { ctxOf } from '../../http/gate.js';
import { modeOf } from '../../db/types.js';
import { ApiError } from '../../errors.js';
import { UserIdParam } from '../../http/schemas.js';
import {
  AuthSession, ChangePasswordBody, EmailBody, LoginBody, MfaChallenge, MfaVerifyBody, RefreshBody, SignupBody, TokenBody, TokenPasswordBody,
} from './schemas.js';
import { signup } from './signup.js';
import { login, verifyMfa } from './login.js';
import { refresh } from './refresh.js';
import { acceptInvitation, forgotPassword, resendVerification, resetPassword, verifyEmail } from './recovery.js';
import { changePassword } from './password-change.js';

const Accepted = Type.Object({ status: Type.Literal('accepted') });
const tags = ['Auth'];

/**
 * forgot and resend answer no sooner than this after their handler starts (real time, not the service
 * clock): a known address does database work and writes a mail, an unknown one returns at once, and
 * the difference must not show in the response time (catalog AU-5). The work takes a few
 * milliseconds, and stays under this floor even on a saturated machine (50 ms did not: a loaded
 * two-core machine took 100–330 ms), so the floor is what a caller measures, whatever the address.
 */
export const ADDRESS_BLIND_ANSWER_MS = 150;
/** Answers no sooner than ADDRESS_BLIND_ANSWER_MS (also the hosted /forgot-password page's floor). */
export const addressBlind = async (work: Promise<void>): Promise<void> => {
  await Promise.all([work, sleep(ADDRESS_BLIND_ANSWER_MS)]);
};

export function authRoutes(app: App, deps: Deps): void {
  app.post('/v1/auth/signup', {
    schema: { summary: 'Create an account with email and password', tags, body: SignupBody, response: { 201: AuthSession } },
    config: { meta: { auth: 'none', throttle: 'auth', errors: ['email_taken', 'weak_password', 'service_unavailable'] } },
    handler: async (request, reply) => {
      const session = await signup(ctxOf(deps, request, modeOf(request.body.test_mode === true)), request.body);
      reply.code(201);
      return session;
    },
  });

  app.post('/v1/auth/login', {
    schema: {
      summary: 'Sign in with email and password',
      description: 'Returns an AuthSession, or an MfaChallenge (mfa_required true) when TOTP is enrolled.',
      tags,
      body: LoginBody,
      response: { 200: Type.Union([AuthSession, MfaChallenge]) },
    },
    config: { meta: { auth: 'none', throttle: 'auth', errors: ['invalid_credentials', 'account_suspended', 'too_many_attempts', 'service_unavailable'] } },
    handler: (request) => login(ctxOf(deps, request, modeOf(request.body.test_mode === true)), request.body),
  });

  app.post('/v1/auth/mfa/verify', {
    schema: { summary: 'Complete an MFA sign-in with a TOTP or recovery code', tags, body: MfaVerifyBody, response: { 200: AuthSession } },
    config: { meta: { auth: 'none', throttle: 'auth', errors: ['invalid_credentials', 'account_suspended', 'too_many_attempts'] } },
    handler: (request) => verifyMfa(ctxOf(deps, request), request.body),
  });

  app.post('/v1/auth/token/refresh', {
    schema: { summary: 'Rotate a refresh token for a new access token', tags, body: RefreshBody, response: { 200: AuthSession } },
    config: { meta: { auth: 'none', throttle: 'auth', errors: ['invalid_refresh_token'] } },
    handler: (request) => refresh(ctxOf(deps, request), request.body),
  });

  app.post('/v1/auth/email/verify', {
    schema: { summary: 'Verify an email address with the mailed token', tags, body: TokenBody, response: { 204: Type.Null() } },
    config: { meta: { auth: 'none', throttle: 'auth', errors: ['invalid_token', 'email_taken'] } },
    handler: async (request, reply) => {
      await verifyEmail(ctxOf(deps, request), request.body);
      reply.code(204);
      return null;
    },
  });

  app.post('/v1/auth/email/verify/resend', {
    schema: { summary: 'Send the verification mail again (always 202)', tags, body: EmailBody, response: { 202: Accepted } },
    config: { meta: { auth: 'none', throttle: 'auth' } },
    handler: async (request, reply) => {
      await addressBlind(resendVerification(ctxOf(deps, request, modeOf(request.body.test_mode === true)), request.body));
      reply.code(202);
      return { status: 'accepted' as const };
    },
  });

  app.post('/v1/auth/password/forgot', {
    schema: { summary: 'Mail a password reset link (always 202)', tags, body: EmailBody, response: { 202: Accepted } },
    config: { meta: { auth: 'none', throttle: 'auth' } },
    handler: async (request, reply) => {
      await addressBlind(forgotPassword(ctxOf(deps, request, modeOf(request.body.test_mode === true)), request.body));
      reply.code(202);
      return { status: 'accepted' as const };
    },
  });

  app.post('/v1/auth/password/reset', {
    schema: { summary: 'Set a new password with the mailed token; ends every session', tags, body: TokenPasswordBody, response: { 204: Type.Null() } },
    config: { meta: { auth: 'none', throttle: 'auth', errors: ['invalid_token', 'weak_password', 'service_unavailable'] } },
    handler: async (request, reply) => {
      await resetPassword(ctxOf(deps, request), request.body);
      reply.code(204);
      return null;
    },
  });

  app.post('/v1/auth/invitations/accept', {
    schema: { summary: 'Accept an invitation: set a password and sign in', tags, body: TokenPasswordBody, response: { 200: AuthSession } },
    config: { meta: { auth: 'none', throttle: 'auth', errors: ['invalid_token', 'weak_password', 'service_unavailable'] } },
    handler: (request) => acceptInvitation(ctxOf(deps, request), request.body),
  });

  // A provider posts its callback as a form, JSON or nothing: whatever the body, the answer is 501, so
  // this route alone takes any content type and does not read it.
  app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', { parseAs: 'buffer' }, (_request, _body, done) => done(null, undefined));
    scope.post('/v1/auth/sso/:provider/callback', {
      schema: { summary: 'SSO callback (not available until a broker integration exists)', tags, params: Type.Object({ provider: Type.String({ maxLength: 64 }) }) },
      config: { meta: { auth: 'none', throttle: 'auth', errors: ['not_implemented'] } },
      handler: async () => {
        throw new ApiError('not_implemented', { message: 'SSO is not available yet.' });
      },
    });
  });

  app.post('/v1/users/:id/password', {
    schema: { summary: 'Change your password (current password required)', tags, params: UserIdParam, body: ChangePasswordBody, response: { 204: Type.Null() } },
    config: { meta: { auth: 'user', errors: ['invalid_current_password', 'weak_password', 'too_many_attempts', 'user_not_found', 'forbidden', 'service_unavailable'] } },
    handler: async (request, reply) => {
      await changePassword(ctxOf(deps, request), request.params.id, request.body);
      reply.code(204);
      return null;
    },
  });
}
