// Conventions (Part A), Idempotency-Key through the probe module (test/helpers/probe-module.ts): replays,
// keys in flight, a reused key, keys per credential and operation, errors and rollbacks. Retention,
// limits and claims taken over are in conventions-idempotency-retention-and-claims.test.ts; PATCH,
// lists, modes and bodies in conventions-lists-and-requests.test.ts.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { bearer, createApiKey, createUser, login, userToken } from '../helpers/fixtures.js';
import { holder, probeCalls, probeModule, PROBE_TABLES } from '../helpers/probe-module.js';

let t: TestApp;
const here = holder();
before(async () => {
  t = await buildTestApp({}, undefined, [probeModule({ delayMs: 150, hold: here.hold })]);
  await t.database.scoped('system').exec(PROBE_TABLES);
});
after(() => t.close());

const { countItems, post } = probeCalls(() => t);

test('Idempotency-Key: a retry with the same key returns the original status and body', async () => {
  const { token } = await userToken(t);
  const first = await post(token, 'k-replay', { name: 'replay' });
  assert.equal(first.statusCode, 201);
  const again = await post(token, 'k-replay', { name: 'replay' });
  assert.equal(again.statusCode, 201);
  assert.equal(again.body, first.body);
  assert.equal(again.headers['idempotent-replayed'], 'true');
  assert.equal(await countItems('replay'), 1);
});

test('Idempotency-Key: the replay is the original result as sent: same status, same body, Content-Type application/json (Part A convention 1)', async () => {
  const { token } = await userToken(t);
  const first = await post(token, 'k-ctype', { name: 'ctype' });
  assert.equal(first.statusCode, 201);
  const again = await post(token, 'k-ctype', { name: 'ctype' });
  assert.equal(again.headers['idempotent-replayed'], 'true');
  assert.match(String(again.headers['content-type']), /^application\/json/);
  assert.equal(again.headers['content-type'], first.headers['content-type']);
  assert.deepEqual(again.json(), first.json());
});

test('Idempotency-Key: a retry while the first request is still running gets 409 idempotency_key_in_flight', async () => {
  const { token } = await userToken(t);
  const [a, b] = await Promise.all([post(token, 'k-flight', { name: 'flight' }), post(token, 'k-flight', { name: 'flight' })]);
  const statuses = [a.statusCode, b.statusCode].sort();
  assert.deepEqual(statuses, [201, 409]);
  const conflict = a.statusCode === 409 ? a : b;
  assert.equal(conflict.json().error.code, 'idempotency_key_in_flight');
  assert.equal(await countItems('flight'), 1);
  const later = await post(token, 'k-flight', { name: 'flight' });
  assert.equal(later.statusCode, 201);
  assert.equal(later.headers['idempotent-replayed'], 'true');
});

test('Idempotency-Key: reusing a key with a different body is refused with 422 idempotency_key_reused', async () => {
  const { token } = await userToken(t);
  assert.equal((await post(token, 'k-reuse', { name: 'reuse-a' })).statusCode, 201);
  const res = await post(token, 'k-reuse', { name: 'reuse-b' });
  assert.equal(res.statusCode, 422);
  assert.equal(res.json().error.code, 'idempotency_key_reused');
  assert.equal(await countItems('reuse-b'), 0);
});

