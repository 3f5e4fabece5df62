// HTTP semantics at the connection (RFC 9110, RFC 9112): what Node's HTTP server would answer on its
// own (a bare 400 or 417 without a body) is answered in the error envelope with a Request-Id, and what
// it lets through that HTTP forbids (two Host lines) is refused. Raw sockets: app.inject cannot send these.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { buildCapturedApp, type LogLine } from '../security/core/support.js';
import { sql } from '../helpers/http.js';
import { bearer, uniqueEmail, userToken } from '../helpers/fixtures.js';
import { REQUEST_TIMEOUT_MS } from '../../src/app.js';

async function listening(t: TestApp): Promise<number> {
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  return (t.app.server.address() as net.AddressInfo).port;
}

/** Sends raw bytes on one connection and returns what the server wrote until it closed or went quiet. */
function rawExchange(port: number, request: string, quietMs = 300): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1', () => socket.write(request));
    let received = '';
    let timer: NodeJS.Timeout | undefined;
    const finish = () => {
      clearTimeout(timer);
      socket.destroy();
      resolve(received);
    };
    socket.setEncoding('utf8');
    socket.on('data', (chunk) => {
      received += chunk;
      clearTimeout(timer);
      timer = setTimeout(finish, quietMs);
    });
    socket.on('close', finish);
    socket.on('error', (err) => (received ? finish() : reject(err)));
  });
}

/** The first response in a raw exchange: status, lower-cased headers, body. */
function firstResponse(raw: string): { status: number; headers: Record<string, string>; body: string } {
  const end = raw.indexOf('\r\n\r\n');
  assert.ok(end > 0, `no response: ${JSON.stringify(raw)}`);
  const [statusLine, ...lines] = raw.slice(0, end).split('\r\n');
  const headers = Object.fromEntries(lines.map((l) => [l.slice(0, l.indexOf(':')).trim().toLowerCase(), l.slice(l.indexOf(':') + 1).trim()]));
  return { status: Number(statusLine!.split(' ')[1]), headers, body: raw.slice(end + 4, end + 4 + Number(headers['content-length'] ?? 0)) };
}

function assertEnvelope(raw: string, status: number, code: string, label: string): void {
  const res = firstResponse(raw);
  assert.equal(res.status, status, `${label}: ${raw}`);
  assert.match(res.headers['request-id'] ?? '', /^req_/, `${label}: Request-Id`);
  assert.match(res.headers['content-type'] ?? '', /^application\/json/, `${label}: Content-Type`);
  assert.equal(JSON.parse(res.body).error.code, code, label);
}

test('RFC 9112 §3.2 "A server MUST respond with a 400 (Bad Request) status code to any HTTP/1.1 request message that lacks a Host header field and to any request message that contains more than one Host header field line or a Host header field with an invalid field value": 400 bad_request in the envelope with a Request-Id; one Host (a name, an address, an IPv6 literal, empty, a port that is empty as the port = *DIGIT of RFC 3986 allows) and an HTTP/1.0 request without one are served', async (tc) => {
  const t = await buildTestApp({}, tc);
  const port = await listening(t);
  for (const [label, head] of [
    ['no Host', 'GET /health HTTP/1.1\r\n'],
    ['two Host lines', 'GET /health HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n'],
    ['the same Host twice', 'GET /health HTTP/1.1\r\nHost: a.example\r\nHost: a.example\r\n'],
    ['a Host with a space', 'GET /health HTTP/1.1\r\nHost: a b\r\n'],
    ['a Host with a path', 'GET /health HTTP/1.1\r\nHost: a.example/x\r\n'],
    ['a Host with user info', 'GET /health HTTP/1.1\r\nHost: user@a.example\r\n'],
    ['two Host lines on HTTP/1.0', 'GET /health HTTP/1.0\r\nHost: a.example\r\nHost: b.example\r\n'],
    ['a Host whose port is not digits', 'GET /health HTTP/1.1\r\nHost: a.example:http\r\n'],
  ] as const) {
    assertEnvelope(await rawExchange(port, `${head}Connection: close\r\n\r\n`), 400, 'bad_request', label);
  }
  for (const [label, head] of [
    ['a name and port', 'GET /health HTTP/1.1\r\nHost: id.example.com:8080\r\n'],
    ['an address', 'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n'],
    ['an IPv6 literal', 'GET /health HTTP/1.1\r\nHost: [::1]:8080\r\n'],
    ['an IPv6 literal with a zone', 'GET /health HTTP/1.1\r\nHost: [fe80::1%25eth0]\r\n'],
    ['a fully qualified name', 'GET /health HTTP/1.1\r\nHost: id.example.com.\r\n'],
    ['an empty Host', 'GET /health HTTP/1.1\r\nHost: \r\n'],
    ['a name with an empty port', 'GET /health HTTP/1.1\r\nHost: a.example:\r\n'],
    ['HTTP/1.0 without Host', 'GET /health HTTP/1.0\r\n'],
  ] as const) {
    const res = firstResponse(await rawExchange(port, `${head}Connection: close\r\n\r\n`));
    assert.equal(res.status, 200, label);
  }
});

