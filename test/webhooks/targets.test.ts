// Where webhooks may go (WH-6, WH-7) and how they are signed (WH-1). The address rules run with
// WEBHOOK_ALLOW_PRIVATE_TARGETS off and an injected resolver, so no test needs DNS.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { TestApp } from '../helpers/app.js';
import { isPublicAddress, RESOLVE_DEADLINE_MS } from '../../src/modules/webhooks/targets.js';
import { setWebhookResolver, signatureHeader, verifySignature } from '../../src/modules/webhooks/index.js';
import { signPayload } from '../../src/modules/webhooks/signature.js';
import { assertError, assertStatus, buildApp, call, deliveriesOf, platformKey, Receiver, runDelivery, sql, type InjectResponse } from './support.js';

let t: TestApp;
let admin: string;
/** What the injected resolver answers, per host name; a missing name does not resolve. */
const dns = new Map<string, string[]>();
before(async () => {
  t = await buildApp({ webhookAllowPrivateTargets: false });
  admin = await platformKey(t);
  setWebhookResolver(t.deps, async (host) => {
    const answers = dns.get(host);
    if (answers?.[0] === 'never') return new Promise(() => {});
    if (!answers) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND' });
    return answers.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));
  });
});
after(() => t.close());

test('WH-1: the signature of the reference vector; two v1 entries verify with either secret', () => {
  const body = '{"id":"wev_01HZX","type":"webhook.test","data":{"message":"hi"}}';
  assert.equal(signPayload('whsec_test_0123456789abcdef', 1700000000, body), '18dffc4739884ca828408d8e0cf4a8ed53d6aea8c58be46230ce0bf93f250914');
  const header = signatureHeader(['whsec_new', 'whsec_old'], 1700000000, body);
  assert.match(header, /^t=1700000000,v1=[0-9a-f]{64},v1=[0-9a-f]{64}$/);
  assert.equal(verifySignature(header, 'whsec_old', body, 1700000100), true);
  assert.equal(verifySignature(header, 'whsec_new', body, 1700000100), true);
  assert.equal(verifySignature(header, 'whsec_other', body, 1700000100), false);
  assert.equal(verifySignature(header, 'whsec_new', `${body} `, 1700000100), false, 'the exact raw bytes are signed');
  assert.equal(verifySignature(header, 'whsec_new', body, 1700000301), false, 'older than 5 minutes');
});

test('the verifier "rejects when t is more than 5 minutes old": a signature exactly 5 minutes old (or ahead) is still accepted, a second more either way is not', () => {
  const body = '{"id":"wev_01HZX","type":"webhook.test","data":{"message":"hi"}}';
  const header = signatureHeader(['whsec_test_0123456789abcdef'], 1700000000, body);
  assert.equal(verifySignature(header, 'whsec_test_0123456789abcdef', body, 1700000300), true, '300 s old: not more than 5 minutes');
  assert.equal(verifySignature(header, 'whsec_test_0123456789abcdef', body, 1700000301), false, '301 s old');
  // At most 5 minutes away either way (signature.ts): a t from more than 5 minutes ahead is no fresher.
  assert.equal(verifySignature(header, 'whsec_test_0123456789abcdef', body, 1700000000 - 300), true, '300 s ahead');
  assert.equal(verifySignature(header, 'whsec_test_0123456789abcdef', body, 1700000000 - 301), false, '301 s ahead');
});

test('the verifier "accepts if any v1 matches": a v1 of the wrong length is no match and never an error, whichever entry it is', () => {
  const body = '{"id":"wev_01HZX","type":"webhook.test","data":{"message":"hi"}}';
  const secret = 'whsec_test_0123456789abcdef';
  const good = signPayload(secret, 1700000000, body);
  for (const short of [good.slice(0, 62), `${good}00`]) {
    assert.equal(verifySignature(`t=1700000000,v1=${short}`, secret, body, 1700000000), false, `alone: ${short.length} hex digits`);
    assert.equal(verifySignature(`t=1700000000,v1=${short},v1=${good}`, secret, body, 1700000000), true, `before the right one: ${short.length} hex digits`);
  }
});

