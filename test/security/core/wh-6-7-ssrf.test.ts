// WH-6 / WH-7: SSRF of webhook targets, at creation and at delivery (DNS rebinding, pinning,
// redirects). DNS is an injected resolver and every outbound connection goes through a dialer hook
// that records the address it would dial and never dials outside loopback; a "public" receiver is a
// loopback TLS server the hook routes one public test address to.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer as createHttpsServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { assertError, assertStatus, bootAnother, buildCapturedApp, call, figure, sql, type CapturedApp } from './support.js';
import { Dialer, selfSignedCertificate } from './dialer.js';
import { deliveriesOf, emitEvent, platformKey, Receiver, runDelivery } from '../../webhooks/support.js';
import { setWebhookResolver } from '../../../src/modules/webhooks/index.js';

/** A public address (TEST: routed by the dialer hook to the loopback TLS receiver). */
const PUBLIC = '93.184.216.34';
const NAMES = ['hooks.example', 'rebind.example', 'pin.example', 'flip.example', 'event.example', 'peer.example'];

let t: CapturedApp;
let admin: string;
const dialer = new Dialer();
/** The injected resolver: per host, a queue of answers (the last one repeats); every question is logged. */
const dns = new Map<string, string[][]>();
const asked: string[] = [];
let tlsServer: Server;
let tlsPort: number;
let tlsConnections = 0;
const tlsRequests: { path: string; at: number }[] = [];
/** Per-path answers of the TLS receiver; other paths get 200. */
const answers = new Map<string, (res: import('node:http').ServerResponse) => void>();

const answer = (host: string, ...sets: string[][]) => dns.set(host, sets);

before(async () => {
  t = await buildCapturedApp({ webhookAllowPrivateTargets: false });
  admin = await platformKey(t);
  setWebhookResolver(t.deps, async (host) => {
    asked.push(host);
    const queue = dns.get(host);
    if (!queue) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND' });
    const set = queue.length > 1 ? queue.shift()! : queue[0];
    return set.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));
  });
  const { key, cert } = selfSignedCertificate(NAMES);
  tlsServer = createHttpsServer({ key, cert }, (req, res) => {
    req.resume();
    req.on('end', () => {
      tlsRequests.push({ path: req.url ?? '/', at: Date.now() });
      res.setHeader('connection', 'close');
      const route = answers.get(req.url ?? '/');
      if (route) route(res);
      else res.writeHead(200).end('ok');
    });
  });
  tlsServer.on('secureConnection', () => tlsConnections++);
  await new Promise<void>((resolve) => tlsServer.listen(0, '127.0.0.1', resolve));
  tlsPort = (tlsServer.address() as AddressInfo).port;
  dialer.ca = cert;
  dialer.publicToLoopback.add(PUBLIC);
  dialer.install();
});
after(async () => {
  dialer.uninstall();
  tlsServer.closeAllConnections();
  await new Promise<void>((resolve) => tlsServer.close(() => resolve()));
  await t.close();
});

const create = (url: string) => call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url, events: ['*'] });

/** Sends webhook.test through the real delivery path and returns the delivery (DB row and API view). */
async function testDelivery(subId: string) {
  const queued = assertStatus(await call(t, 'POST', `/v1/webhooks/${subId}/test`, admin), 202);
  await runDelivery(t);
  const [row] = (await deliveriesOf(t, subId)).filter((d) => d.id === queued.id);
  const listed = assertStatus(await call(t, 'GET', `/v1/webhooks/${subId}/deliveries`, admin), 200).data.find((d: any) => d.id === queued.id);
  assert.equal(listed.status, row.status);
  assert.equal(listed.error, row.error);
  return row;
}

