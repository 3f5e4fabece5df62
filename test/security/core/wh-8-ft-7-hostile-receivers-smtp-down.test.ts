// WH-8, FT-7: hostile webhook receivers on loopback (allow-private mode) and an SMTP server that is
// down. One delivery run meets a trickling receiver, a silent socket, a TLS error and a large error
// body at once; each attempt's connection, as its receiver saw it, lasts at most the deadline plus
// a loaded machine's lateness (7.5 s for a 5 s deadline); the run's own wall clock is not bounded.
// An answer after 5 s is covered by test/webhooks/delivery.test.ts.
import { test, before, after, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { createUser, uniqueEmail } from '../../helpers/fixtures.js';
import {
  assertStatus, call, createWebhook, deliveriesOf, emitEvent, Receiver, runDelivery, sql, startReceiverApp, stopReceiverApp, type TestApp, until,
} from '../../webhooks/support.js';
import { startWebhookWorker } from '../../../src/modules/webhooks/index.js';
import { assertError, bootAnother, figure } from './support.js';
import { buildApp as buildTenancyApp, tenantOwner } from '../../tenancy/support.js';

let t: TestApp;
let admin: string;
let receiver: Receiver;
before(async () => ({ t, admin, receiver } = await startReceiverApp()));
after(() => stopReceiverApp({ t, receiver }));

async function subscribe(url: string): Promise<string> {
  return assertStatus(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url, events: ['user.deleted'] }), 201).id;
}

