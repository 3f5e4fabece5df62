// POST /v1/auth/login as the bootstrap admin: user lookup, Argon2id verify, then a transaction that
// inserts the session and refresh token and updates last_login_at, and an RS256-signed access token.
// Argon2id (19456 KiB, t=2, p=1) dominates, so fewer connections.
export const name = 'login';
export const connections = 8;
export const duration = 10;
export const baseline = 'argon2-select';

export const request = (ctx) => ({
  method: 'POST',
  path: '/v1/auth/login',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ email: ctx.email, password: ctx.password }),
});
