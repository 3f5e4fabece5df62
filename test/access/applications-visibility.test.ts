// Applications (Part B): visibility for reading, list filters and the list view.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { appKey, assertError, assertStatus, call, createOrg, grant, newApp, orgGrant, person, platformKey, rand, setReview, sql } from './support.js';
import { applicationCalls } from './applications-support.js';

let t: TestApp;
let admin: string;
before(async () => {
  t = await buildTestApp();
  admin = await platformKey(t);
});
after(() => t.close());

const LIST_KEYS = ['description', 'icon_url', 'id', 'name', 'review_status', 'slug', 'visibility'];
const { get } = applicationCalls(() => t);
const list = async (cred: string, query = '') => assertStatus(await call(t, 'GET', `/v1/applications?limit=100${query}`, cred), 200);
const listIds = async (cred: string, query = '') => (await list(cred, query)).data.map((a: { id: string }) => a.id);

// ---- visibility ----------------------------------------------------------------------------------

test('public: every authenticated caller reads an approved public Application; unauthenticated gets 401', async () => {
  const { id } = await newApp(t, admin, { visibility: 'public' });
  const stranger = await person(t);
  const res = assertStatus(await get(stranger.token, id), 200);
  assert.equal(res.id, id);
  assert.ok((await listIds(stranger.token)).includes(id), '(await listIds(stranger.token)).includes(id)');
  assert.equal((await call(t, 'GET', `/v1/applications/${id}`, null)).statusCode, 401);
});

test('invite_only: visible to users with an access path, its owner, its own key and applications.manage; others get 404 application_not_found', async () => {
  const app = await newApp(t, admin, { visibility: 'invite_only' });
  const stranger = await person(t);
  const holder = await person(t);
  const ent = await grant(t, admin, holder.id, app.id);
  const appsManager = await person(t, { roles: ['superadmin'] });
  const ownKey = await appKey(t, app.id);
  const other = await newApp(t, admin);
  const otherKey = await appKey(t, other.id, ['entitlements.manage', 'users.list']);

  for (const cred of [holder.token, app.owner!.token, ownKey, admin, appsManager.token]) assertStatus(await get(cred, app.id), 200);
  for (const cred of [stranger.token, otherKey]) assertError(await get(cred, app.id), 404, 'application_not_found');
  assert.ok((await listIds(holder.token)).includes(app.id), '(await listIds(holder.token)).includes(app.id)');
  assert.ok(!(await listIds(stranger.token)).includes(app.id), '!(await listIds(stranger.token)).includes(app.id)');

  // A disabled personal row is still an access path.
  assertStatus(await call(t, 'PATCH', `/v1/entitlements/${ent.id}`, admin, { status: 'disabled', disabled_reason: 'paused' }), 200);
  assertStatus(await get(holder.token, app.id), 200);
});

test('invite_only: an active member of an Organization holding a grant has an access path and sees it', async () => {
  const app = await newApp(t, admin, { visibility: 'invite_only' });
  const member = await person(t);
  const pending = await person(t);
  const org = await createOrg(t, [{ userId: member.id }, { userId: pending.id, status: 'pending' }]);
  await sql(
    t,
    `INSERT INTO entitlements (id, organization_id, application_id, status, source, starts_at, member_scope, member_overrides, test_mode, created_at, updated_at, start_notified_at)
     VALUES ($1, $2, $3, 'active', 'org_seat', now(), 'all_members', '{}', false, now(), now(), now())`,
    [`ent_${rand(8)}`, org, app.id],
  );
  assertStatus(await get(member.token, app.id), 200);
  assertError(await get(pending.token, app.id), 404, 'application_not_found');
});

