// Operations: settings are validated together (operations.md Settings), every response carries a
// Request-Id, and a shutdown answers what arrives on open connections and then lets them go.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { Type } from '@sinclair/typebox';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { buildTestApp } from '../helpers/app.js';
import { buildCapturedApp } from '../security/core/support.js';
import { ConfigError, loadConfig } from '../../src/config.js';
import { addSeconds } from '../../src/clock.js';
import type { Module } from '../../src/modules/types.js';

const problemsOf = (env: NodeJS.ProcessEnv): string[] => {
  try {
    loadConfig(env);
  } catch (err) {
    assert.ok(err instanceof ConfigError, String(err));
    return err.problems;
  }
  return [];
};

test('a PUBLIC_URL that is not a URL is a configuration problem, listed with the others (no crash before the list)', () => {
  const problems = problemsOf({ PUBLIC_URL: 'notaurl', PORT: '99999' });
  assert.ok(problems.some((p) => p.startsWith('PUBLIC_URL')), problems.join('; '));
  assert.ok(problems.some((p) => p.startsWith('PORT')), problems.join('; '));
});

test('"prints every problem": eight bad settings at once are eight problems, each named once, none lost to an earlier one', () => {
  const problems = problemsOf({
    PUBLIC_URL: 'notaurl', PORT: '99999', AUTH_RATE_LIMIT_PER_MINUTE: 'x', TRUST_PROXY: 'true', LOG_LEVEL: 'loud',
    WORKERS: 'maybe', BOOTSTRAP_ADMIN_EMAIL: 'a@example.com', DATABASE_URL: 'mysql://x',
  });
  assert.deepEqual(problems.map((p) => p.split(' ')[0]).sort(), [
    'AUTH_RATE_LIMIT_PER_MINUTE', 'BOOTSTRAP_ADMIN_EMAIL', 'DATABASE_URL', 'LOG_LEVEL', 'PORT', 'PUBLIC_URL', 'TRUST_PROXY', 'WORKERS',
  ], problems.join('; '));
});

test('number settings are decimal integers: PORT=0x50, 1e3, 8080.0, " 80" or +80 is refused at start with the others, not read as another number', () => {
  for (const value of ['0x50', '1e3', '8080.0', ' 80', '+80', '0b1010']) {
    assert.deepEqual(problemsOf({ PORT: value }), [`PORT must be an integer between 0 and 65535 (got "${value}")`], value);
  }
  assert.deepEqual(problemsOf({ AUTH_RATE_LIMIT_PER_MINUTE: '1e2' }), ['AUTH_RATE_LIMIT_PER_MINUTE must be an integer between 0 and 1000000 (got "1e2")']);
  assert.equal(loadConfig({ PORT: '8081' }).port, 8081);
  assert.equal(loadConfig({ PORT: '0' }).port, 0);
});

test('TRUST_PROXY lists the reverse proxies whose X-Forwarded-For is believed (addresses, CIDR ranges, loopback/linklocal/uniquelocal); unset, none is; "true", "*" or a malformed range is refused at start', () => {
  assert.deepEqual(loadConfig({}).trustProxy, []);
  assert.deepEqual(loadConfig({ TRUST_PROXY: '10.0.0.0/8, 192.168.1.5,loopback,fd00::/8' }).trustProxy, ['10.0.0.0/8', '192.168.1.5', 'loopback', 'fd00::/8']);
  assert.deepEqual(loadConfig({ TRUST_PROXY: '10.0.0.1/32,::1/128,linklocal,uniquelocal' }).trustProxy, ['10.0.0.1/32', '::1/128', 'linklocal', 'uniquelocal'], 'a host range (/32, /128) and every proxy-addr name');
  for (const value of ['true', '*', '10.0.0.0/33', '10.0.0.1/8/1', 'proxy.internal', '1', '::1/129', '10.0.0.0/0x8']) {
    const problems = problemsOf({ TRUST_PROXY: value });
    assert.equal(problems.length, 1, `${value}: ${problems.join('; ')}`);
    assert.match(problems[0]!, /^TRUST_PROXY must list proxy addresses or CIDR ranges/);
  }
});

