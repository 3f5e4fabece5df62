import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, withStoppedClock, type TestApp } from '../helpers/app.js';
import { bearer, createApiKey, createUser, login, userToken } from '../helpers/fixtures.js';
import { probeModule, PROBE_TABLES } from '../helpers/probe-module.js';
import { boot } from '../../src/boot.js';

/**
 * Stops the next create request of an item name in a probe module's handler (after its
 * Idempotency-Key claim, before its write): `arrived` resolves there, `release()` lets it go on.
 */
function holder() {
  const gates = new Map<string, { arrive: () => void; released: Promise<void> }>();
  return {
    hold: async (name: string) => {
      const gate = gates.get(name);
      if (!gate) return;
      gates.delete(name);
      gate.arrive();
      await gate.released;
    },
    gate(name: string) {
      let arrive!: () => void;
      let release!: () => void;
      const arrived = new Promise<void>((resolve) => (arrive = resolve));
      const released = new Promise<void>((resolve) => (release = resolve));
      gates.set(name, { arrive, released });
      return { arrived, release };
    },
  };
}

let t: TestApp;
const here = holder();
before(async () => {
  t = await buildTestApp({}, undefined, [probeModule({ delayMs: 150, hold: here.hold })]);
  await t.database.scoped('system').exec(PROBE_TABLES);
});
after(() => t.close());

const countItems = async (name: string) =>
  (await t.database.scoped('system').query<{ n: number }>('SELECT count(*)::int AS n FROM probe_items WHERE name = $1', [name])).rows[0].n;

const post = (token: string, key: string | null, body: object) =>
  t.app.inject({
    method: 'POST',
    url: '/v1/_probe/items',
    headers: { ...bearer(token), ...(key === null ? {} : { 'idempotency-key': key }) },
    payload: body,
  });

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

test('Idempotency-Key: keys are retained 24 hours, then the same key runs as new', async () => {
  const { user, token } = await userToken(t);
  assert.equal((await post(token, 'k-expire', { name: 'expire' })).statusCode, 201);
  t.clock.advance(24 * 3600 + 1);
  try {
    // The access token expired with the clock move; sign in again.
    const fresh = await login(t, user);
    const again = await post(fresh, 'k-expire', { name: 'expire' });
    assert.equal(again.statusCode, 201, again.body);
    assert.equal(again.headers['idempotent-replayed'], undefined);
    assert.equal(await countItems('expire'), 2, 'it ran as new: a second change');
  } finally {
    t.clock.advance(-(24 * 3600 + 1));
  }
});

test('Idempotency-Key: "Keys are retained 24 hours": from exactly 24 hours on, the same key runs the request again as new (201, a second change), and is then held for the new request', async () => {
  const { secret } = await createApiKey(t);
  await withStoppedClock(t, async () => {
    const first = await post(secret, 'k-renewed', { name: 'renewed' });
    assert.equal(first.statusCode, 201);
    t.clock.advance(24 * 3600);
    try {
      const again = await post(secret, 'k-renewed', { name: 'renewed' });
      assert.equal(again.statusCode, 201, again.body);
      assert.equal(again.headers['idempotent-replayed'], undefined);
      assert.notEqual(again.json().id, first.json().id);
      assert.equal(await countItems('renewed'), 2);
      const replay = await post(secret, 'k-renewed', { name: 'renewed' });
      assert.equal(replay.headers['idempotent-replayed'], 'true', 'the key is held again, for the new request');
      assert.equal(replay.body, again.body);
    } finally {
      t.clock.advance(-24 * 3600);
    }
  });
});

test('Idempotency-Key: "Keys are retained 24 hours": a retry one second before the 24 hours end still returns the original result', async () => {
  const { secret } = await createApiKey(t);
  await withStoppedClock(t, async () => {
    const first = await post(secret, 'k-last-second', { name: 'last-second' });
    assert.equal(first.statusCode, 201);
    t.clock.advance(24 * 3600 - 1);
    try {
      const again = await post(secret, 'k-last-second', { name: 'last-second' });
      assert.equal(again.statusCode, 201, again.body);
      assert.equal(again.headers['idempotent-replayed'], 'true');
      assert.equal(again.body, first.body);
      assert.equal(await countItems('last-second'), 1);
    } finally {
      t.clock.advance(-(24 * 3600 - 1));
    }
  });
});