test('Idempotency-Key: "the same key with a different request gets 422 idempotency_key_reused" also while the first request is still running (as another process answers it), and the first one completes', async () => {
  const { token } = await userToken(t);
  const gate = here.gate('reuse-running');
  try {
    const first = post(token, 'k-reuse-running', { name: 'reuse-running' });
    await gate.arrived;
    const other = await post(token, 'k-reuse-running', { name: 'reuse-running-other' });
    assert.equal(other.statusCode, 422, other.body);
    assert.equal(other.json().error.code, 'idempotency_key_reused');
    const same = await post(token, 'k-reuse-running', { name: 'reuse-running' });
    assert.equal(same.statusCode, 409, same.body);
    assert.equal(same.json().error.code, 'idempotency_key_in_flight');
    gate.release();
    assert.equal((await first).statusCode, 201);
    assert.equal(await countItems('reuse-running'), 1);
    assert.equal(await countItems('reuse-running-other'), 0);
    // The same claim as another process holds it (its record in flight, nothing of it in this process): the same answers.
    await t.database
      .scoped('system')
      .query(`UPDATE idempotency_keys SET status = 'in_flight', locked_until = $1 WHERE key = 'k-reuse-running'`, [new Date(t.clock.now().getTime() + 60_000)]);
    const otherElsewhere = await post(token, 'k-reuse-running', { name: 'reuse-running-other' });
    assert.equal(otherElsewhere.statusCode, 422, otherElsewhere.body);
    assert.equal(otherElsewhere.json().error.code, 'idempotency_key_reused');
    const sameElsewhere = await post(token, 'k-reuse-running', { name: 'reuse-running' });
    assert.equal(sameElsewhere.statusCode, 409, sameElsewhere.body);
    assert.equal(sameElsewhere.json().error.code, 'idempotency_key_in_flight');
  } finally {
    gate.release();
  }
});

test('Idempotency-Key: "A retry with the same key returns the original result" when the retry sends the same body with its keys in another order', async () => {
  const key = (await createApiKey(t, { scope: 'platform', permissions: ['applications.manage', 'entitlements.manage'] })).secret;
  const owner = await createUser(t);
  const app = await t.app.inject({
    method: 'POST', url: '/v1/applications', headers: bearer(key),
    payload: { slug: `idem${Date.now() % 1e6}`, name: 'Idem', launch_url: 'https://idem.example.com/', owner_user_id: owner.id },
  });
  assert.equal(app.statusCode, 201, app.body);
  const user = await createUser(t);
  const grant = (payload: string) =>
    t.app.inject({ method: 'POST', url: `/v1/users/${user.id}/entitlements`, headers: { ...bearer(key), 'idempotency-key': 'k-order', 'content-type': 'application/json' }, payload });
  const appId = JSON.stringify(app.json().id);
  const first = await grant(`{"application_id":${appId},"source":"admin_grant"}`);
  assert.equal(first.statusCode, 201, first.body);
  const again = await grant(`{"source":"admin_grant","application_id":${appId}}`);
  assert.equal(again.statusCode, 201, again.body);
  assert.equal(again.body, first.body);
  assert.equal(again.headers['idempotent-replayed'], 'true');

  // Nested objects too; arrays keep their order, so a reordered array is another request.
  const { token } = await userToken(t);
  assert.equal((await post(token, 'k-nested', { name: 'nested', extra: { a: 1, b: [1, 2] } })).statusCode, 201);
  const nested = await post(token, 'k-nested', { extra: { b: [1, 2], a: 1 }, name: 'nested' });
  assert.equal(nested.statusCode, 201, nested.body);
  assert.equal(nested.headers['idempotent-replayed'], 'true');
  assert.equal(await countItems('nested'), 1);
  const reordered = await post(token, 'k-nested', { name: 'nested', extra: { a: 1, b: [2, 1] } });
  assert.equal(reordered.statusCode, 422);
  assert.equal(reordered.json().error.code, 'idempotency_key_reused');
});

test('Idempotency-Key: records are keyed by credential and operation (docs/conventions.md: "method and route"): the same key sent by the same caller to another operation runs it (201), neither 422 idempotency_key_reused nor the other operation\'s answer', async () => {
  const { token } = await userToken(t);
  const item = await post(token, 'k-per-operation', { name: 'per-operation' });
  assert.equal(item.statusCode, 201, item.body);
  const org = await t.app.inject({
    method: 'POST',
    url: '/v1/organizations',
    headers: { ...bearer(token), 'idempotency-key': 'k-per-operation' },
    payload: { name: 'Per Operation Org' },
  });
  assert.equal(org.statusCode, 201, org.body);
  assert.equal(org.headers['idempotent-replayed'], undefined);
  assert.match(org.json().id, /^org_/);
  const replay = await post(token, 'k-per-operation', { name: 'per-operation' });
  assert.equal(replay.headers['idempotent-replayed'], 'true');
  assert.equal(replay.body, item.body);
  assert.equal(await countItems('per-operation'), 1);
});

