// WH-1: deliveries checked by a reference verifier written here from Part B (HMAC-SHA256 of
// `<t>.<raw body>` keyed with the UTF-8 bytes of the secret, every v1 compared in constant time, t at
// most 300 s old), not by the service's own verifySignature. The vector, fresh t per retry, the
// stable ids and the attempt counter are proven in test/webhooks/targets.test.ts and delivery.test.ts;
// this file adds the whole 24 h overlap (with the health job running) and redelivery after it.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHmac, timingSafeEqual } from 'node:crypto';
import { toUnixSeconds } from '../../../src/clock.js';
import { assertStatus, call, emitEvent, Receiver, runDelivery, sql, startReceiverApp, stopReceiverApp, type Received, type TestApp } from '../../webhooks/support.js';
import { figure } from './support.js';

let t: TestApp;
let admin: string;
let receiver: Receiver;
before(async () => ({ t, admin, receiver } = await startReceiverApp()));
after(() => stopReceiverApp({ t, receiver }));

const VECTOR = {
  secret: 'whsec_test_0123456789abcdef',
  t: 1700000000,
  body: '{"id":"wev_01HZX","type":"webhook.test","data":{"message":"hi"}}',
  v1: '18dffc4739884ca828408d8e0cf4a8ed53d6aea8c58be46230ce0bf93f250914',
};

const refSign = (secret: string, ts: number, raw: string) => createHmac('sha256', Buffer.from(secret, 'utf8')).update(`${ts}.${raw}`, 'utf8').digest('hex');

/** The receiver's check as Part B states it; returns the number of v1 entries that matched. */
function refVerify(header: string, secret: string, raw: string, nowSeconds: number): number {
  const parts = header.split(',').map((p) => p.split('='));
  const ts = parts.filter(([k]) => k === 't').map(([, v]) => Number(v));
  const v1 = parts.filter(([k, v]) => k === 'v1' && /^[0-9a-f]{64}$/.test(v ?? '')).map(([, v]) => Buffer.from(v, 'hex'));
  if (ts.length !== 1 || !Number.isInteger(ts[0]) || nowSeconds - ts[0] > 300) return 0;
  const expected = Buffer.from(refSign(secret, ts[0], raw), 'hex');
  return v1.filter((candidate) => timingSafeEqual(candidate, expected)).length;
}

const unix = () => toUnixSeconds(t.clock.now());
const stampOf = (r: Received) => Number(/^t=(\d+),/.exec(String(r.headers['platform-signature']))![1]);
const v1Count = (r: Received) => String(r.headers['platform-signature']).split(',').filter((p) => p.startsWith('v1=')).length;