test('Idempotency-Key: "Keys are retained 24 hours": from 24 hours on the key is free for another request too: a different body sent under it runs (201), never 422 idempotency_key_reused', async () => {
  const { secret } = await createApiKey(t);
  await withStoppedClock(t, async () => {
    assert.equal((await post(secret, 'k-expired-other', { name: 'expired-first' })).statusCode, 201);
    t.clock.advance(24 * 3600);
    try {
      const other = await post(secret, 'k-expired-other', { name: 'expired-other' });
      assert.equal(other.statusCode, 201, other.body);
      assert.equal(other.headers['idempotent-replayed'], undefined);
      assert.equal(await countItems('expired-other'), 1);
      const replay = await post(secret, 'k-expired-other', { name: 'expired-other' });
      assert.equal(replay.headers['idempotent-replayed'], 'true', 'the key is held for the new request');
      assert.equal(replay.body, other.body);
    } finally {
      t.clock.advance(-24 * 3600);
    }
  });
});

test('Idempotency-Key: "Keys are at most 255 characters": a 255-character key is used, a 256-character one gets 422 validation_failed naming header.idempotency-key and changes nothing', async () => {
  const { token } = await userToken(t);
  const longest = 'k'.repeat(255);
  const first = await post(token, longest, { name: 'len-255' });
  assert.equal(first.statusCode, 201, first.body);
  const again = await post(token, longest, { name: 'len-255' });
  assert.equal(again.headers['idempotent-replayed'], 'true', 'the 255-character key was kept');
  assert.equal(await countItems('len-255'), 1);
  const tooLong = await post(token, 'k'.repeat(256), { name: 'len-256' });
  assert.equal(tooLong.statusCode, 422, tooLong.body);
  assert.equal(tooLong.json().error.code, 'validation_failed');
  assert.deepEqual(tooLong.json().error.details.fields.map((f: { path: string }) => f.path), ['header.idempotency-key']);
  assert.equal(await countItems('len-256'), 0);
});

test('Idempotency-Key: an empty Idempotency-Key is a missing one: 400 idempotency_key_required where required, and nothing changes', async () => {
  const { token } = await userToken(t);
  const res = await post(token, '', { name: 'emptykey' });
  assert.equal(res.statusCode, 400, res.body);
  assert.equal(res.json().error.code, 'idempotency_key_required');
  assert.equal(await countItems('emptykey'), 0);
});

test('Idempotency-Key: "the same key with a different request gets 422 idempotency_key_reused": sent again to another URL of the operation (another id), it changes nothing', async () => {
  const { token } = await userToken(t);
  const a = (await post(token, 'k-url-a', { name: 'url-a' })).json();
  const b = (await post(token, 'k-url-b', { name: 'url-b' })).json();
  const patch = (id: string) =>
    t.app.inject({ method: 'PATCH', url: `/v1/_probe/items/${id}`, headers: { ...bearer(token), 'idempotency-key': 'k-url' }, payload: { note: 'x' } });
  assert.equal((await patch(a.id)).statusCode, 200);
  const other = await patch(b.id);
  assert.equal(other.statusCode, 422, other.body);
  assert.equal(other.json().error.code, 'idempotency_key_reused');
  assert.equal(other.headers['idempotent-replayed'], undefined);
  const { rows } = await t.database.scoped('system').query<{ calls: number; note: string | null }>('SELECT calls, note FROM probe_items WHERE id = $1', [b.id]);
  assert.deepEqual(rows.map((r) => [r.calls, r.note]), [[0, null]], 'the other item is untouched');
});

/**
 * A claim as a process that died before committing leaves it: the key still in flight, nothing
 * written. Returns the token of the user who holds it.
 */
async function orphanedClaim(key: string, name: string): Promise<string> {
  const { token } = await userToken(t);
  assert.equal((await post(token, key, { name })).statusCode, 201);
  const sys = t.database.scoped('system');
  await sys.query(`UPDATE idempotency_keys SET status = 'in_flight', response_status = NULL, response_body = NULL WHERE key = $1`, [key]);
  await sys.query('DELETE FROM probe_items WHERE name = $1', [name]);
  return token;
}