test('invite_only: an org grant row that excludes a member is "listed but never an access path": a member on the denylist does not see the Application, an included member does', async () => {
  const app = await newApp(t, admin, { visibility: 'invite_only' });
  const included = await person(t);
  const excluded = await person(t);
  const org = await createOrg(t, [{ userId: included.id }, { userId: excluded.id }]);
  await sql(
    t,
    `INSERT INTO entitlements (id, organization_id, application_id, status, source, starts_at, member_scope, member_overrides, test_mode, created_at, updated_at, start_notified_at)
     VALUES ($1, $2, $3, 'active', 'org_seat', now(), 'denylist', $4, false, now(), now(), now())`,
    [`ent_${rand(8)}`, org, app.id, [excluded.id]],
  );
  assertStatus(await get(included.token, app.id), 200);
  assertError(await get(excluded.token, app.id), 404, 'application_not_found');
});

test('invite_only: a member an org grant reaches beyond the Tenant\'s seat cap (member_decision seat_limit) has no access path ("Rows that exclude the user (member_decision excluded or seat_limit) are listed but never an access path"): the Application stays hidden from them (404 application_not_found) while an included member of the same grant sees it', async () => {
  const app = await newApp(t, admin, { visibility: 'invite_only' });
  const included = await person(t);
  const waiting = await person(t);
  const org = await createOrg(t, [{ userId: included.id }, { userId: waiting.id }]);
  const grantId = await orgGrant(t, org, app.id);
  await sql(t, 'INSERT INTO org_seat_limits (entitlement_id, user_id, created_at) VALUES ($1, $2, $3)', [grantId, waiting.id, t.clock.now()]);
  assertStatus(await get(included.token, app.id), 200);
  assertError(await get(waiting.token, app.id), 404, 'application_not_found');
});

test('internal: only applications.manage and its own app key; its owner, users with a grant and other callers get 404', async () => {
  const app = await newApp(t, admin, { visibility: 'internal' });
  const holder = await person(t);
  await grant(t, admin, holder.id, app.id);
  const stranger = await person(t);
  const ownKey = await appKey(t, app.id);
  const entManager = await platformKey(t, ['entitlements.manage', 'users.list']);
  for (const cred of [admin, ownKey]) assertStatus(await get(cred, app.id), 200);
  for (const cred of [app.owner!.token, holder.token, stranger.token, entManager]) assertError(await get(cred, app.id), 404, 'application_not_found');
  assertError(await call(t, 'PATCH', `/v1/applications/${app.id}`, app.owner!.token, { name: 'x' }), 404, 'application_not_found');
  for (const token of [app.owner!.token, holder.token]) assert.ok(!(await listIds(token)).includes(app.id), '!(await listIds(token)).includes(app.id)');
  assert.ok(!(await listIds(app.owner!.token, '&owned=true')).includes(app.id), '!(await listIds(app.owner!.token, \'&owned=true\')).includes(app.id)');
  assert.ok((await listIds(admin)).includes(app.id), '(await listIds(admin)).includes(app.id)');
});

test('internal: owner rights go with seeing the Application, so its owner cannot list its Entitlements, mint or see its API keys, or create its webhooks', async () => {
  const app = await newApp(t, admin, { visibility: 'internal' });
  const holder = await person(t);
  await grant(t, admin, holder.id, app.id);
  const owner = app.owner!.token;
  const superadminToken = (await person(t, { roles: ['superadmin'] })).token;
  // Owning nothing else, the owner is a caller who owns no Application.
  assertError(await call(t, 'GET', `/v1/entitlements?application_id=${app.id}`, owner), 403, 'forbidden');
  assertError(await call(t, 'GET', '/v1/entitlements', owner), 403, 'forbidden');
  // As for anyone who may not see it, the Application is as unknown there: 404, not 403.
  assertError(await call(t, 'POST', '/v1/api-keys', owner, { name: 'k', scope: app.id, intended_use: 'service', permissions: [] }), 404, 'application_not_found');
  const adminKey = assertStatus(await call(t, 'POST', '/v1/api-keys', superadminToken, { name: 'k', scope: app.id, intended_use: 'service', permissions: [] }), 201);
  assert.ok(!assertStatus(await call(t, 'GET', '/v1/api-keys', owner), 200).data.some((k: { id: string }) => k.id === adminKey.id), '!assertStatus(await call(t, \'GET\', \'/v1/api-keys\', owner), 200).data.some((k: { id: string }) => k.id === adminKey.id)');
  assertError(await call(t, 'GET', `/v1/api-keys/${adminKey.id}`, owner), 404, 'api_key_not_found');
  assertError(await call(t, 'POST', '/v1/webhooks', owner, { url: 'https://hooks.example.com/x', scope: app.id, events: ['*'] }), 403, 'forbidden');
  // The same owner of a public Application has all of them.
  await sql(t, `UPDATE applications SET visibility = 'public' WHERE id = $1`, [app.id]);
  assert.deepEqual(assertStatus(await call(t, 'GET', `/v1/entitlements?application_id=${app.id}`, owner), 200).data.map((e: { user_id: string }) => e.user_id), [holder.id]);
  assertStatus(await call(t, 'GET', `/v1/api-keys/${adminKey.id}`, owner), 200);
});