test('WH-6 at creation every non-https, userinfo, private, loopback, link-local, unique-local, mapped, NAT64, encoded or reserved target is 422 invalid_webhook_url, with no dial', async () => {
  // Names answered by the injected resolver: each resolves only to (or also to) an internal address.
  const internalByName: [string, string[]][] = [
    ['lo4.example', ['127.0.0.1']], ['lo4b.example', ['127.8.9.10']], ['meta.example', ['169.254.169.254']], ['ten.example', ['10.1.2.3']],
    ['rfc1918b.example', ['172.20.0.5']], ['rfc1918c.example', ['192.168.10.10']], ['cgnat.example', ['100.64.0.9']], ['bench.example', ['198.18.0.1']],
    ['zero.example', ['0.0.0.0']], ['mcast.example', ['224.0.0.251']], ['reserved.example', ['240.0.0.1']], ['bcast.example', ['255.255.255.255']],
    ['lo6.example', ['::1']], ['any6.example', ['::']], ['mapped.example', ['::ffff:127.0.0.1']], ['mappedmeta.example', ['::ffff:a9fe:a9fe']],
    ['nat64.example', ['64:ff9b::a00:1']], ['ula.example', ['fd00::1']], ['imds6.example', ['fd00:ec2::254']], ['ll6.example', ['fe80::1']],
    ['sixto4.example', ['2002:7f00:1::1']], ['teredo.example', ['2001::1']],
    ['mixed.example', [PUBLIC, '10.0.0.1']], ['mixed2.example', ['127.0.0.1', PUBLIC]], ['mixed6.example', [PUBLIC, 'fc00::1']],
    ['empty.example', []],
  ];
  for (const [name, set] of internalByName) answer(name, set);
  answer('public.example', [PUBLIC]);
  const hostile = [
    'http://public.example/hook', 'ftp://public.example/', 'file:///etc/passwd', 'gopher://public.example/',
    'https://user:pass@public.example/', 'https://user@public.example/', 'https://:pw@public.example/', 'https://@public.example/',
    'https://public.example@127.0.0.1/', 'https://127.0.0.1:443@public.example/',
    'https://127.0.0.1/', 'https://127.1/', 'https://2130706433/', 'https://0x7f000001/', 'https://017700000001/', 'https://0177.0.0.1/',
    'https://0x7f.0.0.1/', 'https://127.000.000.001/', 'https://%31%32%37.0.0.1/', 'https://0.0.0.0/', 'https://0/',
    'https://localhost/', 'https://localhost./', 'https://LOCALHOST/', 'https://app.localhost/', 'https://%6c%6f%63%61%6c%68%6f%73%74/',
    'https://[::1]/', 'https://[::]/', 'https://[::ffff:127.0.0.1]/', 'https://[::ffff:7f00:1]/', 'https://[0:0:0:0:0:ffff:127.0.0.1]/',
    'https://[::127.0.0.1]/', 'https://[64:ff9b::a00:1]/', 'https://[64:ff9b::a9fe:a9fe]/', 'https://[fc00::1]/', 'https://[fd00:ec2::254]/',
    'https://[fe80::1]/', 'https://[2002:7f00:1::1]/', 'https://[2001::1]/', 'https://[ff02::1]/',
    'https://10.0.0.1/', 'https://10.255.255.255/', 'https://172.16.0.1/', 'https://172.31.255.254/', 'https://192.168.0.1/', 'https://192.168.255.255/',
    'https://100.64.0.1/', 'https://100.127.255.254/', 'https://169.254.169.254/latest/meta-data/', 'https://169.254.0.1/', 'https://198.18.0.1/',
    'https://198.19.255.254/', 'https://224.0.0.1/', 'https://239.255.255.250/', 'https://240.0.0.1/', 'https://255.255.255.255/',
    'https://192.0.0.1/', 'https://192.0.2.1/',
    ...internalByName.map(([name]) => `https://${name}/hook`),
    'https://nxdomain.example/', 'not a url', '//public.example/', 'https:///path-only',
  ];
  const stored = (await sql(t, 'SELECT count(*)::int AS n FROM webhook_subscriptions'))[0].n;
  const bypasses: string[] = [];
  for (const url of hostile) {
    const res = await create(url);
    if (res.statusCode !== 422) {
      bypasses.push(`${url}: ${res.statusCode}`);
      continue;
    }
    const error = assertError(res, 422, 'invalid_webhook_url');
    assert.equal(typeof error.details.reason, 'string', url);
  }
  // The same rules on PATCH: a healthy subscription cannot be pointed inside.
  const ok = assertStatus(await create('https://public.example/hook'), 201);
  const patched = ['https://169.254.169.254/', 'https://[::ffff:127.0.0.1]/', 'https://2130706433/', 'https://meta.example/', 'https://mixed.example/', 'http://public.example/', 'https://u:p@public.example/'];
  for (const url of patched) {
    const res = await call(t, 'PATCH', `/v1/webhooks/${ok.id}`, admin, { url });
    if (res.statusCode !== 422) bypasses.push(`PATCH ${url}: ${res.statusCode}`);
    else assertError(res, 422, 'invalid_webhook_url');
  }
  assert.equal(assertStatus(await call(t, 'GET', `/v1/webhooks/${ok.id}`, admin), 200).url, 'https://public.example/hook');
  const total = hostile.length + patched.length;
  figure('WH-6', `bypasses: ${bypasses.length} / ${total}; dials during creation: ${dialer.dials.length}`);
  assert.deepEqual(bypasses, []);
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM webhook_subscriptions'))[0].n, stored + 1, 'only the public control was stored');
  assert.deepEqual(dialer.dials, [], 'creation never dials');
});