test('Idempotency-Key: "A claim whose process died is taken over after 60 seconds": a retry at 59 seconds gets 409 idempotency_key_in_flight, one at 60 seconds runs the request', async () => {
  let moved = 0;
  try {
    // The clock stands still between requests, so the claim is exactly 59, then exactly 60 seconds old.
    await withStoppedClock(t, async () => {
      const token = await orphanedClaim('k-orphan', 'orphan');
      t.clock.advance(59);
      moved += 59;
      const early = await post(token, 'k-orphan', { name: 'orphan' });
      assert.equal(early.statusCode, 409, early.body);
      assert.equal(early.json().error.code, 'idempotency_key_in_flight');
      assert.equal(await countItems('orphan'), 0);
      t.clock.advance(1);
      moved += 1;
      const late = await post(token, 'k-orphan', { name: 'orphan' });
      assert.equal(late.statusCode, 201, late.body);
      assert.equal(late.headers['idempotent-replayed'], undefined);
      assert.equal(await countItems('orphan'), 1);
      const again = await post(token, 'k-orphan', { name: 'orphan' });
      assert.equal(again.headers['idempotent-replayed'], 'true');
      assert.equal(again.body, late.body);
    });
  } finally {
    t.clock.advance(-moved);
  }
});

test('Idempotency-Key: "A claim whose process died is taken over after 60 seconds" when the clock stepped back an hour since (an NTP step, a restored VM): a claim ending further ahead than 60 seconds is taken over at once, not after an hour; the request runs once', async () => {
  const token = await orphanedClaim('k-orphan-stepped', 'orphan-stepped');
  t.clock.advance(-3600);
  try {
    const retry = await post(token, 'k-orphan-stepped', { name: 'orphan-stepped' });
    assert.equal(retry.statusCode, 201, retry.body);
    assert.equal(await countItems('orphan-stepped'), 1);
    const again = await post(token, 'k-orphan-stepped', { name: 'orphan-stepped' });
    assert.equal(again.headers['idempotent-replayed'], 'true');
    assert.equal(await countItems('orphan-stepped'), 1);
  } finally {
    t.clock.advance(3600);
  }
});

test('Idempotency-Key: a request whose claim another process took over (after 60 seconds) while it still ran rolls its change back and answers 409 idempotency_key_in_flight: the change happens once', async () => {
  const { token } = await userToken(t);
  const gate = here.gate('overtaken');
  try {
    const first = post(token, 'k-overtaken', { name: 'overtaken' });
    await gate.arrived;
    // What another process's take-over writes: its own claim token and lease.
    await t.database
      .scoped('system')
      .query(`UPDATE idempotency_keys SET claim_token = 'another-process', locked_until = $1 WHERE key = 'k-overtaken'`, [new Date(t.clock.now().getTime() + 60_000)]);
    gate.release();
    const res = await first;
    assert.equal(res.statusCode, 409, res.body);
    assert.equal(res.json().error.code, 'idempotency_key_in_flight');
    assert.equal(await countItems('overtaken'), 0, 'the change rolled back with its replay record');
  } finally {
    gate.release();
  }
});

test('PATCH changes only the fields sent; custom keys merge one level deep and null removes a key', async () => {
  const { token } = await userToken(t);
  const created = (await post(token, 'k-patch', { name: 'patch-me' })).json();
  const patch = (payload: object) => t.app.inject({ method: 'PATCH', url: `/v1/_probe/items/${created.id}`, headers: bearer(token), payload });
  let res = await patch({ note: 'n1', custom: { a: 1, b: { deep: true } } });
  assert.equal(res.statusCode, 200);
  assert.deepEqual(res.json(), { id: created.id, name: 'patch-me', note: 'n1', custom: { a: 1, b: { deep: true } } });
  res = await patch({ custom: { b: { other: 1 }, c: 'x' } });
  assert.deepEqual(res.json().custom, { a: 1, b: { other: 1 }, c: 'x' }, 'one level deep: b is replaced, not merged');
  assert.equal(res.json().note, 'n1', 'unsent fields stay');
  res = await patch({ custom: { a: null }, note: null });
  assert.deepEqual(res.json().custom, { b: { other: 1 }, c: 'x' });
  assert.equal(res.json().note, null);
  assert.equal(res.json().name, 'patch-me');
});