test('the address classifier: public unicast only', () => {
  const refused = [
    '127.0.0.1', '127.255.255.254', '0.0.0.0', '10.0.0.1', '172.16.0.1', '172.31.255.255', '192.168.1.1', '100.64.0.1', '169.254.169.254',
    '198.18.0.1', '198.19.255.255', '224.0.0.1', '240.0.0.1', '255.255.255.255', '192.0.2.1', '::1', '::', '::ffff:127.0.0.1', '::ffff:8.8.8.8',
    '64:ff9b::a00:1', 'fc00::1', 'fd12:3456::1', 'fe80::1', 'fe80::1%eth0', 'ff02::1', '2001:db8::1', '2002:7f00:1::1', '2001::1', '2001:1ff:ffff::1', 'not-an-ip',
  ];
  for (const a of refused) assert.equal(isPublicAddress(a), false, a);
  for (const a of ['93.184.216.34', '8.8.8.8', '172.32.0.1', '100.128.0.1', '2001:200::1', '2606:4700:4700::1111', '2a00:1450:4001:81a::200e']) {
    assert.equal(isPublicAddress(a), true, a);
  }
});

test('a webhook host whose name gets no answer is refused within the resolve deadline (422 invalid_webhook_url, the same words as a name that does not resolve), never a request hanging with the resolver; nothing is created', async () => {
  dns.set('silent.example', ['never']);
  const before = await sql(t, 'SELECT count(*)::int AS n FROM webhook_subscriptions');
  const started = Date.now();
  const err = assertError(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url: 'https://silent.example/hook', events: ['*'] }), 422, 'invalid_webhook_url');
  const waited = Date.now() - started;
  assert.equal(err.details.reason, 'silent.example does not resolve to public addresses only');
  assert.ok(waited >= RESOLVE_DEADLINE_MS - 50 && waited < RESOLVE_DEADLINE_MS + 5000, `answered after ${waited} ms`);
  assert.deepEqual(await sql(t, 'SELECT count(*)::int AS n FROM webhook_subscriptions'), before);
});

test('WH-6: at creation, non-https, userinfo and every private, loopback, link-local, unique-local, mapped or encoded address is 422 invalid_webhook_url', async () => {
  dns.set('localhost', ['127.0.0.1']);
  dns.set('mixed.example', ['93.184.216.34', '10.0.0.1']);
  dns.set('inner.example', ['fd00::5']);
  dns.set('public.example', ['93.184.216.34']);
  const urls = [
    'http://public.example/hook', 'ftp://public.example/', 'https://user:pass@public.example/', 'https://user@public.example/', 'https://@public.example/',
    'https://127.0.0.1/', 'https://127.1/', 'https://2130706433/', 'https://0x7f000001/', 'https://017700000001/', 'https://0.0.0.0/',
    'https://localhost./', 'https://localhost/', 'https://app.localhost/', 'https://[::1]/', 'https://[::]/', 'https://[::ffff:127.0.0.1]/',
    'https://[64:ff9b::a00:1]/', 'https://[fc00::1]/', 'https://[fe80::1]/', 'https://10.1.2.3/', 'https://172.16.0.1/', 'https://192.168.0.1/',
    'https://100.64.0.1/', 'https://169.254.169.254/latest/meta-data', 'https://198.18.0.1/', 'https://224.0.0.1/', 'https://240.0.0.1/',
    'https://mixed.example/', 'https://inner.example/', 'https://nxdomain.example/', 'not a url',
  ];
  for (const url of urls) {
    const res = await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url, events: ['*'] });
    assertError(res, 422, 'invalid_webhook_url');
  }
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM webhook_subscriptions'))[0].n, 0);
  const ok = assertStatus(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url: 'https://public.example/hook', events: ['*'] }), 201);
  assertError(await call(t, 'PATCH', `/v1/webhooks/${ok.id}`, admin, { url: 'https://10.0.0.8/' }), 422, 'invalid_webhook_url');
});

test('WH-6: `localhost` and a *.localhost name (loopback names) and an address in 2001::/23 up to its last /24 are 422 invalid_webhook_url even when the resolver answers a public address', async () => {
  dns.set('localhost', ['93.184.216.34']);
  dns.set('api.localhost', ['93.184.216.34']);
  dns.set('edge.example', ['2001:1ff::1']);
  const urls = ['https://localhost/hook', 'https://api.localhost/hook', 'https://[2001:1ff::1]/hook', 'https://edge.example/hook'];
  for (const url of urls) {
    assertError(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url, events: ['*'] }), 422, 'invalid_webhook_url');
  }
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM webhook_subscriptions WHERE url = ANY($1)', [urls]))[0].n, 0);
});