test('WH-6 public neighbours of the blocked ranges and public IPv6 are accepted (the check is not a blanket refusal)', async () => {
  answer('v6.example', ['2606:4700:4700::1111']);
  for (const url of ['https://172.32.0.1/', 'https://100.128.0.1/', 'https://198.20.0.1/', 'https://11.0.0.1/', 'https://169.255.0.1/', 'https://[2606:4700:4700::1111]/', 'https://v6.example/']) {
    assertStatus(await create(url), 201);
  }
});

test('WH-6 WEBHOOK_ALLOW_PRIVATE_TARGETS=1 relaxes scheme and address checks (never userinfo) and logs a start-up warning; without it no such warning', async () => {
  assert.equal(t.logs.filter((l) => /WEBHOOK_ALLOW_PRIVATE_TARGETS/.test(String(l.msg))).length, 0);
  const dev = await bootAnother(t, { webhookAllowPrivateTargets: true });
  try {
    const warned = dev.logs.filter((l) => l.level === 40 && /WEBHOOK_ALLOW_PRIVATE_TARGETS=1/.test(String(l.msg)));
    assert.equal(warned.length, 1, JSON.stringify(dev.logs));
    const key = await platformKey(dev);
    const devCreate = (url: string) => call(dev, 'POST', '/v1/webhooks', key, { scope: 'platform', url, events: ['*'] });
    for (const url of ['http://127.0.0.1:8080/hook', 'https://[::1]/', 'http://169.254.169.254/']) assertStatus(await devCreate(url), 201);
    assertError(await devCreate('http://user:pw@127.0.0.1/'), 422, 'invalid_webhook_url');
  } finally {
    await dev.close();
  }
});