test('list pagination: limit and opaque cursor walk every row once, stable under concurrent inserts', async () => {
  const user = await createUser(t);
  const tokens: string[] = [];
  for (let i = 0; i < 5; i++) tokens.push(await login(t, user));
  const existing = new Set<string>();
  const seen: string[] = [];
  let cursor: string | null = null;
  let pages = 0;
  const list = (c: string | null) =>
    t.app.inject({ method: 'GET', url: `/v1/users/me/sessions?limit=2${c ? `&cursor=${encodeURIComponent(c)}` : ''}`, headers: bearer(tokens[0]) });
  const first = await list(null);
  assert.equal(first.statusCode, 200);
  for (const s of (await t.database.scoped('system').query('SELECT id FROM sessions WHERE user_id = $1', [user.id])).rows) existing.add(s.id);
  let body = first.json();
  for (;;) {
    pages++;
    assert.ok(body.data.length <= 2, 'body.data.length <= 2');
    seen.push(...body.data.map((s: { id: string }) => s.id));
    // A new row arrives between pages (a concurrent sign-in).
    await login(t, user);
    if (!body.page.has_more) {
      assert.equal(body.page.next_cursor, null);
      break;
    }
    assert.equal(typeof body.page.next_cursor, 'string');
    cursor = body.page.next_cursor;
    body = (await list(cursor)).json();
  }
  assert.equal(pages, 3);
  assert.deepEqual(new Set(seen), existing, 'every row that existed is listed exactly once');
  assert.equal(seen.length, existing.size);
});

test('list pagination: "has_more" is false on a last page the limit fills exactly: it has no next_cursor, and the walk ends there with every row once', async () => {
  const { user, token } = await userToken(t);
  for (let i = 0; i < 3; i++) await login(t, user);
  const list = (cursor: string | null) =>
    t.app.inject({ method: 'GET', url: `/v1/users/me/sessions?limit=2${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`, headers: bearer(token) });
  const first = await list(null);
  assert.equal(first.statusCode, 200, first.body);
  assert.equal(first.json().data.length, 2);
  assert.equal(first.json().page.has_more, true);
  const last = await list(first.json().page.next_cursor);
  assert.equal(last.statusCode, 200, last.body);
  assert.equal(last.json().data.length, 2, 'four sessions: the second page of two is full');
  assert.deepEqual(last.json().page, { next_cursor: null, has_more: false });
  const ids = [...first.json().data, ...last.json().data].map((s: { id: string }) => s.id);
  assert.equal(new Set(ids).size, 4);
});

test('list pagination: a cursor that is not from the list gets 422 validation_failed naming cursor; limit out of range too', async () => {
  const { token } = await userToken(t);
  let res = await t.app.inject({ method: 'GET', url: '/v1/users/me/sessions?cursor=bm9wZQ', headers: bearer(token) });
  assert.equal(res.statusCode, 422);
  assert.deepEqual(res.json().error.details.fields.map((f: { path: string }) => f.path), ['query.cursor']);
  // Well-formed JSON whose instant is not one the list writes: dates PostgreSQL would refuse to cast,
  // or would read otherwise, are 422 too, never a 500.
  for (const at of ['Tue Mar 05 2024 10:00:00 GMT+0100 (CET)', '+275760-09-13T00:00:00.000Z', '2024-03-05', '1 Jan 2020']) {
    const cursor = Buffer.from(JSON.stringify([at, 'ses_x'])).toString('base64url');
    res = await t.app.inject({ method: 'GET', url: `/v1/users/me/sessions?cursor=${cursor}`, headers: bearer(token) });
    assert.equal(res.statusCode, 422, `${at}: ${res.body}`);
    assert.deepEqual(res.json().error.details.fields.map((f: { path: string }) => f.path), ['query.cursor']);
  }
  res = await t.app.inject({ method: 'GET', url: '/v1/users/me/sessions?limit=101', headers: bearer(token) });
  assert.equal(res.statusCode, 422);
  assert.deepEqual(res.json().error.details.fields.map((f: { path: string }) => f.path), ['query.limit']);
});