/** A raw TCP listener on loopback; `onSocket` decides what it does with each connection. */
async function tcpListener(c: TestContext, onSocket: (s: Socket) => void): Promise<number> {
  const sockets: Socket[] = [];
  const server: Server = createServer((s) => {
    sockets.push(s);
    s.on('error', () => undefined);
    onSocket(s);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  c.after(() => {
    for (const s of sockets) s.destroy();
    server.close();
  });
  return (server.address() as AddressInfo).port;
}

test('WH-8 a receiver trickling 1 byte/s after its 500 headers, a socket that never answers and a TLS error: "every attempt ends by the 5 s total deadline"; "only the first 1 KB of error bodies is kept" (a 2 MB body)', async (c) => {
  const timers: NodeJS.Timeout[] = [];
  c.after(() => timers.forEach(clearInterval));
  // Each hostile connection's life, as its receiver saw it (request or connection → close).
  const life: Record<'trickle' | 'silent', { from: number; to?: number }[]> = { trickle: [], silent: [] };
  const watch = (name: keyof typeof life, emitter: { on(e: 'close', f: () => void): unknown }) => {
    const span: { from: number; to?: number } = { from: Date.now() };
    life[name].push(span);
    emitter.on('close', () => (span.to = Date.now()));
  };
  receiver.routes.set('/trickle', (_req, res) => {
    watch('trickle', res);
    res.writeHead(500, { 'content-type': 'text/plain' });
    const timer = setInterval(() => res.write('x'), 1000);
    timers.push(timer);
    res.on('close', () => clearInterval(timer));
  });
  receiver.routes.set('/large', (_req, res) => res.writeHead(500, { 'content-type': 'text/plain' }).end('y'.repeat(2 * 1024 * 1024)));
  // Read (and dropped), so that the client's close is seen: a paused socket never sees the FIN.
  const silentPort = await tcpListener(c, (socket) => (watch('silent', socket), socket.resume()));
  const plainPort = await tcpListener(c, (s) => s.end('HTTP/1.1 200 OK\r\n\r\nnot tls'));
  const subs = {
    trickle: await subscribe(receiver.url('/trickle')),
    silent: await subscribe(`http://127.0.0.1:${silentPort}/x`),
    tls: await subscribe(`https://127.0.0.1:${plainPort}/x`),
    large: await subscribe(receiver.url('/large')),
  };
  c.after(() => sql(t, 'DELETE FROM webhook_subscriptions WHERE id = ANY($1::text[])', [Object.values(subs)]).then(() => undefined));

  await emitEvent(t, 'user.deleted', { user_id: 'usr_wh8' });
  const started = Date.now();
  await runDelivery(t);
  const elapsed = Date.now() - started;
  const rows = Object.fromEntries(await Promise.all(Object.entries(subs).map(async ([name, id]) => [name, (await deliveriesOf(t, id))[0]] as const)));
  await until(() => [...life.trickle, ...life.silent].every((l) => l.to !== undefined), 30_000, 'the hostile connections to close');
  assert.equal(life.trickle.length, 1, 'one request to the trickling receiver');
  assert.ok(life.silent.length >= 1, 'the silent socket was dialled'); // undici may dial again as the attempt is aborted; that one closes at once
  const [trickle, silent] = [life.trickle[0], life.silent[0]];
  const lives = [...life.trickle, ...life.silent].map((l) => l.to! - l.from);
  figure('WH-8', `one run over 4 hostile receivers: ${elapsed} ms; connections open (trickling, then silent) ${lives.join(', ')} ms (deadline 5,000 ms); kept error body ${rows.large.error?.length ?? 0} characters of 2 MB`);
  // Not the run's wall clock (its database work is what a loaded machine slows; a 7 s bound on it
  // failed for load alone): each connection's life as its receiver saw it, about 5,000 ms and some
  // hundreds more on a loaded machine, against 10,000 for a deadline twice as long or no end at all
  // for a deadline that a trickled byte renews (the wait above fails then). And the attempts ran at
  // once, as they must for the run to end by the deadline: the two connections were open together
  // (attempts one after another would open the silent one after the trickling one had closed, or
  // the other way round).
  for (const ms of lives) assert.ok(ms < 7500, `each attempt ended by the 5 s deadline (connections open ${lives.join(', ')} ms)`);
  assert.ok(trickle.from < silent.to! && silent.from < trickle.to!, 'the attempts of one run were open at the same time');
  for (const [name, row] of Object.entries(rows)) {
    assert.ok(row, `${name}: a delivery row`);
    assert.notEqual(row.status, 'succeeded', `${name}: ${row.status}`);
    assert.ok(row.error, `${name}: the failure is recorded`);
  }
  assert.equal(rows.trickle.response_status, 500);
  assert.equal(rows.silent.response_status, null);
  assert.match(rows.silent.error!, /timeout/);
  assert.equal(rows.tls.response_status, null);
  assert.equal(rows.large.response_status, 500);
  assert.ok(rows.large.error!.length <= 1024, `kept ${rows.large.error!.length} characters`);
});

// The claim is ordinal, not a latency bound (CI once saw a healthy delivery take 1.7 s on a loaded
// machine): a healthy delivery that had to wait for a slot could only go once a hanging attempt had
// ended at its 5 s deadline. maxInFlight 256 leaves room for two events' attempts to every
// subscription and half a third, so without the per-subscription allowance the fourth event's
// healthy delivery has no slot until the first hanging attempt gives up.
test('WH-8 100 hanging endpoints plus 1 healthy one: "the healthy endpoint\'s delivery latency is unaffected": every healthy delivery is sent while the hanging attempts hold their slots, before any of them reaches its 5 s deadline (the continuous worker, events in a row, 256 slots)', async () => {
  const hanging = 100;
  const events = 4; // the fourth event has no slot without the allowance; all must arrive within the hanging attempts' 5 s
  const hangs: { closed?: number }[] = [];
  for (let i = 0; i < hanging; i++) {
    receiver.routes.set(`/wh8-hang${i}`, (_req, res) => {
      const hang: { closed?: number } = {};
      hangs.push(hang);
      res.on('close', () => (hang.closed = Date.now()));
    });
    await createWebhook(t, admin, { scope: 'platform', url: receiver.url(`/wh8-hang${i}`), events: ['entitlement.revoked'] });
  }
  await createWebhook(t, admin, { scope: 'platform', url: receiver.url('/wh8-healthy'), events: ['entitlement.revoked'] });
  const worker = startWebhookWorker(t.deps, { idleMs: 50, maxInFlight: 256 });
  const latencies: number[] = [];
  const endedBefore: number[] = [];
  try {
    for (let i = 0; i < events; i++) {
      const sent = Date.now();
      await emitEvent(t, 'entitlement.revoked', { entitlement: { id: `ent_wh8_${i}` } });
      await until(() => receiver.at('/wh8-healthy').length === i + 1, 15_000, `healthy delivery ${i}`);
      const arrived = receiver.at('/wh8-healthy')[i].at;
      latencies.push(arrived - sent);
      endedBefore.push(hangs.filter((h) => h.closed !== undefined && h.closed <= arrived).length);
    }
  } finally {
    await worker.stop();
    await sql(t, `UPDATE webhook_subscriptions SET status = 'disabled' WHERE url LIKE $1`, [`%/wh8-%`]);
  }
  figure('WH-8', `healthy endpoint beside ${hanging} hanging ones: latencies ${latencies.join(', ')} ms; hanging attempts ended before each arrived: ${endedBefore.join(', ')}`);
  assert.equal(hangs.length, 2 * hanging, 'two attempts to each hanging endpoint (its allowance) were in flight');
  assert.deepEqual(endedBefore, new Array(events).fill(0), `no healthy delivery waited for a hanging attempt to end (latencies ${latencies.join(', ')} ms)`);
});

test('FT-7 SMTP down: the request answers 202 at once; "the email stays in the outbox and is retried" (queued, attempts 1 with the error, attempt 2 after the backoff)', async () => {
  const port = await new Promise<number>((resolve) => {
    const probe = createServer();
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as AddressInfo;
      probe.close(() => resolve(port));
    });
  });
  const mailer = await bootAnother(t, { smtpUrl: `smtp://127.0.0.1:${port}` });
  try {
    const user = await createUser(mailer, { email: uniqueEmail('ft7') });
    const started = Date.now();
    const res = await mailer.app.inject({ method: 'POST', url: '/v1/auth/password/forgot', payload: { email: user.email } });
    assert.equal(res.statusCode, 202);
    const answeredIn = Date.now() - started;
    const mail = async () => (await sql(mailer, 'SELECT status, attempts, next_attempt_at, last_error FROM emails WHERE to_address = $1', [user.email]))[0];
    // "At once" is causal, not timed (a wall-clock bound measured the machine's load, and a refused
    // port fails fast, so a request that tried SMTP itself passed it anyway): the answer came before
    // any delivery attempt, the mail still queued with no attempt and no error.
    const answered = await mail();
    assert.deepEqual([answered.status, answered.attempts, answered.last_error], ['queued', 0, null], 'the 202 was answered before any SMTP attempt');
    await mailer.deps.jobs.runNow('mail-delivery');
    const first = await mail();
    assert.equal(first.status, 'queued');
    assert.equal(first.attempts, 1);
    assert.match(first.last_error, /ECONNREFUSED/);
    assert.ok(first.next_attempt_at.getTime() > mailer.clock.now().getTime(), 'the retry is scheduled, not immediate');
    // At the retry's time (the reset link, 1 hour, still works then: a mail whose link died is not sent).
    mailer.clock.advance((first.next_attempt_at.getTime() - mailer.clock.now().getTime()) / 1000 + 1);
    await mailer.deps.jobs.runNow('mail-delivery');
    const second = await mail();
    assert.equal(second.status, 'queued');
    assert.equal(second.attempts, 2, 'retried');
    figure('FT-7', `forgot answered in ${answeredIn} ms with SMTP down, before any SMTP attempt; the mail stays queued (attempts ${second.attempts})`);
  } finally {
    await mailer.close();
  }
});