test('WH-7 DNS rebinding: a name that was public at creation and answers internal addresses at send is never dialled; the attempt is recorded failed', async () => {
  const url = `https://rebind.example:${tlsPort}/rebind`;
  answer('rebind.example', [PUBLIC]);
  const sub = assertStatus(await create(url), 201);
  const internalAnswers = [
    ['127.0.0.1'], ['169.254.169.254'], ['10.0.0.1'], ['192.168.1.1'], ['100.64.0.1'], ['0.0.0.0'], ['::1'], ['::ffff:127.0.0.1'], ['::ffff:a9fe:a9fe'],
    ['fd00::1'], ['fe80::1'], ['64:ff9b::a9fe:a9fe'], [PUBLIC, '127.0.0.1'], ['169.254.169.254', PUBLIC],
  ];
  const dialsBefore = dialer.dials.length;
  const connectionsBefore = tlsConnections;
  const bypasses: string[] = [];
  for (const set of internalAnswers) {
    answer('rebind.example', set);
    const row = await testDelivery(sub.id);
    if (row.status !== 'failed' || row.response_status !== null) bypasses.push(`${set.join(',')}: ${row.status} ${row.response_status}`);
    assert.equal(row.status, 'failed', set.join(','));
    assert.equal(row.attempt, 1);
    assert.equal(row.response_status, null);
    assert.match(row.error!, /refused: .*does not resolve to public addresses only/, set.join(','));
  }
  const attempts = dialer.dials.slice(dialsBefore);
  assert.equal(attempts.length, internalAnswers.length, 'one connection attempt per delivery');
  assert.ok(attempts.every((d) => d.action === 'lookup-refused' && d.address === null), JSON.stringify(attempts));
  assert.equal(tlsConnections, connectionsBefore, 'nothing reached the receiver');

  // An event delivery (retried on a schedule) records the failed attempt the same way.
  const event = await emitEvent(t, 'user.reactivated', { user_id: 'usr_rebind' });
  answer('rebind.example', ['169.254.169.254']);
  await runDelivery(t);
  const [eventRow] = (await deliveriesOf(t, sub.id)).filter((d) => d.event_id === event);
  assert.equal(eventRow.status, 'pending', 'a failed attempt of an event is retried later');
  assert.equal(eventRow.attempt, 1);
  assert.equal(eventRow.response_status, null);
  assert.match(eventRow.error!, /does not resolve to public addresses only/);
  assert.doesNotMatch(eventRow.error!, /169\.254\.169\.254/, 'the internal address is not disclosed');

  // Control: back to the public answer, the same subscription delivers (the harness is not what refused).
  answer('rebind.example', [PUBLIC]);
  const okRow = await testDelivery(sub.id);
  assert.equal(okRow.status, 'succeeded', okRow.error ?? '');
  assert.equal(tlsRequests.filter((r) => r.path === '/rebind').length, 1);
  figure('WH-7', `rebinding bypasses: ${bypasses.length} / ${internalAnswers.length + 1}; internal dials: ${dialer.internal().length}`);
  assert.deepEqual(bypasses, []);
  assert.deepEqual(dialer.internal(), []);
});

test('WH-7 the connection is pinned to the address validated at send: a resolver that flips to 127.0.0.1 after its first answer is asked once and the validated public address is dialled', async () => {
  answer('pin.example', [PUBLIC]);
  const sub = assertStatus(await create(`https://pin.example:${tlsPort}/pin`), 201);
  // At send: the first answer is public, every later one internal (a TTL-0 rebinding server).
  answer('pin.example', [PUBLIC], ['127.0.0.1']);
  const askedBefore = asked.length;
  const dialsBefore = dialer.dials.length;
  const row = await testDelivery(sub.id);
  assert.equal(row.status, 'succeeded', row.error ?? '');
  assert.deepEqual(asked.slice(askedBefore), ['pin.example'], 'resolved once per connection');
  const dials = dialer.dials.slice(dialsBefore);
  assert.equal(dials.length, 1);
  assert.deepEqual({ address: dials[0].address, action: dials[0].action }, { address: PUBLIC, action: 'routed' });
  assert.equal(tlsRequests.filter((r) => r.path === '/pin').length, 1);

  // The other order: internal first, public afterwards: refused, nothing dialled.
  answer('flip.example', [PUBLIC]);
  const flip = assertStatus(await create(`https://flip.example:${tlsPort}/flip`), 201);
  answer('flip.example', ['127.0.0.1'], [PUBLIC]);
  const flipped = await testDelivery(flip.id);
  assert.equal(flipped.status, 'failed');
  assert.match(flipped.error!, /does not resolve to public addresses only/);
  assert.doesNotMatch(flipped.error!, /127\.0\.0\.1/, 'the internal address is not disclosed');
  assert.equal(tlsRequests.filter((r) => r.path === '/flip').length, 0);
  assert.deepEqual(dialer.internal(), []);
});