test('list pagination: "One that does not decode to such a position gets 422 validation_failed naming query.cursor": a cursor naming year 0000 or holding U+0000 is 422 naming query.cursor, and the list is unchanged', async () => {
  const { token } = await userToken(t);
  const cursors = [
    ['0000-01-01T00:00:00.000Z', 'ses_x'], // an instant JavaScript writes but PostgreSQL has no year for
    ['2024-03-05T10:00:00.000Z', 'ses_\u0000x'], // text PostgreSQL cannot compare
    ['2024-03-05T10:00:00.000Z', 'ses_x', 'ses_y'], // a position is an instant and an id, nothing more
  ];
  for (const key of cursors) {
    const cursor = Buffer.from(JSON.stringify(key)).toString('base64url');
    const res = await t.app.inject({ method: 'GET', url: `/v1/users/me/sessions?cursor=${cursor}`, headers: bearer(token) });
    assert.equal(res.statusCode, 422, `${JSON.stringify(key)}: ${res.body}`);
    assert.equal(res.json().error.code, 'validation_failed');
    assert.deepEqual(res.json().error.details.fields.map((f: { path: string }) => f.path), ['query.cursor'], res.body);
  }
  const ok = await t.app.inject({ method: 'GET', url: '/v1/users/me/sessions', headers: bearer(token) });
  assert.equal(ok.statusCode, 200, ok.body);
  assert.equal(ok.json().data.length, 1);
});

test('list pagination: a cursor that does not decode gets 422 validation_failed naming query.cursor "like every query parameter", also where the caller has nothing to list (tenants, owned applications, roles for a key without permissions)', async () => {
  const key = (await createApiKey(t, { scope: 'platform', permissions: [] })).secret;
  for (const url of ['/v1/tenants', '/v1/applications?owned=true', '/v1/roles']) {
    const empty = await t.app.inject({ method: 'GET', url, headers: bearer(key) });
    assert.equal(empty.statusCode, 200, `${url}: ${empty.body}`);
    assert.deepEqual(empty.json(), { data: [], page: { next_cursor: null, has_more: false } });
    const res = await t.app.inject({ method: 'GET', url: `${url}${url.includes('?') ? '&' : '?'}cursor=bm9wZQ`, headers: bearer(key) });
    assert.equal(res.statusCode, 422, `${url}: ${res.body}`);
    assert.equal(res.json().error.code, 'validation_failed');
    assert.deepEqual(res.json().error.details.fields.map((f: { path: string }) => f.path), ['query.cursor'], `${url}: ${res.body}`);
  }
});

test('list pagination: "a well-formed position taken from another list only moves the start of this one, never past its filters or its caller\'s scope": another user\'s session cursor lists only the caller\'s own sessions, an unfiltered list\'s cursor under ?q= only the matching users', async () => {
  await withStoppedClock(t, async () => {
    // Scope: B's newest session sorts after every session of A; A's list from that position is A's own, all of them.
    const a = await userToken(t);
    for (let i = 0; i < 2; i++) await login(t, a.user);
    t.clock.advance(1); // strictly later, whatever the machine's speed
    const b = await userToken(t);
    await login(t, b.user);
    const bPage = await t.app.inject({ method: 'GET', url: '/v1/users/me/sessions?limit=1', headers: bearer(b.token) });
    assert.equal(bPage.statusCode, 200, bPage.body);
    const bCursor: string = bPage.json().page.next_cursor;
    assert.equal(typeof bCursor, 'string');
    const own = (await t.database.scoped('system').query<{ id: string }>('SELECT id FROM sessions WHERE user_id = $1', [a.user.id])).rows.map((r) => r.id).sort();
    const aWalk = await t.app.inject({ method: 'GET', url: `/v1/users/me/sessions?limit=100&cursor=${encodeURIComponent(bCursor)}`, headers: bearer(a.token) });
    assert.equal(aWalk.statusCode, 200, aWalk.body);
    assert.deepEqual(aWalk.json().data.map((s: { id: string }) => s.id).sort(), own, 'A\'s sessions and no session of B');

    // Filters: the newest user (outside the filter) gives the position; ?q= from it lists only the matching users.
    const key = (await createApiKey(t, { scope: 'platform', permissions: ['users.list'] })).secret;
    const prefix = `cur${Math.random().toString(36).slice(2, 8)}`;
    const matching: string[] = [];
    for (let i = 0; i < 3; i++) matching.push((await createUser(t, { email: `${prefix}${i}@example.com` })).id);
    t.clock.advance(1);
    for (let i = 0; i < 2; i++) await createUser(t);
    const newest = await t.app.inject({ method: 'GET', url: '/v1/users?limit=1', headers: bearer(key) });
    assert.equal(newest.statusCode, 200, newest.body);
    const cursor: string = newest.json().page.next_cursor;
    const filtered = await t.app.inject({ method: 'GET', url: `/v1/users?q=${prefix}&limit=100&cursor=${encodeURIComponent(cursor)}`, headers: bearer(key) });
    assert.equal(filtered.statusCode, 200, filtered.body);
    assert.deepEqual(filtered.json().data.map((u: { id: string }) => u.id).sort(), [...matching].sort(), 'only the users ?q= matches');
  });
});