test('non-approved Applications are visible only to the owner, the own key and applications.manage', async () => {
  const app = await newApp(t, admin, { visibility: 'public' });
  const holder = await person(t);
  await grant(t, admin, holder.id, app.id);
  const stranger = await person(t);
  const ownKey = await appKey(t, app.id);
  for (const status of ['suspended', 'pending_review', 'rejected']) {
    await setReview(t, app.id, status);
    for (const cred of [app.owner!.token, ownKey, admin]) assert.equal(assertStatus(await get(cred, app.id), 200).review_status, status);
    for (const cred of [holder.token, stranger.token]) assertError(await get(cred, app.id), 404, 'application_not_found');
    assert.ok(!(await listIds(stranger.token)).includes(app.id), '!(await listIds(stranger.token)).includes(app.id)');
    assert.ok((await listIds(app.owner!.token)).includes(app.id), '(await listIds(app.owner!.token)).includes(app.id)');
  }
  await setReview(t, app.id, 'approved');
});

test("an app-confined key reaches only its own Application: another (public) Application is 404 application_not_found and absent from its list", async () => {
  const mine = await newApp(t, admin, { visibility: 'public' });
  const theirs = await newApp(t, admin, { visibility: 'public' });
  const key = await appKey(t, mine.id, ['entitlements.manage', 'users.list', 'roles.manage', 'audit.view']);
  assertStatus(await get(key, mine.id), 200);
  assertError(await get(key, theirs.id), 404, 'application_not_found');
  const ids = await listIds(key);
  assert.deepEqual(ids, [mine.id]);
});

test('GET of an unknown Application id is 404 application_not_found', async () => {
  assertError(await get(admin, 'app_doesnotexist'), 404, 'application_not_found');
});

// ---- list ----------------------------------------------------------------------------------------

test('the list view contains only id, slug, name, description, icon_url, visibility, review_status', async () => {
  const app = await newApp(t, admin, { description: 'hello', icon_url: 'https://cdn.example.com/i.png' });
  const viewer = await person(t);
  const item = (await list(viewer.token)).data.find((a: { id: string }) => a.id === app.id);
  assert.deepEqual(Object.keys(item).sort(), LIST_KEYS);
  assert.deepEqual(item, { id: app.id, slug: app.slug, name: 'Test App', description: 'hello', icon_url: 'https://cdn.example.com/i.png', visibility: 'public', review_status: 'approved' });
  const adminItem = (await list(admin)).data.find((a: { id: string }) => a.id === app.id);
  assert.deepEqual(Object.keys(adminItem).sort(), LIST_KEYS);
  const body = await list(viewer.token);
  assert.deepEqual(Object.keys(body.page).sort(), ['has_more', 'next_cursor']);
});