test('PUBLIC_URL is the service origin (an optional path allowed): a query, a fragment, user info or no host is refused at start, since the issuer and every link are built on it', () => {
  for (const value of ['https://id.example.com?tenant=1', 'https://id.example.com/#top', 'https://admin:secret@id.example.com', 'http:id.example.com', 'https://id.example.com/?', 'https://id.example.com/#', 'https://:secret@id.example.com']) {
    const problems = problemsOf({ PUBLIC_URL: value });
    assert.equal(problems.length, 1, `${value}: ${problems.join('; ')}`);
    assert.match(problems[0]!, /^PUBLIC_URL must (be an origin|name a host)/);
    assert.ok(!problems[0]!.includes('secret'), 'the refusal does not echo user info');
  }
  assert.equal(loadConfig({ PUBLIC_URL: 'https://id.example.com/' }).publicUrl, 'https://id.example.com', 'a trailing slash is dropped');
  assert.equal(loadConfig({ PUBLIC_URL: 'https://id.example.com//' }).publicUrl, 'https://id.example.com', 'every trailing slash is dropped (links would read //verify-email)');
  assert.equal(loadConfig({ PUBLIC_URL: 'https://example.com/identity/' }).publicUrl, 'https://example.com/identity', 'a path is kept (decisions)');
});

test('SMTP_URL must name a server (smtp://host:port): `smtp://` or `smtp:relay` is refused at start instead of sending to localhost', () => {
  for (const value of ['smtp://', 'smtp:relay', 'smtps://']) {
    assert.deepEqual(problemsOf({ SMTP_URL: value }), ['SMTP_URL must name a host (smtp://host:port)'], value);
  }
  assert.equal(loadConfig({ SMTP_URL: 'smtps://user:pass@mail.example.com:465' }).smtpUrl, 'smtps://user:pass@mail.example.com:465');
  assert.equal(loadConfig({ SMTP_URL: 'smtp://127.0.0.1:2525' }).smtpUrl, 'smtp://127.0.0.1:2525');
});

test('MAIL_FROM and BOOTSTRAP_ADMIN_EMAIL must be email addresses', () => {
  assert.deepEqual(problemsOf({ MAIL_FROM: 'notanemail' }), ['MAIL_FROM must be an email address (got "notanemail")']);
  const problems = problemsOf({ BOOTSTRAP_ADMIN_EMAIL: 'notanemail', BOOTSTRAP_ADMIN_PASSWORD: 'copper-willow-saddle-harbor-58' });
  assert.deepEqual(problems, ['BOOTSTRAP_ADMIN_EMAIL must be an email address (got "notanemail")']);
  assert.equal(loadConfig({ PUBLIC_URL: 'https://id.example.com' }).mailFrom, 'no-reply@id.example.com');
});

test('number settings at their bounds: PORT 65535 is accepted and 65536 refused; AUTH_RATE_LIMIT_PER_MINUTE defaults to 30 (README), and 1000000 is accepted and 1000001 refused', () => {
  assert.equal(loadConfig({ PORT: '65535' }).port, 65535);
  assert.deepEqual(problemsOf({ PORT: '65536' }), ['PORT must be an integer between 0 and 65535 (got "65536")']);
  assert.equal(loadConfig({}).authRateLimitPerMinute, 30);
  assert.equal(loadConfig({ AUTH_RATE_LIMIT_PER_MINUTE: '1000000' }).authRateLimitPerMinute, 1_000_000);
  assert.deepEqual(problemsOf({ AUTH_RATE_LIMIT_PER_MINUTE: '1000001' }), ['AUTH_RATE_LIMIT_PER_MINUTE must be an integer between 0 and 1000000 (got "1000001")']);
});

