// GET /v1/users/{id} with an API key: the key is resolved by its hash (one indexed query), then the
// user row is read. (`me` needs a User token, so a key addresses the user by id.)
export const name = 'users-key';
export const connections = 32;
export const duration = 10;
export const baseline = 'jwt-select';

export async function setup(ctx) {
  const res = await ctx.api('POST', '/v1/api-keys', {
    token: ctx.accessToken,
    body: { name: 'bench', scope: 'platform', permissions: ['users.list'] },
  });
  if (res.status !== 201) throw new Error(`create key: ${res.status} ${JSON.stringify(res.body)}`);
  return { apiKey: res.body.secret };
}

export const request = (ctx) => ({ method: 'GET', path: `/v1/users/${ctx.userId}`, headers: { authorization: `Bearer ${ctx.apiKey}` } });
