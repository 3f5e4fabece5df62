// IC-2 key semantics on a real operation (POST /v1/users/{id}/entitlements): the same key with another
// body or path is an error, never the old result; keys are scoped to the credential (and so to its
// mode), so another caller never receives someone else's stored response; a missing key is 400.
// The mechanics (in flight, 5xx, key order; 24 h) are in foundation/conventions-idempotency.test.ts and
// foundation/conventions-idempotency-retention-and-claims.test.ts.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../../helpers/app.js';
import { appKey, assertError, assertStatus, grantReq, newApp, person, platformKey, sql, type InjectResponse } from '../../access/support.js';
import { figure } from './support.js';

let t: TestApp;
before(async () => {
  t = await buildTestApp();
});
after(() => t.close());

test('IC-2 "mismatch → error (IETF: 422), never the old result; keys scoped to (caller, mode), so another caller never receives someone else\'s stored response"; a missing key → 400 idempotency_key_required', async () => {
  const admin = await platformKey(t);
  const app = await newApp(t, admin);
  const [u1, u2] = [await person(t), await person(t)];
  const body = { application_id: app.id, source: 'admin_grant' };
  const KEY = 'ic2-shared-key';
  const first = await grantReq(t, admin, u1.id, body, KEY);
  const created = assertStatus(first, 201);
  const notTheOldResult = (name: string, res: InjectResponse) => {
    assert.notEqual(res.headers['idempotent-replayed'], 'true', name);
    assert.ok(!res.body.includes(created.id), `${name} leaked the stored answer: ${res.body}`);
  };

  // The same caller, the same key, another request.
  const otherBody = await grantReq(t, admin, u1.id, { ...body, order_id: 'ic2' }, KEY);
  assertError(otherBody, 422, 'idempotency_key_reused');
  notTheOldResult('another body', otherBody);
  const otherPath = await grantReq(t, admin, u2.id, body, KEY);
  assertError(otherPath, 422, 'idempotency_key_reused');
  notTheOldResult('another path', otherPath);

  // Other callers sending the very same request under the same key run it as their own.
  let crossCallerReplays = 0;
  const others: [string, string, number, string][] = [
    ['another platform key', await platformKey(t), 409, 'entitlement_already_exists'],
    ["the Application's own key", await appKey(t, app.id, ['entitlements.manage']), 409, 'entitlement_already_exists'],
    ["the Application's owner", app.owner!.token, 409, 'entitlement_already_exists'],
    ['a test-mode platform key', await platformKey(t, undefined, 'test'), 404, 'user_not_found'],
  ];
  for (const [name, cred, status, code] of others) {
    const res = await grantReq(t, cred, u1.id, body, KEY);
    if (res.headers['idempotent-replayed'] === 'true' || res.body === first.body) crossCallerReplays++;
    assertError(res, status, code); // run as its own request (the 409 names the row the first call made)
  }
  figure('IC-2', `cross-caller replays: ${crossCallerReplays} / ${others.length}`);
  assert.equal(crossCallerReplays, 0);

  // The owner of the key still gets its stored answer, byte for byte.
  const again = await grantReq(t, admin, u1.id, body, KEY);
  assert.equal(again.statusCode, 201);
  assert.equal(again.body, first.body);
  assert.equal(again.headers['idempotent-replayed'], 'true');

  assertError(await grantReq(t, admin, u2.id, body, null), 400, 'idempotency_key_required');
  const rows = await sql(t, 'SELECT user_id FROM entitlements WHERE application_id = $1', [app.id]);
  assert.deepEqual(rows.map((r: any) => r.user_id), [u1.id], 'one row: nothing ran twice, nothing ran without its key');
});