test('list filter visibility returns only that visibility', async () => {
  const pub = await newApp(t, admin, { visibility: 'public' });
  const inv = await newApp(t, admin, { visibility: 'invite_only' });
  const data = (await list(admin, '&visibility=invite_only')).data;
  assert.ok(data.every((a: { visibility: string }) => a.visibility === 'invite_only'), 'data.every((a: { visibility: string }) => a.visibility === \'invite_only\')');
  const ids = data.map((a: { id: string }) => a.id);
  assert.ok(ids.includes(inv.id), 'ids.includes(inv.id)');
  assert.ok(!ids.includes(pub.id), '!ids.includes(pub.id)');
});

test('list filter review_status: non-admins only see approved plus their own', async () => {
  const mine = await newApp(t, admin);
  const theirs = await newApp(t, admin);
  await setReview(t, mine.id, 'suspended');
  await setReview(t, theirs.id, 'suspended');
  const ownerView = await listIds(mine.owner!.token, '&review_status=suspended');
  assert.ok(ownerView.includes(mine.id), 'ownerView.includes(mine.id)');
  assert.ok(!ownerView.includes(theirs.id), '!ownerView.includes(theirs.id)');
  const stranger = await person(t);
  assert.deepEqual(await listIds(stranger.token, '&review_status=suspended'), []);
  const adminView = await listIds(admin, '&review_status=suspended');
  assert.ok(adminView.includes(mine.id) && adminView.includes(theirs.id), 'adminView.includes(mine.id) && adminView.includes(theirs.id)');
  await setReview(t, mine.id, 'approved');
  await setReview(t, theirs.id, 'approved');
});

test('review_status=pending_review with applications.manage is the review queue, oldest first', async () => {
  const a = await newApp(t, admin);
  const b = await newApp(t, admin);
  const c = await newApp(t, admin);
  const base = Date.now() - 10 * 86400_000;
  // b is the oldest, then c, then a.
  await setReview(t, a.id, 'pending_review', new Date(base + 3000));
  await setReview(t, b.id, 'pending_review', new Date(base + 1000));
  await setReview(t, c.id, 'pending_review', new Date(base + 2000));
  const queue = (await listIds(admin, '&review_status=pending_review')).filter((id: string) => [a.id, b.id, c.id].includes(id));
  assert.deepEqual(queue, [b.id, c.id, a.id]);
  // Paging the queue keeps the order.
  const first = await list(admin, '&review_status=pending_review');
  const all = first.data.map((x: { id: string }) => x.id);
  const pageOne = assertStatus(await call(t, 'GET', '/v1/applications?review_status=pending_review&limit=1', admin), 200);
  assert.equal(pageOne.data[0].id, all[0]);
  const pageTwo = assertStatus(await call(t, 'GET', `/v1/applications?review_status=pending_review&limit=1&cursor=${encodeURIComponent(pageOne.page.next_cursor)}`, admin), 200);
  assert.equal(pageTwo.data[0].id, all[1]);
  for (const x of [a, b, c]) await setReview(t, x.id, 'approved');
});

test('list filter owned=true returns only Applications the caller owns (owner_user_id or org_admin of the owning Organization)', async () => {
  const owner = await person(t);
  const mine = await newApp(t, admin, { owner_user_id: owner.id });
  const org = await createOrg(t, [{ userId: owner.id, role: 'org_admin' }]);
  const orgApp = await newApp(t, admin, { owner_organization_id: org });
  const member = await person(t);
  const memberOrg = await createOrg(t, [{ userId: (await person(t)).id, role: 'org_admin' }, { userId: member.id, role: 'member' }]);
  const notAdminApp = await newApp(t, admin, { owner_organization_id: memberOrg });
  await newApp(t, admin);
  assert.deepEqual((await listIds(owner.token, '&owned=true')).sort(), [mine.id, orgApp.id].sort());
  assert.ok(!(await listIds(member.token, '&owned=true')).includes(notAdminApp.id), '!(await listIds(member.token, \'&owned=true\')).includes(notAdminApp.id)');
});

