// Conventions (Part A), Idempotency-Key through the probe module (test/helpers/probe-module.ts): keys
// retained 24 hours, their length, an empty key, another URL of the operation, and claims taken over
// after 60 seconds. Replays and keys in flight are in conventions-idempotency.test.ts; PATCH, lists,
// modes and bodies in conventions-lists-and-requests.test.ts.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, withStoppedClock, type TestApp } from '../helpers/app.js';
import { bearer, createApiKey, login, userToken } from '../helpers/fixtures.js';
import { holder, probeCalls, probeModule, PROBE_TABLES } from '../helpers/probe-module.js';

let t: TestApp;
const here = holder();
before(async () => {
  t = await buildTestApp({}, undefined, [probeModule({ delayMs: 150, hold: here.hold })]);
  await t.database.scoped('system').exec(PROBE_TABLES);
});
after(() => t.close());

const { countItems, post } = probeCalls(() => t);

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
