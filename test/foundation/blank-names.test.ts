// A name made only of white space is not a name (docs/decisions.md "Blank names"): the names shown as a
// label, Organization and Application `name`, `email_from_name`, `display_name`, `display_handle` and an
// API key's `name`, answer 422 validation_failed naming the field, and nothing changes.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { uniqueEmail } from '../helpers/fixtures.js';
import { assertError, assertStatus, call, createOrgApi, grant, newApp, person, platformKey, slugOf, sql, type InjectResponse, type Person } from '../organizations/support.js';

let t: TestApp;
let admin: string;
let superadmin: Person;
before(async () => {
  t = await buildTestApp();
  admin = await platformKey(t);
  superadmin = await person(t, { roles: ['superadmin'] });
});
after(() => t.close());

// Spaces, tabs and line breaks, Unicode spaces (no-break, em, ideographic), and characters that show
// nothing: zero-width space, joiner and word joiner, soft hyphen, a direction mark, the Hangul filler
// and the braille blank.
const BLANKS = [' ', '   ', '\t\n\r', '\u00a0\u2003\u3000', '\u200b', '\u200b\u200d\u2060', '\u00ad', ' \u200e ', '\u3164', '\u2800'];

/**
 * 422 validation_failed naming only `path`, "must not be blank" (a nullable field too: its union with
 * null adds nothing).
 */
function assertBlank(res: InjectResponse, path: string): void {
  const error = assertError(res, 422, 'validation_failed');
  assert.deepEqual(error.details.fields, [{ path, message: 'must not be blank' }], res.body);
}

test('Organization name: a blank name on POST /v1/organizations is 422 validation_failed naming name, and no Organization is created', async () => {
  const user = await person(t);
  for (const name of BLANKS) assertBlank(await call(t, 'POST', '/v1/organizations', user.token, { name }), 'name');
  assert.equal((await sql(t, 'SELECT 1 FROM organizations WHERE created_by = $1', [user.id])).length, 0);
});

test('Organization name: a blank name on PATCH /v1/organizations/{id} is 422 validation_failed naming name, and the name stays', async () => {
  const { org, owner } = await createOrgApi(t);
  for (const name of BLANKS) assertBlank(await call(t, 'PATCH', `/v1/organizations/${org.id}`, owner.token, { name }), 'name');
  assert.equal(assertStatus(await call(t, 'GET', `/v1/organizations/${org.id}`, owner.token), 200).name, org.name);
});

test('Application name: a blank name on POST /v1/applications is 422 validation_failed naming name, and no Application is created', async () => {
  const slug = slugOf();
  const owner = await person(t);
  for (const name of BLANKS) {
    assertBlank(await call(t, 'POST', '/v1/applications', admin, { slug, name, launch_url: 'https://app.example.com/launch', owner_user_id: owner.id }), 'name');
  }
  assert.equal((await sql(t, 'SELECT 1 FROM applications WHERE slug = $1', [slug])).length, 0);
});

test('Application name: a blank name on PATCH /v1/applications/{id} is 422 validation_failed naming name, and the name stays', async () => {
  const app = await newApp(t, admin);
  for (const name of BLANKS) assertBlank(await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { name }), 'name');
  assert.equal(assertStatus(await call(t, 'GET', `/v1/applications/${app.id}`, admin), 200).name, app.body.name);
});

test('Application email_from_name: a blank one on POST /v1/applications is 422 validation_failed naming email_from_name, and no Application is created', async () => {
  const slug = slugOf();
  const owner = await person(t);
  for (const email_from_name of BLANKS) {
    const body = { slug, name: 'Acme', email_from_name, launch_url: 'https://app.example.com/launch', owner_user_id: owner.id };
    assertBlank(await call(t, 'POST', '/v1/applications', admin, body), 'email_from_name');
  }
  assert.equal((await sql(t, 'SELECT 1 FROM applications WHERE slug = $1', [slug])).length, 0);
});

test('Application email_from_name: a blank one on PATCH /v1/applications/{id} is 422 validation_failed naming email_from_name; null still clears it', async () => {
  const app = await newApp(t, admin, { email_from_name: 'Acme Support' });
  for (const email_from_name of BLANKS) {
    assertBlank(await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { email_from_name }), 'email_from_name');
  }
  assert.equal(assertStatus(await call(t, 'GET', `/v1/applications/${app.id}`, admin), 200).email_from_name, 'Acme Support');
  assert.equal(assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { email_from_name: null }), 200).email_from_name, null);
});

