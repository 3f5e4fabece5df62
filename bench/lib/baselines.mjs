// The baselines a scenario can compare against: a route of bench/baseline.mjs and the request that
// exercises it. A scenario names one in its `baseline` export (or supplies baselineRequest itself).
export const BASELINES = {
  /** Bearer JWT (RS256, jose + the service's JWKS) and one indexed SELECT by primary key. */
  'jwt-select': {
    request: (ctx) => ({ method: 'GET', path: '/jwt-select', headers: { authorization: `Bearer ${ctx.accessToken}` } }),
  },
  /** One indexed SELECT by primary key, without any credential check. */
  select: {
    request: (ctx) => ({ method: 'GET', path: `/select?id=${encodeURIComponent(ctx.userId)}` }),
  },
  /**
   * Bare loops of Argon2id verifications (19456 KiB, t=2, p=1) in the baseline process, one thread
   * per core: no HTTP, no SQL. Measured by `loop`, not autocannon.
   */
  'argon2-loop': {
    loop: (ctx, { seconds }) => ({ path: '/argon2-loop', body: { seconds } }),
  },
  /** One indexed SELECT by lower(email) and an Argon2id verify (19456 KiB, t=2, p=1). */
  'argon2-select': {
    request: (ctx) => ({
      method: 'POST',
      path: '/argon2-select',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email: ctx.email, password: ctx.password }),
    }),
  },
};
