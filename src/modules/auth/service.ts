import type { Ctx } from '../../context.js';
import { ApiError } from '../../errors.js';
import { verifyAgainstDummy, verifyPassword } from '../../auth/passwords.js';
import { issueSession } from './sessions.js';
import type { AuthSession, LoginBody } from './schemas.js';

interface LoginRow {
  id: string;
  status: string;
  email_verified: boolean;
  test_mode: boolean;
  password_hash: string | null;
}

/**
 * POST /v1/auth/login. Unknown email, wrong password, an invited user without a password and an
 * SSO-only user all get the same 401 after the same Argon2id work; suspension is revealed only to
 * correct credentials.
 */
export async function login(ctx: Ctx, input: LoginBody): Promise<AuthSession> {
  const { rows } = await ctx.db.query<LoginRow>(
    `SELECT u.id, u.status, u.email_verified, u.test_mode, i.password_hash
       FROM users u LEFT JOIN identities i ON i.user_id = u.id AND i.method = 'password'
      WHERE lower(u.email) = lower($1) AND u.status <> 'deleted'`,
    [input.email],
  );
  const user = rows[0];
  if (!user?.password_hash) {
    await verifyAgainstDummy(input.password);
    throw new ApiError('invalid_credentials');
  }
  if (!(await verifyPassword(user.password_hash, input.password))) throw new ApiError('invalid_credentials');
  if (user.status === 'suspended') throw new ApiError('account_suspended');
  if (user.status !== 'active') throw new ApiError('invalid_credentials');
  return ctx.db.transaction((tx) => issueSession(tx, ctx, user, ['pwd']));
}