test('list filters: an empty filter value ("?order_id=") is 422 validation_failed naming query.<name>, never read as no filter (every row of the list)', async () => {
  const key = (await createApiKey(t, { scope: 'platform', permissions: ['entitlements.manage', 'applications.manage', 'tenants.manage', 'roles.manage', 'users.list'] })).secret;
  const user = await createUser(t);
  const cases: [string, string][] = [
    ['/v1/entitlements', 'order_id'], ['/v1/entitlements', 'user_id'], ['/v1/entitlements', 'organization_id'], ['/v1/entitlements', 'application_id'],
    [`/v1/users/${user.id}/entitlements`, 'application_id'], ['/v1/organizations/org_01M8MK6MDH299Z5GNZBJQBNF0B/entitlements', 'order_id'],
    ['/v1/applications', 'tenant_id'], ['/v1/applications', 'owner_user_id'], ['/v1/applications', 'owner_organization_id'],
    ['/v1/tenants', 'owner_user_id'], ['/v1/tenants', 'owner_organization_id'],
    [`/v1/users/${user.id}/roles`, 'application_id'], ['/v1/permissions', 'scope'],
  ];
  for (const [path, name] of cases) {
    const res = await t.app.inject({ method: 'GET', url: `${path}?${name}=`, headers: bearer(key) });
    assert.equal(res.statusCode, 422, `${path}?${name}=: ${res.body}`);
    assert.equal(res.json().error.code, 'validation_failed');
    assert.deepEqual(res.json().error.details.fields.map((f: { path: string }) => f.path), [`query.${name}`], `${path}?${name}=: ${res.body}`);
  }
});

test('list pagination: limit is 1–100 in decimal digits (limit=1, limit=100 and limit=021 are accepted; limit=0, and limit=0x10, 1e1, +5, 2.0 or a blank, which JavaScript would read as numbers, are 422 naming query.limit) and defaults to 20 rows a page', async () => {
  // The audit trail: every user created below adds to it.
  const key = (await createApiKey(t, { scope: 'platform', permissions: ['audit.view'] })).secret;
  for (let i = 0; i < 21; i++) await createUser(t);
  const list = (query: string) => t.app.inject({ method: 'GET', url: `/v1/audit-events${query}`, headers: bearer(key) });
  const page = await list('');
  assert.equal(page.statusCode, 200, page.body);
  assert.equal(page.json().data.length, 20);
  assert.equal(page.json().page.has_more, true);
  const max = await list('?limit=100');
  assert.equal(max.statusCode, 200, max.body);
  assert.equal(max.json().data.length > 20, true, 'limit=100 returns more than the default page');
  const one = await list('?limit=1');
  assert.equal(one.statusCode, 200, one.body);
  assert.equal(one.json().data.length, 1, 'limit=1 is a page of one row');
  assert.equal(one.json().page.has_more, true);
  assert.equal(typeof one.json().page.next_cursor, 'string');
  const zero = await list('?limit=0');
  assert.equal(zero.statusCode, 422, zero.body);
  assert.deepEqual(zero.json().error.details.fields.map((f: { path: string }) => f.path), ['query.limit']);
  const decimal = await list('?limit=021');
  assert.equal(decimal.statusCode, 200, decimal.body);
  assert.equal(decimal.json().data.length, 21, 'limit=021 is twenty-one, read in decimal');
  for (const limit of ['0x10', '1e1', '+5', '2.0', '%20', '%205']) {
    const res = await list(`?limit=${limit}`);
    assert.equal(res.statusCode, 422, `limit=${limit}: ${res.body.slice(0, 200)}`);
    assert.equal(res.json().error.code, 'validation_failed');
    assert.deepEqual(res.json().error.details.fields, [{ path: 'query.limit', message: 'must be integer' }], `limit=${limit}`);
  }
});

