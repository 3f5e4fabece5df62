// POST /v1/auth/login: one statement finds the user and takes an attempt slot on its password
// identity, an Argon2id verify, one statement starts the session (session row, refresh token,
// last_login_at, failures cleared), and an RS256-signed access token.
// Issue: at least 80% of a bare loop of Argon2id verifications at the same parameters (one thread
// per core), the hash running off the event loop (on the service's Argon2 pool), and GET /health
// keeps flowing meanwhile: its p99 is measured beside the login load (companion) and alone.
//
// The logins rotate over one account per connection (the bench admin and users signed up for it):
// an account takes at most five unresolved attempts at once (each attempt holds a lockout slot until
// its password is evaluated, so parallel guesses cannot exceed the lockout), which one account
// hammered by eight connections would hit.
export const name = 'login';
export const connections = 8;
export const duration = 10;
export const baseline = 'argon2-loop';
export const companion = { path: '/health', connections: 1, rate: 50 };

export async function setup(ctx) {
  const accounts = [{ email: ctx.email, password: ctx.password }];
  for (let i = 1; i < connections; i++) {
    const account = { email: `login${i}-${ctx.email}`, password: ctx.password };
    const res = await ctx.api('POST', '/v1/auth/signup', { body: account });
    if (res.status !== 201 && res.status !== 200) throw new Error(`signup: ${res.status} ${JSON.stringify(res.body)}`);
    accounts.push(account);
  }
  return { accounts };
}

export function request(ctx) {
  const bodies = ctx.accounts.map((a) => JSON.stringify(a));
  let next = 0;
  return {
    method: 'POST',
    path: '/v1/auth/login',
    headers: { 'content-type': 'application/json' },
    body: bodies[0],
    requests: [
      {
        method: 'POST',
        path: '/v1/auth/login',
        headers: { 'content-type': 'application/json' },
        setupRequest: (req) => ({ ...req, body: bodies[next++ % bodies.length] }),
      },
    ],
  };
}