test('WH-1 a reference verifier (UTF-8 key bytes, constant-time compare) "accepts and rejects exactly as expected": the vector; every attempt (fresh t, same bytes, stable wev_ id, attempt 1, 2, 3); "two v1 entries for 24 h after rotate-secret [CLK], then one", with the health job run at 24 h − 2 s; a redelivery after the overlap signed fresh with the new secret only', async () => {
  const checks: { what: string; expected: number; got: number }[] = [];
  const check = (what: string, header: string, secret: string, raw: string, now: number, expected: number) =>
    checks.push({ what, expected, got: refVerify(header, secret, raw, now) });

  // The reference verifier itself against the catalog's vector.
  assert.equal(refSign(VECTOR.secret, VECTOR.t, VECTOR.body), VECTOR.v1);
  const vectorHeader = `t=${VECTOR.t},v1=${VECTOR.v1}`;
  check('vector', vectorHeader, VECTOR.secret, VECTOR.body, VECTOR.t, 1);
  check('vector at 300 s', vectorHeader, VECTOR.secret, VECTOR.body, VECTOR.t + 300, 1);
  check('vector at 301 s', vectorHeader, VECTOR.secret, VECTOR.body, VECTOR.t + 301, 0);
  check('vector, another secret', vectorHeader, 'whsec_test_0123456789abcdeg', VECTOR.body, VECTOR.t, 0);
  check('vector, one byte more', vectorHeader, VECTOR.secret, `${VECTOR.body} `, VECTOR.t, 0);

  const created = assertStatus(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url: receiver.url('/wh1'), events: ['user.reactivated'] }), 201);
  const oldSecret: string = created.signing_secret;
  receiver.routes.set('/wh1', (req, res) => res.writeHead(Number(req.headers['platform-delivery-attempt']) < 3 ? 500 : 200).end());
  const eventId = await emitEvent(t, 'user.reactivated', { user_id: 'usr_wh1' });
  const sentAt: number[] = [];
  for (const delay of [0, 60, 300]) {
    t.clock.advance(delay);
    sentAt.push(unix());
    await runDelivery(t);
  }
  const attempts = receiver.at('/wh1');
  assert.deepEqual(attempts.map((r) => r.headers['platform-delivery-attempt']), ['1', '2', '3']);
  for (const [i, r] of attempts.entries()) {
    assert.ok(Math.abs(stampOf(r) - sentAt[i]) <= 1, `attempt ${i + 1}: t ${stampOf(r)} is the service clock at sending (${sentAt[i]})`);
    assert.equal(r.body.id, eventId);
    assert.match(r.body.id, /^wev_/);
    assert.equal(r.headers['platform-event-id'], eventId);
    assert.equal(r.raw, attempts[0].raw, 'the same bytes on every attempt');
    assert.equal(v1Count(r), 1);
    check(`attempt ${i + 1}`, String(r.headers['platform-signature']), oldSecret, r.raw, stampOf(r), 1);
    check(`attempt ${i + 1}, body re-serialized`, String(r.headers['platform-signature']), oldSecret, JSON.stringify(r.body, null, 1), stampOf(r), 0);
    check(`attempt ${i + 1}, replayed 301 s later`, String(r.headers['platform-signature']), oldSecret, r.raw, stampOf(r) + 301, 0);
    check(`attempt ${i + 1}, wrong secret`, String(r.headers['platform-signature']), `${oldSecret}x`, r.raw, stampOf(r), 0);
  }
  assert.equal(new Set(attempts.map(stampOf)).size, 3, 'a fresh t on every attempt');

  const rotated = assertStatus(await call(t, 'POST', `/v1/webhooks/${created.id}/rotate-secret`, admin), 200);
  const newSecret: string = rotated.signing_secret;
  const overlapEnd = Date.parse(rotated.previous_secret_expires_at);
  assert.ok(Math.abs(overlapEnd - (t.clock.now().getTime() + 86400 * 1000)) < 2000, `overlap ends 24 h after the rotation (${rotated.previous_secret_expires_at})`);
  /** One test call at the current clock, with the health job (which drops expired previous secrets) run first. */
  const testCall = async (): Promise<Received> => {
    await t.deps.jobs.runNow('webhook-health');
    assertStatus(await call(t, 'POST', `/v1/webhooks/${created.id}/test`, admin), 202);
    await runDelivery(t);
    return receiver.at('/wh1').at(-1)!;
  };
  const during: [string, Received][] = [['just after rotate-secret', await testCall()]];
  t.clock.advance((overlapEnd - t.clock.now().getTime()) / 1000 - 2);
  during.push(['24 h − 2 s after it', await testCall()]);
  for (const [when, r] of during) {
    assert.equal(v1Count(r), 2, `${when}: two v1 entries`);
    check(`${when}, new secret`, String(r.headers['platform-signature']), newSecret, r.raw, stampOf(r), 1);
    check(`${when}, previous secret`, String(r.headers['platform-signature']), oldSecret, r.raw, stampOf(r), 1);
  }
  t.clock.advance(3);
  const afterOverlap = await testCall();
  assert.equal(v1Count(afterOverlap), 1, '24 h + 1 s after: one v1 entry');
  check('after the overlap, new secret', String(afterOverlap.headers['platform-signature']), newSecret, afterOverlap.raw, unix(), 1);
  check('after the overlap, previous secret', String(afterOverlap.headers['platform-signature']), oldSecret, afterOverlap.raw, unix(), 0);

  // Redeliver the original event's delivery, a day after it was first sent.
  const [original] = await sql<{ id: string }>(t, `SELECT id FROM webhook_deliveries WHERE event_id = $1`, [eventId]);
  assertStatus(await call(t, 'POST', `/v1/webhooks/${created.id}/deliveries/${original.id}/redeliver`, admin), 202);
  const sentAgain = unix();
  await runDelivery(t);
  const again = receiver.at('/wh1').at(-1)!;
  assert.equal(again.headers['platform-event-id'], eventId);
  assert.equal(again.raw, attempts[0].raw, 'the same bytes');
  assert.ok(Math.abs(stampOf(again) - sentAgain) <= 1, `signed fresh: t ${stampOf(again)} vs clock ${sentAgain}`);
  assert.equal(v1Count(again), 1);
  check('redelivery, new secret', String(again.headers['platform-signature']), newSecret, again.raw, unix(), 1);
  check('redelivery, previous secret', String(again.headers['platform-signature']), oldSecret, again.raw, unix(), 0);
  check('redelivery, original header', String(attempts[0].headers['platform-signature']), oldSecret, attempts[0].raw, unix(), 0);

  const mismatches = checks.filter((c) => c.got !== c.expected);
  figure('WH-1', `reference verifier: ${mismatches.length} mismatches over ${checks.length} checks (${checks.filter((c) => c.expected > 0).length} accepted, ${checks.filter((c) => c.expected === 0).length} rejected as expected)`);
  assert.deepEqual(mismatches, []);
});