test('display_name (1–100 characters): a blank one on POST /v1/auth/signup is 422 validation_failed naming display_name, and no account is created', async () => {
  const email = uniqueEmail('blank');
  for (const display_name of BLANKS) {
    assertBlank(await call(t, 'POST', '/v1/auth/signup', null, { email, password: 'violet-harbor-cinnamon-42', display_name }), 'display_name');
  }
  assert.equal((await sql(t, 'SELECT 1 FROM users WHERE email = $1', [email])).length, 0);
});

test('display_name (1–100 characters): a blank one on POST /v1/users is 422 validation_failed naming display_name, and no user is created', async () => {
  const email = uniqueEmail('blank');
  for (const display_name of BLANKS) assertBlank(await call(t, 'POST', '/v1/users', admin, { email, display_name }), 'display_name');
  assert.equal((await sql(t, 'SELECT 1 FROM users WHERE email = $1', [email])).length, 0);
});

test('display_name (1–100 characters): a blank one on PATCH /v1/users/{id}/profile is 422 validation_failed naming display_name, and the name stays', async () => {
  const user = await person(t);
  assertStatus(await call(t, 'PATCH', '/v1/users/me/profile', user.token, { display_name: 'Ada' }), 200);
  for (const display_name of BLANKS) assertBlank(await call(t, 'PATCH', '/v1/users/me/profile', user.token, { display_name }), 'display_name');
  assert.equal(assertStatus(await call(t, 'GET', '/v1/users/me/profile', user.token), 200).display_name, 'Ada');
});

test('AppProfile display_handle (1–64 characters): a blank one is 422 validation_failed naming display_handle; null still clears it', async () => {
  const app = await newApp(t, admin);
  const user = await person(t);
  await grant(t, admin, user.id, app.id);
  const url = `/v1/users/me/apps/${app.id}/profile`;
  assertStatus(await call(t, 'PATCH', url, user.token, { display_handle: 'Captain' }), 200);
  for (const display_handle of BLANKS) assertBlank(await call(t, 'PATCH', url, user.token, { display_handle }), 'display_handle');
  assert.equal(assertStatus(await call(t, 'GET', url, user.token), 200).display_handle, 'Captain');
  assert.equal(assertStatus(await call(t, 'PATCH', url, user.token, { display_handle: null }), 200).display_handle, null);
});

test('API key name: a blank name on POST /v1/api-keys is 422 validation_failed naming name, and no key is created', async () => {
  for (const name of BLANKS) {
    assertBlank(await call(t, 'POST', '/v1/api-keys', superadmin.token, { name, scope: 'platform', permissions: ['users.list'] }), 'name');
  }
  assert.equal((await sql(t, 'SELECT 1 FROM api_keys WHERE created_by_user_id = $1', [superadmin.id])).length, 0);
});

test('API key name: a blank name on PATCH /v1/api-keys/{id} is 422 validation_failed naming name, and the name stays', async () => {
  const key = assertStatus(await call(t, 'POST', '/v1/api-keys', superadmin.token, { name: 'svc', scope: 'platform', permissions: ['users.list'] }), 201);
  for (const name of BLANKS) assertBlank(await call(t, 'PATCH', `/v1/api-keys/${key.id}`, superadmin.token, { name }), 'name');
  assert.equal(assertStatus(await call(t, 'GET', `/v1/api-keys/${key.id}`, superadmin.token), 200).name, 'svc');
});

test('a name with white space around other characters is stored and returned as sent (no trimming)', async () => {
  const user = await person(t);
  const org = assertStatus(await call(t, 'POST', '/v1/organizations', user.token, { name: '  Acme\u00a0' }), 201);
  assert.equal(org.name, '  Acme\u00a0');
  const profile = assertStatus(await call(t, 'PATCH', '/v1/users/me/profile', user.token, { display_name: ' A ' }), 200);
  assert.equal(profile.display_name, ' A ');
});

test('a name with an invisible character beside visible ones is stored as sent (a zero-width joiner inside an emoji sequence, a soft hyphen inside a word)', async () => {
  const user = await person(t);
  for (const name of ['\u{1F469}\u200d\u{1F4BB}', 'Zu\u00adrich', '\u200bA']) {
    assert.equal(assertStatus(await call(t, 'POST', '/v1/organizations', user.token, { name }), 201).name, name);
  }
});