test('WORKERS (README: "0 stops this process from running background jobs", default 1): unset or 1 runs them, 0 does not; switches take 1/true and 0/false; a switch spelled otherwise ("yes", "on") is refused at start, every one listed', () => {
  assert.equal(loadConfig({}).workers, true);
  assert.equal(loadConfig({ WORKERS: '1' }).workers, true);
  assert.equal(loadConfig({ WORKERS: '0' }).workers, false);
  // README: a switch takes 1 or true for on, 0 or false for off.
  const spelled = loadConfig({ WORKERS: 'false', DEV_CLOCK: 'true', WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true' });
  assert.deepEqual([spelled.workers, spelled.devClock, spelled.webhookAllowPrivateTargets], [false, true, true]);
  const reversed = loadConfig({ WORKERS: 'true', DEV_CLOCK: 'false' });
  assert.deepEqual([reversed.workers, reversed.devClock], [true, false]);
  assert.deepEqual(problemsOf({ WORKERS: 'yes', DEV_CLOCK: 'on', WEBHOOK_ALLOW_PRIVATE_TARGETS: 'enabled' }), [
    'WEBHOOK_ALLOW_PRIVATE_TARGETS must be 1 or true, or 0 or false (got "enabled")',
    'DEV_CLOCK must be 1 or true, or 0 or false (got "on")',
    'WORKERS must be 1 or true, or 0 or false (got "yes")',
  ]);
});

test('LOG_LEVEL must be a pino level: "verbose" is refused at start, each pino level (fatal … trace, silent) is accepted', () => {
  assert.deepEqual(problemsOf({ LOG_LEVEL: 'verbose' }), ['LOG_LEVEL must be one of fatal, error, warn, info, debug, trace, silent']);
  for (const level of ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']) assert.equal(loadConfig({ LOG_LEVEL: level }).logLevel, level);
});

test('BOOTSTRAP_ADMIN_EMAIL and BOOTSTRAP_ADMIN_PASSWORD go together: either one alone is refused at start (no admin would be made); both set are read as given', () => {
  const together = ['BOOTSTRAP_ADMIN_EMAIL and BOOTSTRAP_ADMIN_PASSWORD must be set together'];
  assert.deepEqual(problemsOf({ BOOTSTRAP_ADMIN_EMAIL: 'root@example.com' }), together);
  assert.deepEqual(problemsOf({ BOOTSTRAP_ADMIN_PASSWORD: 'copper-willow-saddle-harbor-58' }), together);
  const both = loadConfig({ BOOTSTRAP_ADMIN_EMAIL: 'root@example.com', BOOTSTRAP_ADMIN_PASSWORD: 'copper-willow-saddle-harbor-58' });
  assert.deepEqual([both.bootstrapAdminEmail, both.bootstrapAdminPassword], ['root@example.com', 'copper-willow-saddle-harbor-58']);
});

test('a setting set to the empty string is unset (its default), as a compose file passing an unset variable through leaves it', () => {
  const config = loadConfig({ PORT: '', PUBLIC_URL: '', HOST: '', SMTP_URL: '', DATABASE_URL: '', LOG_LEVEL: '', WORKERS: '', DEV_CLOCK: '', ENCRYPTION_KEY: '', TRUST_PROXY: '' });
  assert.deepEqual(
    [config.port, config.publicUrl, config.host, config.smtpUrl, config.databaseUrl, config.logLevel, config.workers, config.devClock, config.encryptionKeys.length, config.trustProxy],
    [8080, 'http://localhost:8080', '0.0.0.0', null, null, 'info', true, false, 0, []],
  );
});

test('a URL that is not validly encoded, in its path or its query, gets 400 bad_request with a Request-Id, like every response', async (tc) => {
  const t = await buildTestApp({}, tc);
  for (const url of ['/v1/users/%E0%A4%A', '/v1/users?q=%ZZabc', '/v1/users?q=%FFabc', '/v1/users?email=a%2', '/v1/organizations?q=ab%E0%A4%A']) {
    const res = await t.app.inject({ method: 'GET', url });
    assert.equal(res.statusCode, 400, url);
    assert.equal(res.json().error.code, 'bad_request', url);
    assert.match(String(res.headers['request-id']), /^req_/);
  }
  // Well-formed escapes, `+` and UTF-8 are read as usual (here: unauthenticated, so 401).
  for (const url of ['/v1/users?q=caf%C3%A9', '/v1/users?q=a+b%25', '/v1/users?q=%E2%9C%93']) {
    assert.equal((await t.app.inject({ method: 'GET', url })).statusCode, 401, url);
  }
});

/** Sends raw bytes on one connection and returns everything the server wrote before closing it. */
function rawExchange(port: number, request: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1', () => socket.write(request));
    let received = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk) => (received += chunk));
    socket.on('close', () => resolve(received));
    socket.on('error', (err) => (received ? resolve(received) : reject(err)));
  });
}