test('test mode: test credentials never see live rows and live credentials never see test rows', async () => {
  const live = await createUser(t, { mode: 'live' });
  const testUser = await createUser(t, { mode: 'test' });
  const liveKey = await createApiKey(t, { mode: 'live', permissions: ['users.list', 'users.manage'] });
  const testKey = await createApiKey(t, { mode: 'test', permissions: ['users.list', 'users.manage'] });
  await login(t, testUser);
  await login(t, live);
  const get = (key: string, url: string) => t.app.inject({ method: 'GET', url, headers: bearer(key) });
  assert.equal((await get(liveKey.secret, `/v1/users/${live.id}`)).statusCode, 200);
  assert.equal((await get(testKey.secret, `/v1/users/${testUser.id}`)).json().test_mode, true);
  for (const [key, id] of [[liveKey.secret, testUser.id], [testKey.secret, live.id]] as const) {
    const res = await get(key, `/v1/users/${id}`);
    assert.equal(res.statusCode, 404);
    assert.equal(res.json().error.code, 'user_not_found');
    assert.equal((await get(key, `/v1/users/${id}/sessions`)).statusCode, 404);
  }
  const sessions = (await get(testKey.secret, `/v1/users/${testUser.id}/sessions`)).json();
  assert.equal(sessions.data.length, 1);
});

test('email uniqueness is per mode: the same address may exist once live and once in test', async () => {
  const email = `both-${Date.now()}@example.com`;
  const a = await createUser(t, { mode: 'live', email });
  const b = await createUser(t, { mode: 'test', email });
  assert.notEqual(a.id, b.id);
  await assert.rejects(createUser(t, { mode: 'live', email }), /email/);
});

test('per-IP throttle of the unauthenticated auth endpoints is shared by every process and answers 429 with Retry-After', async () => {
  const limited = await buildTestApp({ authRateLimitPerMinute: 3 });
  // Windows are fixed minutes: start just after a minute begins, so that a slow machine cannot carry
  // the attempts across a window boundary.
  const intoMinute = limited.clock.now().getTime() % 60_000;
  limited.clock.advance((60_000 - intoMinute) / 1000 + 0.001);
  // A second process on the same database.
  const second = await boot({ config: limited.config, database: limited.database, clock: limited.clock, logger: false });
  try {
    const attempt = (app: typeof limited.app) =>
      app.inject({ method: 'POST', url: '/v1/auth/login', payload: { email: 'nobody@example.com', password: 'wrong-password-123' } });
    assert.equal((await attempt(limited.app)).statusCode, 401);
    assert.equal((await attempt(second.app)).statusCode, 401);
    assert.equal((await attempt(limited.app)).statusCode, 401);
    const throttled = await attempt(second.app);
    assert.equal(throttled.statusCode, 429);
    assert.equal(throttled.json().error.code, 'rate_limited');
    const retryAfter = Number(throttled.headers['retry-after']);
    assert.ok(retryAfter >= 1 && retryAfter <= 60, String(retryAfter));
    // Authenticated endpoints are not throttled by it.
    assert.equal((await limited.app.inject({ method: 'GET', url: '/health' })).statusCode, 200);
    limited.clock.advance(61);
    assert.equal((await attempt(limited.app)).statusCode, 401);
  } finally {
    await second.app.close();
    await limited.close();
  }
});

