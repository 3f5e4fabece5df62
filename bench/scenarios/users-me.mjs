// GET /v1/users/me with a bearer access token: JWT verification, the session + permissions query of
// the gate, then the user's own row.
export const name = 'users-me';
export const connections = 32;
export const duration = 10;
export const baseline = 'jwt-select';

export const request = (ctx) => ({ method: 'GET', path: '/v1/users/me', headers: { authorization: `Bearer ${ctx.accessToken}` } });