test('a request the HTTP parser refuses (headers over the limit, bytes that are not HTTP) is answered in the error envelope with a Request-Id and Cache-Control: no-store: 431 headers_too_large, 400 bad_request', async (tc) => {
  const t = await buildTestApp({}, tc);
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = t.app.server.address() as net.AddressInfo;
  for (const [request, status, code] of [
    [`GET /v1/users/me HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${'a'.repeat(20_000)}\r\n\r\n`, 431, 'headers_too_large'],
    ['NOT HTTP AT ALL\r\n\r\n', 400, 'bad_request'],
  ] as const) {
    const response = await rawExchange(port, request);
    const [head, body] = response.split('\r\n\r\n');
    assert.match(head!, new RegExp(`^HTTP/1.1 ${status} `), response);
    assert.match(head!, /\r\nrequest-id: req_/i);
    assert.match(head!, /\r\ncache-control: no-store\r\n/i, 'an error answer is never cached');
    assert.equal(JSON.parse(body!).error.code, code);
  }
});

/** A route that answers once the test releases it, and says when it has started (no sleep to guess either). */
const gate = () => {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
};
const slow = { entered: gate(), release: gate() };
const slowModule: Module = {
  name: 'slow-probe',
  routes: (app) => {
    app.get('/v1/_slow', {
      schema: { response: { 200: Type.Object({ ok: Type.Boolean() }) } },
      config: { meta: { auth: 'none' } },
      handler: async () => {
        slow.entered.resolve();
        await slow.release.promise;
        return { ok: true };
      },
    });
  },
};

/** HTTP/1.1 responses read off one raw connection: status, headers and body of each. */
function responsesIn(raw: string): { status: number; headers: Record<string, string>; body: string }[] {
  const out = [];
  let rest = raw;
  for (;;) {
    const end = rest.indexOf('\r\n\r\n');
    if (end < 0) return out;
    const [statusLine, ...lines] = rest.slice(0, end).split('\r\n');
    const headers = Object.fromEntries(lines.map((l) => [l.slice(0, l.indexOf(':')).trim().toLowerCase(), l.slice(l.indexOf(':') + 1).trim()]));
    const length = Number(headers['content-length'] ?? 0);
    out.push({ status: Number(statusLine.split(' ')[1]), headers, body: rest.slice(end + 4, end + 4 + length) });
    rest = rest.slice(end + 4 + length);
  }
}

test('shutting down: a request in flight is answered as usual, with Connection: close, and the kept-alive connection ends there (a request sent behind it gets no answer, RFC 9112 §9.6), so close() does not wait for the keep-alive', async (tc) => {
  const t = await buildTestApp({}, tc, [slowModule]);
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = t.app.server.address() as net.AddressInfo;
  const socket = net.connect(port, '127.0.0.1');
  let raw = '';
  socket.on('data', (d) => (raw += d.toString('utf8')));
  const ended = new Promise<void>((r) => socket.on('close', () => r()));
  await new Promise<void>((r) => socket.once('connect', () => r()));
  socket.write('GET /v1/_slow HTTP/1.1\r\nHost: x\r\n\r\n');
  await slow.entered.promise;
  const started = Date.now();
  const closing = t.app.close();
  socket.write('GET /health HTTP/1.1\r\nHost: x\r\n\r\n');
  // The first request stays in flight meanwhile (held, however slow the machine), then is answered.
  await new Promise((r) => setTimeout(r, 100));
  slow.release.resolve();
  await closing;
  // The connection ends with the answer, not when a keep-alive runs out (Fastify's keepAliveTimeout,
  // 72 s): the wait is 30 s, far from both the normal case (well under a second, a few seconds on a
  // loaded machine) and the defect's 72 s.
  const endedInTime = await Promise.race([ended.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), 30_000).unref())]);
  assert.ok(endedInTime, `the kept-alive connection was still open ${Date.now() - started} ms after close() began`);
  const responses = responsesIn(raw);
  assert.equal(responses.length, 1, raw);
  assert.equal(responses[0]!.status, 200, raw);
  assert.equal(responses[0]!.headers.connection, 'close');
  assert.match(responses[0]!.headers['request-id']!, /^req_/);
  assert.ok(socket.destroyed || socket.readableEnded, 'the server closed the connection');
  socket.destroy();
});

test('settings defaults (operations.md Settings): PORT 8080, HOST 0.0.0.0, PUBLIC_URL http://localhost:$PORT, DATA_DIR ./.data, LOG_LEVEL info, DATABASE_URL and SMTP_URL unset', () => {
  const config = loadConfig({});
  assert.equal(config.port, 8080);
  assert.equal(config.host, '0.0.0.0');
  assert.equal(config.publicUrl, 'http://localhost:8080');
  assert.equal(config.dataDir, './.data');
  assert.equal(config.logLevel, 'info');
  assert.equal(config.databaseUrl, null);
  assert.equal(config.smtpUrl, null);
  assert.equal(config.devClock, false);
  assert.equal(config.webhookAllowPrivateTargets, false);
  assert.equal(loadConfig({ PORT: '9090' }).publicUrl, 'http://localhost:9090', 'the default PUBLIC_URL follows PORT');
});