test('AUTH_RATE_LIMIT_PER_MINUTE=0 turns the per-IP throttle off', async () => {
  // A fresh address each time: one address is locked after 5 failures (the per-account lockout), which
  // is not the per-IP throttle.
  for (let i = 0; i < 40; i++) {
    const res = await t.app.inject({ method: 'POST', url: '/v1/auth/login', payload: { email: `nobody-${i}@example.com`, password: 'wrong-password-123' } });
    assert.equal(res.statusCode, 401, res.body);
  }
});


test('operations that take no body refuse a field with 422 validation_failed and change nothing (TOTP enrollment, invitation re-send, key rotation); no body or {} is accepted', async () => {
  const { user, token } = await userToken(t);
  const enroll = (payload?: object) => t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp', headers: bearer(token), ...(payload ? { payload } : {}) });
  const refused = await enroll({ secret: 'JBSWY3DPEHPK3PXP' });
  assert.equal(refused.statusCode, 422, refused.body);
  assert.equal(refused.json().error.code, 'validation_failed');
  const pending = await t.database.scoped('system').query('SELECT totp_pending_secret FROM identities WHERE user_id = $1', [user.id]);
  assert.ok(pending.rows.every((r) => r.totp_pending_secret === null), 'no enrollment began');
  assert.equal((await enroll()).statusCode, 200);
  assert.equal((await enroll({})).statusCode, 200);

  const admin = await userToken(t, { roles: ['superadmin'] });
  const invited = await createUser(t, { status: 'invited' });
  const resend = await t.app.inject({ method: 'POST', url: `/v1/users/${invited.id}/invitation`, headers: bearer(admin.token), payload: { email: 'other@example.com' } });
  assert.equal(resend.statusCode, 422, resend.body);
  assert.equal(resend.json().error.code, 'validation_failed');

  const created = await t.app.inject({ method: 'POST', url: '/v1/api-keys', headers: bearer(admin.token), payload: { name: 'rot', scope: 'platform', permissions: [] } });
  assert.equal(created.statusCode, 201, created.body);
  const rotate = await t.app.inject({ method: 'POST', url: `/v1/api-keys/${created.json().id}/rotate`, headers: bearer(admin.token), payload: { secret: 'mine' } });
  assert.equal(rotate.statusCode, 422, rotate.body);
  const stillWorks = await t.app.inject({ method: 'GET', url: '/v1/permissions', headers: bearer(created.json().secret) });
  assert.equal(stillWorks.statusCode, 200, 'the refused rotation left the secret alone');
});

test('DELETE operations take no body: a field sent with one is 422 validation_failed naming it (a JSON value that is not an object names body), and nothing is deleted; no body, an empty body or {} is accepted', async () => {
  const admin = await userToken(t, { roles: ['superadmin'] });
  const newKey = async () => {
    const created = await t.app.inject({ method: 'POST', url: '/v1/api-keys', headers: bearer(admin.token), payload: { name: 'del', scope: 'platform', permissions: [] } });
    assert.equal(created.statusCode, 201, created.body);
    return created.json() as { id: string; secret: string };
  };
  const revoke = (id: string, payload?: string) =>
    t.app.inject({ method: 'DELETE', url: `/v1/api-keys/${id}`, headers: { ...bearer(admin.token), 'content-type': 'application/json' }, ...(payload === undefined ? {} : { payload }) });
  const key = await newKey();
  for (const [payload, path] of [['{"reason":"leaked"}', 'reason'], ['[]', 'body'], ['null', 'body'], ['"x"', 'body']]) {
    const res = await revoke(key.id, payload);
    assert.equal(res.statusCode, 422, `${payload}: ${res.body}`);
    assert.equal(res.json().error.code, 'validation_failed');
    assert.deepEqual(res.json().error.details.fields.map((f: { path: string }) => f.path), [path]);
  }
  const stillWorks = await t.app.inject({ method: 'GET', url: '/v1/permissions', headers: bearer(key.secret) });
  assert.equal(stillWorks.statusCode, 200, 'no refused DELETE revoked the key');
  for (const payload of [undefined, '', '{}']) {
    const res = await revoke((await newKey()).id, payload);
    assert.equal(res.statusCode, 204, `${JSON.stringify(payload)}: ${res.body}`);
  }
});