test('FT-7 "processor unreachable → 503 billing_unavailable within a bounded time" when the processor accepts the connection and never answers (a closed port is billing/checkout-stripe.test.ts): checkout and portal, sent together, each answer 503 billing_unavailable with Retry-After after one retry (two dials each), within twice the 5 s timeout and far under Stripe\'s own 80 s', async (c) => {
  let dials = 0;
  const silentPort = await tcpListener(c, () => void dials++);
  const hung = await buildTenancyApp({ stripeSecretKey: 'sk_test_x', stripeApiBase: `http://127.0.0.1:${silentPort}` });
  c.after(() => hung.close());
  const owner = await tenantOwner(hung, { stripeCustomerId: 'cus_ft7_silent' });
  const headers = { authorization: `Bearer ${owner.token}` };
  const started = Date.now();
  const [checkout, portal] = await Promise.all([
    hung.app.inject({ method: 'POST', url: `/v1/tenants/${owner.tenantId}/billing/checkout-sessions`, headers: { ...headers, 'idempotency-key': 'ft7-silent' },
      payload: { plan: 'team', success_url: 'https://app.example.com/billing/done', cancel_url: 'https://app.example.com/billing' } }),
    hung.app.inject({ method: 'POST', url: `/v1/tenants/${owner.tenantId}/billing/portal-sessions`, headers, payload: { return_url: 'https://app.example.com' } }),
  ]);
  const elapsed = Date.now() - started;
  figure('FT-7', `silent processor: both answered in ${elapsed} ms`);
  for (const res of [checkout, portal]) {
    assertError(res, 503, 'billing_unavailable');
    assert.ok(Number(res.headers['retry-after']) > 0, `Retry-After: ${res.headers['retry-after']}`);
  }
  assert.equal(dials, 4, 'each call tried twice (docs/decisions.md "Processor": one retry, 5 s timeout)');
  // Two 5 s timeouts in a row: about 10 s, some more on a loaded machine; without the timeout, Stripe's
  // client waits 80 s a try. 40 s is far from both.
  assert.ok(elapsed < 40_000, `bounded: ${elapsed} ms`);
});
