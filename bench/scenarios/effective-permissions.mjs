// GET /v1/users/me/apps/{appId}/effective-permissions: the live access check (issue 5's hottest call).
// Setup: an Application owned by the bench admin with a declared permission, a Role holding it, a
// personal Entitlement and the Role assigned, so the check resolves to allowed with one permission.
export const name = 'effective-permissions';
export const connections = 32;
export const duration = 10;
export const baseline = 'jwt-select';

// Both access scenarios share one Application (a Starter Tenant allows one).
let prepared = null;
export function setup(ctx) {
  prepared ??= createFixture(ctx);
  return prepared;
}

async function createFixture(ctx) {
  const slug = `bench${Date.now().toString(36)}`;
  const appId = `app_${slug}`;
  const must = (res, what) => {
    if (res.status >= 300) throw new Error(`${what}: ${res.status} ${JSON.stringify(res.body)}`);
    return res.body;
  };
  must(
    await ctx.api('POST', '/v1/applications', {
      token: ctx.accessToken,
      body: {
        slug,
        name: 'Bench',
        launch_url: 'https://bench.example',
        owner_user_id: ctx.userId,
        permissions: [{ key: `app.${slug}.read`, description: 'read' }],
        available_app_roles: ['reader'],
        default_app_role: 'reader',
      },
    }),
    'create application',
  );
  must(await ctx.api('PATCH', `/v1/roles/role_${slug}_reader`, { token: ctx.accessToken, body: { permissions: [`app.${slug}.read`] } }), 'role permissions');
  const grant = await fetch(`${ctx.serviceUrl}/v1/users/${ctx.userId}/entitlements`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${ctx.accessToken}`, 'idempotency-key': `bench-${slug}` },
    body: JSON.stringify({ application_id: appId, source: 'admin_grant' }),
  });
  if (grant.status !== 201) throw new Error(`grant: ${grant.status} ${await grant.text()}`);
  return { appId };
}

export const request = (ctx) => ({
  method: 'GET',
  path: `/v1/users/me/apps/${ctx.appId}/effective-permissions`,
  headers: { authorization: `Bearer ${ctx.accessToken}` },
});
