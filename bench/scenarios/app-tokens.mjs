// POST /v1/auth/app-tokens: access resolution plus an RS256 signature for one Application.
import { setup as prepare } from './effective-permissions.mjs';

export const name = 'app-tokens';
export const connections = 32;
export const duration = 10;
export const baseline = 'jwt-select';
// One RS256 signature per request: the bench also prints the machine's ceiling for that (rs256_ceiling_req_per_s).
export const signsPerRequest = 1;

export const setup = prepare;

export const request = (ctx) => ({
  method: 'POST',
  path: '/v1/auth/app-tokens',
  headers: { authorization: `Bearer ${ctx.accessToken}`, 'content-type': 'application/json' },
  body: JSON.stringify({ application_id: ctx.appId }),
});