test('RFC 9110 §10.1.1 an Expect the service cannot meet (anything but 100-continue) is 417 expectation_failed in the envelope with a Request-Id (400 invalid_request on the OAuth token endpoint, RFC 6749), the operation does not run, and the connection serves the next request; 100-continue is met', async (tc) => {
  const t = await buildTestApp({}, tc);
  const port = await listening(t);
  const email = uniqueEmail('expect');
  const body = JSON.stringify({ email, password: 'copper-willow-saddle-harbor-58' });
  const signup = (expect: string) =>
    `POST /v1/auth/signup HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: ${expect}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
  const raw = await rawExchange(port, `${signup('something-else')}GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
  assertEnvelope(raw, 417, 'expectation_failed', 'Expect: something-else');
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM users WHERE email = $1', [email]))[0].n, 0, 'no account was created');
  assert.match(raw, /HTTP\/1\.1 200 OK[\s\S]*\{"status":"ok"\}/, 'the body was read past: the next request is answered');

  const token = await rawExchange(port, 'POST /v1/auth/oauth/token HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: something-else\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}');
  assert.match(token, /^HTTP\/1\.1 400 [\s\S]*"error":"invalid_request"/, `the token endpoint answers in RFC 6749's shape: ${token}`);

  const met = await rawExchange(port, signup('100-continue').replace('Host: x', 'Host: x\r\nConnection: close'), 10_000);
  assert.match(met, /^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 201 /, met);
});