test('Idempotency-Key: missing where required gets 400 idempotency_key_required and changes nothing', async () => {
  const { token } = await userToken(t);
  const res = await post(token, null, { name: 'nokey' });
  assert.equal(res.statusCode, 400);
  assert.equal(res.json().error.code, 'idempotency_key_required');
  assert.equal(await countItems('nokey'), 0);
});

test('Idempotency-Key: keys are per credential, so another caller with the same key is not replayed', async () => {
  const one = await userToken(t);
  const two = await userToken(t);
  assert.equal((await post(one.token, 'k-shared', { name: 'percred' })).statusCode, 201);
  const other = await post(two.token, 'k-shared', { name: 'percred' });
  assert.equal(other.statusCode, 201);
  assert.equal(other.headers['idempotent-replayed'], undefined);
  assert.equal(await countItems('percred'), 2);
});

test('Idempotency-Key: keys are per credential, so two API keys sending the same key are not replayed each other\'s result', async () => {
  const one = await createApiKey(t);
  const two = await createApiKey(t);
  const first = await post(one.secret, 'k-shared-keys', { name: 'perkey' });
  assert.equal(first.statusCode, 201);
  const other = await post(two.secret, 'k-shared-keys', { name: 'perkey' });
  assert.equal(other.statusCode, 201);
  assert.equal(other.headers['idempotent-replayed'], undefined);
  assert.notEqual(other.json().id, first.json().id);
  assert.equal(await countItems('perkey'), 2);
});

test('Idempotency-Key: "A retry with the same key returns the original result" on every retry: a second and a third retry in the same process replay it too, never 409 idempotency_key_in_flight', async () => {
  const { token } = await userToken(t);
  const first = await post(token, 'k-replay-thrice', { name: 'replay-thrice' });
  assert.equal(first.statusCode, 201, first.body);
  for (const nth of ['second', 'third', 'fourth']) {
    const again = await post(token, 'k-replay-thrice', { name: 'replay-thrice' });
    assert.equal(again.statusCode, 201, `${nth} retry: ${again.body}`);
    assert.equal(again.headers['idempotent-replayed'], 'true', `${nth} retry`);
    assert.equal(again.body, first.body, `${nth} retry`);
  }
  assert.equal(await countItems('replay-thrice'), 1);
});

test('Idempotency-Key: records are keyed by credential, "the user, or the API key" (docs/conventions.md): the same user signed in again (another session) retrying with the same key gets the original result', async () => {
  const { user, token } = await userToken(t);
  const first = await post(token, 'k-per-user', { name: 'per-user' });
  assert.equal(first.statusCode, 201, first.body);
  const otherSession = await login(t, user);
  assert.notEqual(otherSession, token);
  const again = await post(otherSession, 'k-per-user', { name: 'per-user' });
  assert.equal(again.statusCode, 201, again.body);
  assert.equal(again.headers['idempotent-replayed'], 'true');
  assert.equal(again.body, first.body);
  assert.equal(await countItems('per-user'), 1);
});

test('Idempotency-Key: "A retry with the same key returns the original result" also when that result was a client error, even after the state it depended on changed', async () => {
  const { token } = await userToken(t);
  const id = `obx_missing${Date.now()}`;
  const patch = () =>
    t.app.inject({ method: 'PATCH', url: `/v1/_probe/items/${id}`, headers: { ...bearer(token), 'idempotency-key': 'k-client-error' }, payload: { note: 'x' } });
  const first = await patch();
  assert.equal(first.statusCode, 404);
  await t.database.scoped('system').query(`INSERT INTO probe_items (id, name) VALUES ($1, 'late')`, [id]);
  const again = await patch();
  assert.equal(again.statusCode, 404);
  assert.equal(again.body, first.body);
  assert.equal(again.headers['idempotent-replayed'], 'true');
  const { rows } = await t.database.scoped('system').query<{ calls: number; note: string | null }>('SELECT calls, note FROM probe_items WHERE id = $1', [id]);
  assert.deepEqual(rows.map((r) => [r.calls, r.note]), [[0, null]]);
});

