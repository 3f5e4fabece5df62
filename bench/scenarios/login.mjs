// POST /v1/auth/login as the bootstrap admin: user lookup, Argon2id verify, then a transaction that
// inserts the session and refresh token and updates last_login_at, and an RS256-signed access token.
// Issue: at least 80% of a bare loop of Argon2id verifications at the same parameters, with as many
// in flight as connections (the hash runs on libuv's pool, off the event loop), and GET /health keeps
// flowing meanwhile: its p99 is measured beside the login load (companion) and alone.
export const name = 'login';
export const connections = 8;
export const duration = 10;
export const baseline = 'argon2-loop';
export const companion = { path: '/health', connections: 1, rate: 50 };

export const request = (ctx) => ({
  method: 'POST',
  path: '/v1/auth/login',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ email: ctx.email, password: ctx.password }),
});