test('a refused target discloses no internal name or address: a name resolving to a private address and one that does not resolve get the same reason, without the address', async () => {
  dns.set('intranet.example', ['10.20.30.40']);
  const reasons: string[] = [];
  for (const host of ['intranet.example', 'nowhere.example']) {
    const error = assertError(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url: `https://${host}/hook`, events: ['*'] }), 422, 'invalid_webhook_url');
    const text = JSON.stringify(error);
    assert.doesNotMatch(text, /10\.20\.30\.40/, 'the resolved address is not in the answer');
    reasons.push(text.replaceAll(host, '<host>'));
  }
  assert.equal(reasons[0], reasons[1], 'a private answer reads like no answer');
});

test('WH-7: a name that resolved public at creation and resolves to 127.0.0.1 at delivery (DNS rebinding) is never dialled', async () => {
  const receiver = await Receiver.start();
  try {
    dns.set('rebind.example', ['93.184.216.34']);
    const sub = assertStatus(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url: `https://rebind.example:${receiver.port}/hook`, events: ['*'] }), 201);
    for (const internal of ['127.0.0.1', '169.254.169.254']) {
      dns.set('rebind.example', [internal]);
      assertStatus(await call(t, 'POST', `/v1/webhooks/${sub.id}/test`, admin), 202);
      await runDelivery(t);
    }
    const rows = await deliveriesOf(t, sub.id);
    assert.equal(rows.length, 2);
    for (const r of rows) {
      assert.equal(r.status, 'failed');
      assert.equal(r.response_status, null);
      assert.match(r.error!, /rebind\.example does not resolve to public addresses only/);
      assert.doesNotMatch(r.error!, /127\.0\.0\.1|169\.254\.169\.254/, 'the internal address is not disclosed');
    }
    assert.equal(receiver.connections, 0, 'no connection reached the internal address');
  } finally {
    await receiver.close();
  }
});

test('WH-7: a stored literal internal address is refused at delivery without dialling', async () => {
  const receiver = await Receiver.start();
  try {
    dns.set('ok.example', ['93.184.216.34']);
    const sub = assertStatus(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url: 'https://ok.example/hook', events: ['*'] }), 201);
    await sql(t, 'UPDATE webhook_subscriptions SET url = $2 WHERE id = $1', [sub.id, `https://127.0.0.1:${receiver.port}/hook`]);
    assertStatus(await call(t, 'POST', `/v1/webhooks/${sub.id}/test`, admin), 202);
    await runDelivery(t);
    const [row] = await deliveriesOf(t, sub.id);
    assert.equal(row.status, 'failed');
    assert.match(row.error!, /refused/);
    assert.equal(receiver.connections, 0);
  } finally {
    await receiver.close();
  }
});

test('WEBHOOK_ALLOW_PRIVATE_TARGETS=1 relaxes the scheme and address rules (development only), never userinfo', async () => {
  const dev = await buildApp({ webhookAllowPrivateTargets: true });
  try {
    const key = await platformKey(dev);
    assertStatus(await call(dev, 'POST', '/v1/webhooks', key, { scope: 'platform', url: 'http://127.0.0.1:8080/hook', events: ['*'] }), 201);
    assertError(await call(dev, 'POST', '/v1/webhooks', key, { scope: 'platform', url: 'http://user:pw@127.0.0.1/', events: ['*'] }), 422, 'invalid_webhook_url');
  } finally {
    await dev.close();
  }
});

test('PATCH url follows the create rules: non-https, userinfo, a name resolving to a private address and a loopback literal are 422 invalid_webhook_url; the url and audit stay as they were', async () => {
  dns.set('patch-public.example', ['93.184.216.34']);
  dns.set('patch-inner.example', ['10.0.0.1']);
  const sub = assertStatus(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url: 'https://patch-public.example/hook', events: ['*'] }), 201);
  for (const url of ['http://patch-public.example/hook', 'https://user:pw@patch-public.example/', 'https://user@patch-public.example/', 'https://patch-inner.example/', 'https://127.0.0.1/']) {
    assertError(await call(t, 'PATCH', `/v1/webhooks/${sub.id}`, admin, { url }), 422, 'invalid_webhook_url');
  }
  assert.equal((await sql(t, 'SELECT url FROM webhook_subscriptions WHERE id = $1', [sub.id]))[0].url, 'https://patch-public.example/hook');
  assert.equal((await sql(t, `SELECT count(*)::int AS n FROM audit_events WHERE action = 'webhook.updated' AND target_id = $1`, [sub.id]))[0].n, 0);
});

