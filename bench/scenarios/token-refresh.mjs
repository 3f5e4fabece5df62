// POST /v1/auth/token/refresh: single-use rotating refresh tokens. A shared queue holds one live
// refresh token per session; each request takes one and puts back the token its answer carries, so
// every request is a valid rotation (an atomic UPDATE, an INSERT and an RS256 signature in one
// transaction). autocannon resets per-connection context after every request, hence the queue.
import pg from 'pg';

export const name = 'token-refresh';
export const connections = 32;
export const duration = 10;
// Issue: at least 50% of a bare Fastify route doing one indexed SELECT on the same database.
export const baseline = 'select';
// One RS256 signature per request: the bench also prints the machine's ceiling for that (rs256_ceiling_req_per_s).
export const signsPerRequest = 1;

export async function setup(ctx) {
  const tokens = [];
  // Each autocannon run (warm-up, rounds) abandons its in-flight requests, whose rotated tokens are
  // lost; five tokens per connection keep the queue from running dry.
  for (let i = 0; i < connections * 5 + 1; i++) {
    const res = await ctx.api('POST', '/v1/auth/login', { body: { email: ctx.email, password: ctx.password } });
    if (res.status !== 200) throw new Error(`login: ${res.status}`);
    tokens.push(res.body.refresh_token);
  }
  return { refreshTokens: tokens };
}

export function request(ctx) {
  const [probeToken, ...queue] = ctx.refreshTokens;
  return {
    method: 'POST',
    path: '/v1/auth/token/refresh',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ refresh_token: probeToken }),
    requests: [
      {
        method: 'POST',
        path: '/v1/auth/token/refresh',
        headers: { 'content-type': 'application/json' },
        setupRequest: (req) => ({ ...req, body: JSON.stringify({ refresh_token: queue.shift() }) }),
        onResponse: (status, body) => {
          if (status === 200) queue.push(JSON.parse(body).refresh_token);
        },
      },
    ],
  };
}

/**
 * The security test catalog's LD-3: under this load no refresh token was rotated twice (TK-5's
 * invariant: a used token has at most one child) and no session was ended as a reuse. Read from the
 * shared database after the run; null where the bench cannot reach it (embedded storage).
 */
export async function verify(ctx) {
  if (!ctx.databaseUrl) return { fields: { double_issues: null }, problems: [] };
  const client = new pg.Client({ connectionString: ctx.databaseUrl });
  await client.connect();
  try {
    const { rows } = await client.query(
      `SELECT (SELECT count(*) FROM (SELECT parent_id FROM refresh_tokens WHERE parent_id IS NOT NULL GROUP BY parent_id HAVING count(*) > 1) d)::int AS double_issues,
              (SELECT count(*) FROM refresh_tokens WHERE parent_id IS NOT NULL)::int AS rotations,
              (SELECT count(*) FROM sessions WHERE revoked_at IS NOT NULL)::int AS sessions_revoked`,
    );
    const { double_issues, rotations, sessions_revoked } = rows[0];
    const problems = [];
    if (double_issues > 0) problems.push(`${double_issues} refresh token(s) were rotated more than once`);
    if (sessions_revoked > 0) problems.push(`${sessions_revoked} session(s) were revoked: a valid rotation was taken for a reuse`);
    return { fields: { rotations, double_issues, sessions_revoked }, problems };
  } finally {
    await client.end();
  }
}