test('WH-7 a receiver answering 3xx to an internal address: the redirect is not followed, the Location is never resolved or dialled, and the attempt is recorded failed', async () => {
  const internal = await Receiver.start();
  try {
    answer('hooks.example', [PUBLIC]);
    answer('internal.example', ['10.0.0.7']);
    const locations = [
      [302, internal.url('/steal')],
      [301, 'https://169.254.169.254/latest/meta-data/iam/security-credentials/'],
      [303, `https://internal.example:${tlsPort}/steal`],
      [307, `http://[::1]:${internal.port}/steal`],
      [308, `https://127.0.0.1:${tlsPort}/steal`],
      [302, '/relative-on-same-host'],
    ] as const;
    const askedBefore = asked.length;
    const dialsBefore = dialer.dials.length;
    const followed: string[] = [];
    for (const [i, [status, location]] of locations.entries()) {
      const path = `/moved-${i}`;
      answers.set(path, (res) => res.writeHead(status, { location }).end('moved'));
      const sub = assertStatus(await create(`https://hooks.example:${tlsPort}${path}`), 201);
      const row = await testDelivery(sub.id);
      assert.equal(row.status, 'failed', `${status} ${location}`);
      assert.equal(row.response_status, status);
      assert.match(row.error!, new RegExp(`redirect ${status} not followed`));
      if (tlsRequests.filter((r) => r.path !== path && /steal|relative/.test(r.path)).length > 0) followed.push(location);
    }
    const dials = dialer.dials.slice(dialsBefore);
    assert.ok(dials.every((d) => d.address === PUBLIC && d.host === 'hooks.example'), JSON.stringify(dials));
    assert.ok(!asked.slice(askedBefore).includes('internal.example'), 'the Location host was never resolved');
    assert.equal(internal.connections, 0, 'the internal receiver got no connection');
    figure('WH-7', `redirects followed: ${followed.length} / ${locations.length}; internal dials: ${dialer.internal().length}`);
    assert.deepEqual(followed, []);
    assert.deepEqual(dialer.internal(), []);
  } finally {
    await internal.close();
  }
});

test('WH-7 a stored literal internal URL (written behind the API) is refused at send without dialling', async () => {
  answer('public.example', [PUBLIC]);
  const sub = assertStatus(await create('https://public.example/hook'), 201);
  const dialsBefore = dialer.dials.length;
  for (const literal of ['https://127.0.0.1:1/', 'https://169.254.169.254/', 'https://[::1]/', 'https://[::ffff:169.254.169.254]/', 'https://2130706433/', 'http://10.0.0.1/']) {
    await sql(t, 'UPDATE webhook_subscriptions SET url = $2 WHERE id = $1', [sub.id, literal]);
    const row = await testDelivery(sub.id);
    assert.equal(row.status, 'failed', literal);
    assert.match(row.error!, /refused/, literal);
  }
  assert.deepEqual(dialer.dials.slice(dialsBefore), [], 'no connection was even attempted');
  figure('WH-7', `internal dials over the whole file: ${dialer.internal().length}`);
  assert.deepEqual(dialer.internal(), []);
});

test('WH-7 a stored URL that breaks the static rules (http, userinfo; written behind the API) is refused at send without dialling, even though its name resolves to a public address', async () => {
  answer('public.example', [PUBLIC]);
  const sub = assertStatus(await create('https://public.example/hook'), 201);
  const dialsBefore = dialer.dials.length;
  const requestsBefore = tlsRequests.length;
  const stored: [string, RegExp][] = [
    [`http://public.example:${tlsPort}/plain`, /^refused: the scheme must be https$/],
    [`https://user:pw@public.example:${tlsPort}/userinfo`, /^refused: credentials \(userinfo\) are not allowed$/],
  ];
  for (const [url, reason] of stored) {
    await sql(t, 'UPDATE webhook_subscriptions SET url = $2 WHERE id = $1', [sub.id, url]);
    const row = await testDelivery(sub.id);
    assert.deepEqual([row.status, row.response_status], ['failed', null], url);
    assert.match(row.error!, reason, url);
  }
  assert.deepEqual(dialer.dials.slice(dialsBefore), [], 'no connection was even attempted');
  assert.equal(tlsRequests.length, requestsBefore, 'the receiver got no request');
});

test('WH-7 "the peer is checked again": a connection whose peer is not public although the name resolved public (the validated address routed to loopback, undisguised) is closed unused; the attempt is failed with the words of a private answer, without the peer address', async () => {
  answer('peer.example', [PUBLIC]);
  const sub = assertStatus(await create(`https://peer.example:${tlsPort}/peer`), 201);
  dialer.disguisePeers = false;
  const row = await testDelivery(sub.id).finally(() => (dialer.disguisePeers = true));
  assert.deepEqual([row.status, row.response_status], ['failed', null]);
  assert.equal(row.error, 'refused: peer.example does not resolve to public addresses only');
  assert.equal(tlsRequests.filter((r) => r.path === '/peer').length, 0, 'the receiver got no request');
});