test('Idempotency-Key: a server error rolls the change back and releases the key so the retry runs again', async () => {
  const { token } = await userToken(t);
  const failed = await post(token, 'k-fail', { name: 'fail', fail: true });
  assert.equal(failed.statusCode, 500);
  assert.equal(failed.json().error.code, 'internal_error');
  assert.equal(await countItems('fail'), 0, 'the write and the failure share one transaction');
  const retry = await post(token, 'k-fail', { name: 'fail', fail: true });
  assert.equal(retry.statusCode, 500);
  assert.equal(retry.headers['idempotent-replayed'], undefined);
});

test('Idempotency-Key: a response that cannot be serialized is a server error like any other: 500 internal_error, the change rolled back, the key released, and the database free for every later request', async () => {
  const { token } = await userToken(t);
  const failed = await post(token, 'k-unserializable', { name: 'unserializable', unserializable: true });
  assert.equal(failed.statusCode, 500, failed.body);
  assert.equal(failed.json().error.code, 'internal_error');
  assert.equal(await countItems('unserializable'), 0, 'the write rolled back with the failed serialization');
  const health = await t.app.inject({ method: 'GET', url: '/health' });
  assert.equal(health.statusCode, 200, 'no transaction was left open holding the connection');
  const retry = await post(token, 'k-unserializable', { name: 'unserializable', unserializable: true });
  assert.equal(retry.statusCode, 500);
  assert.equal(retry.headers['idempotent-replayed'], undefined);
  const rows = await t.database.scoped('system').query(`SELECT 1 FROM idempotency_keys WHERE key = 'k-unserializable'`);
  assert.equal(rows.rows.length, 0, 'the key was released');
});

test('Idempotency-Key: a request whose transaction PostgreSQL aborts as a deadlock victim (40P01) is run again from the start, as any other transaction is: one 201, one row, and its replay answers the same', async () => {
  const { token } = await userToken(t);
  const first = await post(token, 'k-deadlock', { name: 'deadlock-once', deadlock_once: true });
  assert.equal(first.statusCode, 201, first.body);
  assert.equal(await countItems('deadlock-once'), 1, 'the aborted attempt wrote nothing; the second wrote once');
  const replay = await post(token, 'k-deadlock', { name: 'deadlock-once', deadlock_once: true });
  assert.equal(replay.statusCode, 201);
  assert.equal(replay.headers['idempotent-replayed'], 'true');
  assert.equal(replay.json().id, first.json().id);
});

test('Idempotency-Key: the change and its replay record commit in one transaction', async () => {
  const { token } = await userToken(t);
  const res = await post(token, 'k-atomic', { name: 'atomic' });
  assert.equal(res.statusCode, 201);
  const { rows } = await t.database
    .scoped('system')
    .query<{ credential: string; operation: string; key: string; status: string; response_status: number; response_body: string }>(
      `SELECT credential, operation, key, status, response_status, response_body FROM idempotency_keys WHERE key = 'k-atomic'`,
    );
  assert.deepEqual(rows.map((r) => [r.status, r.response_status]), [['done', 201]]);
  // The stored answer is sealed (docs/decisions.md "Secrets at rest") and opens to the response sent.
  const [row] = rows;
  assert.match(row.response_body, /^enc:v1:/);
  assert.equal(t.deps.secrets.open(row.response_body, `${row.credential}\u0000${row.operation}\u0000${row.key}`), res.body);
});