test('DEV_CLOCK and WEBHOOK_ALLOW_PRIVATE_TARGETS: "1" turns them on; "0" leaves them off', () => {
  const on = loadConfig({ DEV_CLOCK: '1', WEBHOOK_ALLOW_PRIVATE_TARGETS: '1' });
  assert.deepEqual([on.devClock, on.webhookAllowPrivateTargets], [true, true]);
  const off = loadConfig({ DEV_CLOCK: '0', WEBHOOK_ALLOW_PRIVATE_TARGETS: '0' });
  assert.deepEqual([off.devClock, off.webhookAllowPrivateTargets], [false, false]);
});

test('AUTH_RATE_LIMIT_PER_MINUTE "0 turns the per-IP limit off" is a valid setting; DATABASE_URL must be a postgres:// URL', () => {
  assert.equal(loadConfig({ AUTH_RATE_LIMIT_PER_MINUTE: '0' }).authRateLimitPerMinute, 0);
  assert.equal(loadConfig({ DATABASE_URL: 'postgres://u@db.example.com:5432/platform' }).databaseUrl, 'postgres://u@db.example.com:5432/platform');
  const problems = problemsOf({ DATABASE_URL: 'http://db.example.com/platform' });
  assert.equal(problems.length, 1, problems.join('; '));
  assert.match(problems[0]!, /^DATABASE_URL/);
});

test('the start logs one "configuration" line an operator can check (storage, mail, payments, proxies) and no secret: no password of DATABASE_URL or SMTP_URL, no Stripe key, no ENCRYPTION_KEY, no bootstrap password', async (tc) => {
  const encryptionKey = randomBytes(32);
  const secrets = ['Db-Secret-771', 'Ssl-Secret-9', 'Smtp-Secret-55', 'sk_live_config_line_3b7', 'whsec_config_line_91', 'Bootstrap-Admin-Secret-8', encryptionKey.toString('hex'), encryptionKey.toString('base64')];
  const t = await buildCapturedApp({
    databaseUrl: 'postgres://svc:Db-Secret-771@db.internal:5432/platform?sslpassword=Ssl-Secret-9',
    smtpUrl: 'smtps://mailer:Smtp-Secret-55@smtp.example.com:465',
    stripeSecretKey: 'sk_live_config_line_3b7',
    stripeWebhookSecret: 'whsec_config_line_91',
    encryptionKeys: [encryptionKey],
    bootstrapAdminEmail: 'config-line-admin@example.com',
    bootstrapAdminPassword: 'Bootstrap-Admin-Secret-8',
    trustProxy: ['10.0.0.0/8'],
  }, tc, 'info');
  const line = t.logs.find((l) => l.msg === 'configuration');
  assert.ok(line, 'the start logs its configuration');
  assert.equal(line.level, 30);
  assert.equal(line.storage, 'postgres');
  assert.equal(line.database, 'postgres://db.internal:5432/platform');
  assert.equal(line.mail, 'smtps://smtp.example.com:465');
  assert.equal(line.payments, 'processor');
  assert.equal(line.encryption_keys, 1);
  assert.deepEqual(line.trust_proxy, ['10.0.0.0/8']);
  assert.equal(line.public_url, t.config.publicUrl);
  const text = JSON.stringify(t.logs);
  for (const secret of secrets) assert.ok(!text.includes(secret), `logged: ${secret.slice(0, 8)}…`);

  // Without the settings: embedded storage at DATA_DIR, mail kept in the outbox, the local simulator.
  const plain = await buildCapturedApp({}, tc, 'info');
  const defaults = plain.logs.find((l) => l.msg === 'configuration');
  assert.ok(defaults);
  assert.equal(defaults.storage, 'embedded');
  assert.equal(defaults.database, plain.config.dataDir);
  assert.match(String(defaults.mail), /^database outbox/);
  assert.match(String(defaults.payments), /^local simulator/);
  assert.equal(defaults.encryption_keys, 0);
});