test('owner rights go to "any active org_admin of owner_organization_id": a plain member or a pending org_admin of the owning Organization may not create a key scoped to the Application (403 forbidden) nor list it as owned; its active org_admin may (201)', async () => {
  const orgAdmin = await person(t);
  const member = await person(t);
  const pendingAdmin = await person(t);
  const org = await createOrg(t, [{ userId: orgAdmin.id, role: 'org_admin' }, { userId: member.id, role: 'member' }, { userId: pendingAdmin.id, role: 'org_admin', status: 'pending' }]);
  const app = await newApp(t, admin, { owner_organization_id: org });
  const body = { name: 'app', scope: app.id, permissions: [] };
  for (const notOwner of [member, pendingAdmin]) {
    assertError(await call(t, 'POST', '/v1/api-keys', notOwner.token, body), 403, 'forbidden');
    assert.ok(!(await listIds(notOwner.token, '&owned=true')).includes(app.id), 'not listed as owned');
  }
  const key = assertStatus(await call(t, 'POST', '/v1/api-keys', orgAdmin.token, body), 201);
  assert.ok((await listIds(orgAdmin.token, '&owned=true')).includes(app.id), 'listed as owned');
  // Its keys are listed to the owner only.
  const keyIds = async (cred: string) => assertStatus(await call(t, 'GET', `/v1/api-keys?scope=${app.id}`, cred), 200).data.map((k: { id: string }) => k.id);
  assert.deepEqual(await keyIds(orgAdmin.token), [key.id]);
  for (const notOwner of [member, pendingAdmin]) assert.deepEqual(await keyIds(notOwner.token), []);
});

test('docs/decisions.md "Owners": owner rights go with seeing the Application, so the owner of an internal one (shown only to applications.manage and its own key) may not create its keys: 404 application_not_found, as for an unknown id', async () => {
  const owner = await person(t);
  const internal = await newApp(t, admin, { owner_user_id: owner.id, visibility: 'internal' });
  assertError(await call(t, 'POST', '/v1/api-keys', owner.token, { name: 'app', scope: internal.id, permissions: [] }), 404, 'application_not_found');
});

test('list filters tenant_id, owner_user_id, owner_organization_id need applications.manage or tenants.manage', async () => {
  const app = await newApp(t, admin);
  const user = await person(t);
  for (const q of [`&tenant_id=${app.tenant_id}`, `&owner_user_id=${app.owner!.id}`]) {
    assertError(await call(t, 'GET', `/v1/applications?${q.slice(1)}`, user.token), 403, 'forbidden');
    assertError(await call(t, 'GET', `/v1/applications?${q.slice(1)}`, app.owner!.token), 403, 'forbidden');
  }
  assert.deepEqual(await listIds(admin, `&tenant_id=${app.tenant_id}`), [app.id]);
  assert.deepEqual(await listIds(admin, `&owner_user_id=${app.owner!.id}`), [app.id]);
  const tenants = await platformKey(t, ['tenants.manage']);
  assert.ok((await listIds(tenants, `&tenant_id=${app.tenant_id}`)).includes(app.id), '(await listIds(tenants, `&tenant_id=${app.tenant_id}`)).includes(app.id)');
});

test('list filter owner_organization_id needs applications.manage or tenants.manage: 403 forbidden for others, the org_admin owner included', async () => {
  const orgAdmin = await person(t);
  const org = await createOrg(t, [{ userId: orgAdmin.id, role: 'org_admin' }]);
  const app = await newApp(t, admin, { owner_organization_id: org });
  await newApp(t, admin);
  for (const cred of [orgAdmin.token, (await person(t)).token]) {
    assertError(await call(t, 'GET', `/v1/applications?owner_organization_id=${org}`, cred), 403, 'forbidden');
  }
  assert.deepEqual(await listIds(admin, `&owner_organization_id=${org}`), [app.id]);
});