test('RFC 9110 §6.6.1 "An origin server with a clock MUST generate a Date header field in all 2xx, 3xx, and 4xx responses": the answers to requests the HTTP parser refuses (431, 400) carry one too', async (tc) => {
  const t = await buildTestApp({}, tc);
  const port = await listening(t);
  for (const request of [`GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`, 'NOT HTTP AT ALL\r\n\r\n']) {
    const res = firstResponse(await rawExchange(port, request));
    assert.ok([431, 400].includes(res.status), String(res.status));
    const date = res.headers['date'] ?? '';
    assert.match(date, /^[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT$/, `IMF-fixdate: ${date}`);
    assert.ok(Math.abs(Date.parse(date) - Date.now()) < 5000, date);
  }
});

test('docs/conventions.md request_timeout "The request was not received in time (Node\'s request timeout)": the server has a request timeout (a body that stops arriving is cut with 408), not Fastify\'s default of none, and headers time out first', async (tc) => {
  const t = await buildTestApp({}, tc);
  await listening(t);
  assert.equal(t.app.server.requestTimeout, REQUEST_TIMEOUT_MS);
  assert.ok(REQUEST_TIMEOUT_MS > 0 && REQUEST_TIMEOUT_MS <= 300_000, String(REQUEST_TIMEOUT_MS));
  assert.ok(t.app.server.headersTimeout > 0 && t.app.server.headersTimeout <= REQUEST_TIMEOUT_MS);
});

test('a client that goes away mid-body is its own doing, not the database\'s: never 503 service_unavailable "The database is unreachable" logged as an error ("request failed") with a stack', async (tc) => {
  const t = await buildCapturedApp({}, tc, 'info');
  const port = await listening(t);
  // Waits for the log lines, not for a guess at how long the server takes: the request is read
  // (its headers, not its body) before the client goes, and its last line is written before the check.
  const logged = async (what: string, n: number, is: (line: LogLine) => boolean) => {
    for (let waited = 0; t.logs.filter(is).length < n; waited += 10) {
      if (waited >= 10_000) assert.fail(`no ${what} logged: ${JSON.stringify(t.logs.map((l) => l.msg))}`);
      await new Promise((r) => setTimeout(r, 10));
    }
  };
  const last = (line: LogLine) => line.level >= 40 ? !String(line.msg).startsWith('ENCRYPTION_KEY') : ['request completed', 'request refused before it was read'].includes(String(line.msg));
  const requests = [
    'POST /v1/auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"email":',
    'POST /v1/auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n9\r\n{"email":\r\n',
  ];
  for (const [i, request] of requests.entries()) {
    const socket = net.connect(port, '127.0.0.1');
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
    socket.write(request);
    await logged('incoming request', i + 1, (line) => line.msg === 'incoming request');
    socket.destroy();
    await logged('last line of the request', i + 1, last);
  }
  assert.deepEqual(t.logs.filter((line) => line.level >= 40 && !String(line.msg).startsWith('ENCRYPTION_KEY')).map((line) => line.msg), []);
});

test('a body with a transfer coding beside chunked (`Transfer-Encoding: gzip, chunked`, or gzip and chunked on two lines), which Node does not decode, is a malformed request: 400 bad_request that changes nothing, not read as the bytes it is not; the token endpoint answers invalid_request; plain chunked is read', async (tc) => {
  const t = await buildTestApp({}, tc);
  const port = await listening(t);
  const { token } = await userToken(t);
  const chunked = (body: string) => `${Buffer.byteLength(body).toString(16)}\r\n${body}\r\n0\r\n\r\n`;
  const patch = (coding: string) =>
    `PATCH /v1/users/me/settings HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer ${token}\r\nContent-Type: application/json\r\n${coding}\r\n${chunked('{"theme":"dark"}')}`;
  for (const coding of ['Transfer-Encoding: gzip, chunked\r\n', 'Transfer-Encoding: deflate,chunked\r\n', 'Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n']) {
    assertEnvelope(await rawExchange(port, patch(coding)), 400, 'bad_request', coding);
  }
  const settings = await t.app.inject({ method: 'GET', url: '/v1/users/me/settings', headers: bearer(token) });
  assert.equal(settings.json().theme, 'system', 'no refused body changed anything');

  const oauth = firstResponse(await rawExchange(port,
    `POST /v1/auth/oauth/token HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/x-www-form-urlencoded\r\nTransfer-Encoding: gzip, chunked\r\n\r\n${chunked('grant_type=refresh_token&refresh_token=rtk_x&client_id=app_x')}`));
  assert.equal(oauth.status, 400);
  assert.equal(JSON.parse(oauth.body).error, 'invalid_request');

  assert.equal(firstResponse(await rawExchange(port, patch('Transfer-Encoding: chunked\r\n'))).status, 200);
  const after = await t.app.inject({ method: 'GET', url: '/v1/users/me/settings', headers: bearer(token) });
  assert.equal(after.json().theme, 'dark');
});

test('docs/decisions.md "Paths": a trailing slash names the same route (/v1/users/me/); a doubled slash, a `.` or `..` segment (sent or percent-encoded) and an upper-case /V1 name none (404 not_found, or the resource\'s 404 when the segment lands on an id)', async (tc) => {
  const t = await buildTestApp({}, tc);
  const port = await listening(t);
  const { user, token } = await userToken(t);
  const get = async (path: string) =>
    firstResponse(await rawExchange(port, `GET ${path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer ${token}\r\n\r\n`));
  const slash = await get('/v1/users/me/');
  assert.equal(slash.status, 200, slash.body);
  assert.equal(JSON.parse(slash.body).email, user.email);
  for (const path of ['/v1//users/me', '/v1/./users/me', '/v1/%2E/users/me', '/v1/users/../users/me', '/v1/users/%2e%2e/users/me', '/V1/users/me']) {
    const res = await get(path);
    assert.equal(res.status, 404, `${path}: ${res.body}`);
    assert.equal(JSON.parse(res.body).error.code, 'not_found', path);
  }
  const onId = await get('/v1/users/./sessions');
  assert.equal(onId.status, 404);
  assert.equal(JSON.parse(onId.body).error.code, 'user_not_found');
});

test('docs/decisions.md "Request media type": application/json is matched without regard to case, with any parameters, its charset not read; other JSON types (application/merge-patch+json, application/json-patch+json, +json suffixes) are 415 unsupported_media_type and change nothing', async (tc) => {
  const t = await buildTestApp({}, tc);
  const { token } = await userToken(t);
  const patch = (contentType: string, theme: string) =>
    t.app.inject({ method: 'PATCH', url: '/v1/users/me/settings', headers: { ...bearer(token), 'content-type': contentType }, payload: JSON.stringify({ theme }) });
  for (const type of ['application/merge-patch+json', 'application/json-patch+json', 'application/vnd.platform+json']) {
    const res = await patch(type, 'dark');
    assert.equal(res.statusCode, 415, type);
    assert.equal(res.json().error.code, 'unsupported_media_type', type);
  }
  assert.equal((await t.app.inject({ method: 'GET', url: '/v1/users/me/settings', headers: bearer(token) })).json().theme, 'system', 'no refused body changed anything');
  for (const [type, theme] of [['APPLICATION/JSON', 'dark'], ['Application/Json; charset=ISO-8859-1', 'light'], ['application/json;profile=x', 'system']] as const) {
    const res = await patch(type, theme);
    assert.equal(res.statusCode, 200, `${type}: ${res.body}`);
    assert.equal(res.json().theme, theme, type);
  }
});