test('shutting down (SIGTERM): the job scheduler finishes the job it is running and claims no other due job, which stays unclaimed for another process', async (tc) => {
  let started!: () => void;
  let release!: () => void;
  const running = new Promise<void>((resolve) => (started = resolve));
  const gate = new Promise<void>((resolve) => (release = resolve));
  const ran: string[] = [];
  const probe: Module = {
    name: 'shutdown-probe',
    jobs: () => [
      { name: 'probe-slow', intervalSeconds: 3600, timeoutSeconds: 3600, run: async () => { ran.push('probe-slow'); started(); await gate; } },
      { name: 'probe-next', intervalSeconds: 3600, timeoutSeconds: 3600, run: async () => { ran.push('probe-next'); } },
    ],
  };
  const t = await buildTestApp({}, tc, [probe]);
  const db = t.database.scoped('system');
  const now = t.clock.now();
  // Only the two probes are due, the slow one first.
  await db.query(`UPDATE jobs SET next_run_at = $1 WHERE name NOT LIKE 'probe-%'`, [addSeconds(now, 3600)]);
  await db.query(`UPDATE jobs SET next_run_at = $1 WHERE name = 'probe-slow'`, [addSeconds(now, -2)]);
  await db.query(`UPDATE jobs SET next_run_at = $1 WHERE name = 'probe-next'`, [addSeconds(now, -1)]);
  t.deps.jobs.start();
  await running;
  const stopping = t.deps.jobs.stop(); // what main.ts does on SIGTERM
  release();
  await stopping;
  assert.deepEqual(ran, ['probe-slow'], 'the stopping process claimed no other job');
  const { rows } = await db.query(`SELECT name, runs, lock_token FROM jobs WHERE name LIKE 'probe-%' ORDER BY name`);
  assert.deepEqual(rows, [
    { name: 'probe-next', runs: 0, lock_token: null },
    { name: 'probe-slow', runs: 1, lock_token: null },
  ]);
});

if (process.env.TEST_DATABASE_URL) test('README shutting down: "Requests still running after 10 seconds have their connections closed" and the process "exits 0": a request whose statement waits on a lock another session holds does not keep the process alive past the grace (PostgreSQL)', async () => {
  const serverUrl = process.env.TEST_DATABASE_URL!;
  const { default: pg } = await import('pg');
  const { freshDatabase } = await import('../security/multiprocess/cluster.js');
  const { ServerProcess, serverEnv } = await import('../security/multiprocess/server-process.js');
  const { freePort } = await import('../security/multiprocess/http.js');
  const db = await freshDatabase(serverUrl, 'shutdown');
  const port = await freePort(); // below the ephemeral range and free: see freePort
  // The per-IP throttle on: a login's first statement counts it in `counters`.
  const server = new ServerProcess('shutdown', port, serverEnv(db.url, port, `http://127.0.0.1:${port}`, { AUTH_RATE_LIMIT_PER_MINUTE: '30' }));
  const holder = new pg.Client({ connectionString: db.url });
  try {
    await server.start();
    await holder.connect();
    await holder.query('BEGIN');
    await holder.query('LOCK TABLE counters IN ACCESS EXCLUSIVE MODE');
    const stuck = server.call('POST', '/v1/auth/login', { body: { email: 'nobody@example.com', password: 'copper-willow-saddle-harbor-58' } }).catch((err) => err);
    for (let i = 0; ; i++) {
      const { rows } = await holder.query(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`);
      if (rows[0].n > 0) break;
      assert.ok(i < 600, 'the login waits on the lock'); // 30 s: a wait for the request to get there, not a bound
      await sleep(50);
    }
    const signalled = Date.now();
    server.child!.kill('SIGTERM');
    for (;;) {
      if (server.exits.length > 0) break;
      assert.ok(Date.now() - signalled < 30_000, 'the process exited within 30 s while the lock was held');
      await sleep(100);
    }
    const took = (Date.now() - signalled) / 1000;
    assert.deepEqual(server.exits[0], { code: 0, signal: null, expected: false }, server.output);
    assert.ok(took < 20, `exited ${took} s after SIGTERM: the 10-second grace and a few seconds to close`);
    await stuck;
  } finally {
    await holder.query('ROLLBACK').catch(() => undefined);
    await holder.end().catch(() => undefined);
    if (server.alive) await server.kill();
    await db.drop();
  }
});