test('an Idempotency-Key create or url PATCH resolves the webhook host before its transaction opens ("nothing waits on the outside while holding a connection"): other requests are served while DNS is slow', async () => {
  let release: () => void = () => undefined;
  let asked: () => void = () => undefined;
  setWebhookResolver(t.deps, (host) => {
    if (host !== 'slow.example') return Promise.reject(Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND' }));
    asked();
    return new Promise((resolve) => {
      release = () => resolve([{ address: '93.184.216.34', family: 4 }]);
    });
  });
  try {
    // While the resolver is waiting, GET /health (which needs the database) must answer: the lookup is
    // held until it has (or until 10 s have passed, far beyond a loaded machine's /health).
    const healthDuringDns = async (request: Promise<InjectResponse>) => {
      await new Promise<void>((resolve) => (asked = resolve));
      const health = await Promise.race([call(t, 'GET', '/health', null), new Promise<null>((resolve) => setTimeout(() => resolve(null), 10_000).unref())]);
      release();
      return { health, res: await request };
    };
    const created = await healthDuringDns(
      call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url: 'https://slow.example/hook', events: ['*'] }, { 'idempotency-key': `slow-${Date.now()}` }),
    );
    assert.notEqual(created.health, null, 'GET /health waited for the create\'s DNS lookup');
    assert.equal(created.health!.statusCode, 200);
    const sub = assertStatus(created.res, 201);
    assert.equal(sub.url, 'https://slow.example/hook');

    const patched = await healthDuringDns(
      call(t, 'PATCH', `/v1/webhooks/${sub.id}`, admin, { url: 'https://slow.example/other' }, { 'idempotency-key': `slow-patch-${Date.now()}` }),
    );
    assert.notEqual(patched.health, null, 'GET /health waited for the PATCH\'s DNS lookup');
    assert.equal(patched.health!.statusCode, 200);
    assert.equal(assertStatus(patched.res, 200).url, 'https://slow.example/other');
    assert.deepEqual(await sql(t, `SELECT action FROM audit_events WHERE target_id = $1 ORDER BY created_at, id`, [sub.id]).then((r) => r.map((x) => x.action)), ['webhook.created', 'webhook.updated']);
  } finally {
    setWebhookResolver(t.deps, async (host) => {
      const answers = dns.get(host);
      if (answers?.[0] === 'never') return new Promise(() => {});
      if (!answers) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND' });
      return answers.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));
    });
  }
});

test('WH-6: the other reserved IPv4 blocks (6to4 relay anycast 192.88.99.0/24, documentation 198.51.100.0/24 and 203.0.113.0/24) and IPv6 documentation 3fff::/20 are 422 invalid_webhook_url; the first addresses past each, and 3000::/4 inside global unicast 2000::/3, are accepted', async () => {
  const refused = ['https://192.88.99.1/', 'https://192.88.99.254/', 'https://198.51.100.7/', 'https://203.0.113.9/', 'https://[3fff::1]/', 'https://[3fff:fff:ffff::1]/'];
  for (const url of refused) {
    assertError(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url, events: ['*'] }), 422, 'invalid_webhook_url');
  }
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM webhook_subscriptions WHERE url = ANY($1)', [refused]))[0].n, 0);
  for (const url of ['https://192.88.100.1/', 'https://198.51.101.1/', 'https://203.0.114.1/', 'https://[3fff:1000::1]/', 'https://[3001::1]/']) {
    assert.equal(assertStatus(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url, events: ['*'] }), 201).url, url);
  }
});

test('the webhook url is at most 2048 characters (the published schema): 2048 is accepted, 2049 is 422 validation_failed and nothing is stored', async () => {
  dns.set('long.example', ['93.184.216.34']);
  const base = 'https://long.example/';
  const at = `${base}${'a'.repeat(2048 - base.length)}`;
  const over = `${at}a`;
  assert.equal(assertStatus(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url: at, events: ['*'] }), 201).url, at);
  assertError(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url: over, events: ['*'] }), 422, 'validation_failed');
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM webhook_subscriptions WHERE url = $1', [over]))[0].n, 0);
});
