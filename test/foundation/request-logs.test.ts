// Every request's log lines carry its `req_` id, the one its Request-Id header gives the client (README,
// Configuration: "a line as each request arrives and one as it completes, whose reqId is the request's
// req_ id"; catalog IV-6: the error is logged with the req_ id), including the lines the service writes
// while it works for the request, and requests refused before routing or before Node read them whole.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { buildCapturedApp, type CapturedApp } from '../security/core/support.js';
import { assertError, call } from '../helpers/http.js';
import { tenantOwner } from '../tenancy/support.js';
import { deliver, startFakeProcessor, subscription, type FakeProcessor } from '../billing/support.js';

const STRIPE_SECRET_KEY = 'sk_test_request_logs_8c1f0e';
let t: CapturedApp;
let processor: FakeProcessor;
before(async () => {
  processor = await startFakeProcessor();
  t = await buildCapturedApp({ stripeSecretKey: STRIPE_SECRET_KEY, stripeApiBase: processor.base, stripeWebhookSecret: 'whsec_request_logs' }, undefined, 'info');
});
after(async () => {
  await t.close();
  await processor.close();
});

const linesOf = (requestId: unknown) => t.logs.filter((l) => l.reqId === requestId);

test('IV-6: a processor failure answered 503 billing_unavailable is logged at error with the request\'s req_ id (its Request-Id header), and without the secret key', async () => {
  const owner = await tenantOwner(t);
  processor.refuse.add('/v1/checkout/sessions');
  try {
    const res = await call(t, 'POST', `/v1/tenants/${owner.tenantId}/billing/checkout-sessions`, owner.token,
      { plan: 'team', success_url: 'https://app.example.com/done', cancel_url: 'https://app.example.com/back' }, { 'idempotency-key': 'logs-refused-1' });
    assertError(res, 503, 'billing_unavailable');
    const id = res.headers['request-id'];
    assert.match(String(id), /^req_/);
    const cause = t.logs.find((l) => l.msg === 'payment processor refused a request');
    assert.ok(cause, 'the processor\'s refusal is logged');
    assert.equal(cause.level, 50);
    assert.equal(cause.reqId, id, `the refusal names the request it failed: ${JSON.stringify(cause)}`);
    assert.equal(cause.operation, 'checkout.sessions.create');
    assert.ok(linesOf(id).some((l) => l.msg === 'request completed'), 'the request\'s own lines carry the same id');
    assert.ok(!JSON.stringify(t.logs).includes(STRIPE_SECRET_KEY), 'the secret key is never logged');
  } finally {
    processor.refuse.clear();
  }
});

test('a processor event\'s line ("processor event received", and "for no known Tenant") carries the req_ id of the POST that delivered it', async () => {
  const res = await deliver(t, 'customer.subscription.updated', subscription({ tenantId: 'tnt_01ARZ3NDEKTSV4RRFFQ69G5FAV', id: 'sub_logs_unknown' }));
  assert.equal(res.statusCode, 200, res.body);
  const id = res.headers['request-id'];
  const msgs = linesOf(id).map((l) => l.msg);
  assert.ok(msgs.includes('processor event for no known Tenant'), JSON.stringify(msgs));
  assert.ok(msgs.includes('processor event received'), JSON.stringify(msgs));
});

test('every request logs its completion under its req_ id: a URL that is not validly encoded (400) and an over-long path parameter (422) too', async () => {
  for (const [url, status] of [['/v1/%zz', 400], [`/v1/users/${'a'.repeat(3000)}`, 422]] as const) {
    const res = await t.app.inject({ method: 'GET', url });
    assert.equal(res.statusCode, status, res.body);
    const id = res.headers['request-id'];
    assert.match(String(id), /^req_/);
    const lines = linesOf(id);
    assert.deepEqual(lines.map((l) => l.msg), ['incoming request', 'request completed'], `${url.slice(0, 20)}: ${JSON.stringify(lines)}`);
    assert.equal((lines[1].res as { statusCode: number }).statusCode, status);
    assert.equal(typeof lines[1].responseTime, 'number');
  }
});

/** Sends raw bytes to the listening service and returns the whole answer (the service closes the connection). */
async function rawExchange(port: number, bytes: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    let answer = '';
    socket.on('data', (d) => (answer += d.toString('latin1')));
    socket.on('error', reject);
    socket.on('close', () => resolve(answer));
    socket.write(bytes);
  });
}

test('a request Node\'s parser refuses (headers over the limit, bytes that are not HTTP) is logged with the req_ id its answer carries, its status and code, and never the bytes it sent', async () => {
  const address = await t.app.listen({ port: 0, host: '127.0.0.1' }); // closed with the app
  const port = Number(new URL(address).port);
  const credential = `Bearer rtk_${'S'.repeat(43)}`;
  const cases = [
    { bytes: `GET /health HTTP/1.1\r\nHost: a.example\r\nAuthorization: ${credential}\r\nX-Big: ${'x'.repeat(20_000)}\r\n\r\n`, status: 431, code: 'headers_too_large' },
    { bytes: `GET /health HTTP/1.1\r\nHost: a.example\r\nAuthorization: ${credential}\r\nX: \u0001\r\n\r\n`, status: 400, code: 'bad_request' },
  ];
  for (const { bytes, status, code } of cases) {
    const answer = await rawExchange(port, bytes);
    assert.match(answer, new RegExp(`^HTTP/1\\.1 ${status} `));
    const id = /\r\nRequest-Id: (req_[0-9A-HJKMNP-TV-Z]{26})\r\n/.exec(answer)?.[1];
    assert.ok(id, answer);
    const lines = linesOf(id);
    assert.equal(lines.length, 1, `one line for ${code}: ${JSON.stringify(lines)}`);
    assert.equal(lines[0].level, 30, 'a client\'s fault is no warning or error');
    assert.equal((lines[0].res as { statusCode: number }).statusCode, status);
    assert.equal(lines[0].code, code);
  }
  assert.ok(!JSON.stringify(t.logs).includes('S'.repeat(43)), 'the refused request\'s bytes (its Authorization header) are not logged');
});
