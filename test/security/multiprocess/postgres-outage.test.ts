// FT-4: PostgreSQL stopped for 15 s under load. A private PostgreSQL server (never the machine's
// shared one) backs one server process with its workers on; clients keep calling GET /health, a
// database-backed read (GET /v1/users/me) and a write (PATCH /v1/users/{id}/profile) while the
// database is stopped (`pg_ctl stop -m fast`) and started again. operations.md: /health answers 503
// when the database is unreachable; ASVS 16.5: fail closed with a generic error, degrade gracefully.
// Expected: 503 with Retry-After (never 500, never a stack), the process stays up, and it recovers
// on its own once the database is back.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { freePort, serverDatabaseUrl, serverEnv, ServerProcess, sleep, type Reply } from './cluster.js';
import pg_ from 'pg';
import { errorCode, expectStatus, PASSWORD, seconds, signup, uniqueEmail } from './fixtures.js';
import { PrivatePostgres, postgresBinaries } from './private-postgres.js';

const OUTAGE_MS = 15_000;
const CLIENTS = 4;

let pg: PrivatePostgres | null = null;
let server: ServerProcess | null = null;
after(async () => {
  await server?.stop();
  await pg?.destroy();
});

interface Sample {
  at: number;
  end: number;
  what: string;
  status: number;
  retryAfter: string | undefined;
  body: string;
}

/** A leak of internals in an error body: a stack frame, a file path, SQL or a driver message. */
const LEAK = /\bat \S+ \(|node_modules|\/src\/|\.ts:\d+|ECONNREFUSED|SELECT |INSERT |UPDATE |terminating connection|stack/i;

test(`FT-4 PostgreSQL stopped for ${OUTAGE_MS / 1000} s under load: 503 with Retry-After, no 500, no stack, no exit, recovery without a restart`, async () => {
  // Runs in the PostgreSQL pass only, like the [MP] tests, and needs PostgreSQL server binaries.
  serverDatabaseUrl();
  assert.ok(postgresBinaries(), '[FT-4] needs PostgreSQL server binaries (initdb, pg_ctl; set PG_BIN)');
  pg = await PrivatePostgres.start();
  const port = await freePort();
  server = new ServerProcess('A', port, serverEnv(pg.url, port, `http://127.0.0.1:${port}`, { WORKERS: '1', DEV_CLOCK: '0', LOG_LEVEL: 'error' }));
  await server.start();
  const user = await signup(server);
  const calls: Array<[string, () => Promise<Reply>]> = [
    ['health', () => server!.call('GET', '/health')],
    ['read', () => server!.call('GET', '/v1/users/me', { token: user.access_token })],
    ['write', () => server!.call('PATCH', `/v1/users/${user.id}/profile`, { token: user.access_token, body: { display_name: `FT-4 ${Date.now()}` } })],
  ];
  await server.warm(CLIENTS);

  const samples: Sample[] = [];
  const transportErrors: string[] = [];
  let running = true;
  const client = async (offset: number, only?: number, until = () => !running) => {
    for (let i = offset; !until(); i++) {
      const [what, send] = calls[only ?? i % calls.length];
      const at = Date.now();
      try {
        const res = await send();
        samples.push({ at, end: Date.now(), what, status: res.status, retryAfter: res.headers['retry-after'] as string | undefined, body: res.text });
      } catch (err) {
        transportErrors.push(`${what}: ${(err as Error).message}`);
      }
      if (only === undefined) await sleep(25);
    }
  };
  const load = Promise.all(Array.from({ length: CLIENTS }, (_, i) => client(i)));

  await sleep(1_500);
  // The stop must land while writes are inside their transactions: writers without pauses from
  // 0.5 s before the stop until 1 s after it.
  let hammering = true;
  const hammer = Promise.all(Array.from({ length: 8 }, () => client(0, 2, () => !hammering)));
  await sleep(500);
  const stoppedAt = Date.now();
  await pg.stop('fast');
  setTimeout(() => (hammering = false), 1_000);
  await hammer;
  const downAt = Date.now();
  await sleep(OUTAGE_MS);
  const restartAt = Date.now();
  await pg.resume();
  const upAt = Date.now();
  // Recovery: keep the load on until 3 s pass without an error, at most 20 s.
  while (Date.now() - upAt < 20_000) {
    await sleep(200);
    const lastBad = Math.max(upAt, ...samples.filter((s) => s.at >= upAt && s.status !== 200).map((s) => s.at));
    if (Date.now() - lastBad >= 3_000) break;
  }
  running = false;
  await load;

  const baseline = samples.filter((s) => s.end < stoppedAt);
  // Sent and answered while PostgreSQL was down: one sent just before the restart may be answered 200
  // after it (a loaded machine), which is right, not an outage answer.
  const outage = samples.filter((s) => s.at >= downAt && s.end < restartAt);
  const afterUp = samples.filter((s) => s.at >= upAt);
  const lastFailure = Math.max(upAt, ...afterUp.filter((s) => s.status !== 200).map((s) => s.at));
  const recoverySeconds = (lastFailure - upAt) / 1000;
  const tail = afterUp.filter((s) => s.at > lastFailure);
  const byStatus = (list: Sample[]) => list.reduce<Record<string, number>>((m, s) => ((m[`${s.what} ${s.status}`] = (m[`${s.what} ${s.status}`] ?? 0) + 1), m), {});
  const fiveHundreds = samples.filter((s) => s.status === 500);
  const not503 = outage.filter((s) => s.status !== 503);
  const noRetryAfter = outage.filter((s) => s.status === 503 && !(Number(s.retryAfter) > 0));
  const leaky = samples.filter((s) => s.status >= 400 && LEAK.test(s.body));
  const wrongEnvelope = outage.filter((s) => s.status === 503 && errorCode({ text: s.body, json: () => JSON.parse(s.body) } as Reply) !== 'service_unavailable');
  const exits = server.exits.length;

  console.log(`[FT-4] baseline ${JSON.stringify(byStatus(baseline))}`);
  console.log(`[FT-4] database down ${seconds(restartAt - downAt)} s: ${JSON.stringify(byStatus(outage))}; transport errors ${transportErrors.length}`);
  console.log(`[FT-4] 500 answers: ${fiveHundreds.length}; outage answers other than 503: ${not503.length}; 503 without Retry-After: ${noRetryAfter.length}; bodies leaking internals: ${leaky.length}`);
  console.log(`[FT-4] after the restart: ${JSON.stringify(byStatus(afterUp))}`);
  const firstOk = afterUp.filter((s) => s.status === 200).reduce((m, s) => Math.min(m, s.end), Infinity);
  const recovery = Number.isFinite(firstOk)
    ? `${recoverySeconds.toFixed(2)} s after PostgreSQL accepted connections again (first 200 after ${((firstOk - upAt) / 1000).toFixed(2)} s; ${tail.length} clean answers after it; no restart of the service)`
    : 'none: no answer after PostgreSQL came back';
  console.log(`[FT-4] error-free recovery time: ${recovery}`);
  console.log(`[FT-4] process exits: ${exits}`);
  for (const s of [...fiveHundreds, ...not503, ...leaky].slice(0, 5)) console.log(`[FT-4]   ${s.what} ${s.status} ${s.body.slice(0, 300)}`);
  for (const e of transportErrors.slice(0, 5)) console.log(`[FT-4]   transport: ${e}`);
  if (exits || fiveHundreds.length) console.log(`[FT-4] server output (tail):\n${server.output.slice(-3000)}`);

  assert.equal(exits, 0, 'the process must not exit');
  assert.ok(baseline.length > 0 && baseline.every((s) => s.status === 200), `baseline: ${JSON.stringify(byStatus(baseline))}`);
  assert.ok(outage.length > 0, 'outage.length > 0');
  assert.deepEqual(fiveHundreds.map((s) => `${s.what} ${s.body}`), []);
  assert.deepEqual(not503.map((s) => `${s.what} ${s.status} ${s.body}`), []);
  assert.deepEqual(noRetryAfter.map((s) => s.what), []);
  assert.deepEqual(wrongEnvelope.map((s) => s.body), []);
  assert.deepEqual(leaky.map((s) => s.body), []);
  assert.deepEqual(transportErrors, []);
  assert.ok(tail.length > 0, 'answers after the recovery');
  // A bound far from both: a few seconds normally (more on a loaded machine); a service that does not
  // reconnect never recovers (and fails 'answers after the recovery' above).
  assert.ok(recoverySeconds < 30, `recovered only after ${recoverySeconds} s`);
  expectStatus(await server.call('GET', '/v1/users/me', { token: user.access_token }), 200);
});

test('FT-4 "no partial writes": signups (User, Profile, Settings, password identity, member Role and user.created audit in one transaction) hammered by 6 clients across a pg_ctl stop and start leave every User whole', async (tc) => {
  serverDatabaseUrl();
  assert.ok(postgresBinaries(), '[FT-4] needs PostgreSQL server binaries (initdb, pg_ctl; set PG_BIN)');
  const db = await PrivatePostgres.start();
  tc.after(() => db.destroy());
  const port = await freePort();
  const node = new ServerProcess('A', port, serverEnv(db.url, port, `http://127.0.0.1:${port}`, { WORKERS: '0', DEV_CLOCK: '0', LOG_LEVEL: 'error' }));
  tc.after(() => node.stop());
  await node.start();
  const answers: Record<string, number> = {};
  let running = true;
  const client = async () => {
    while (running) {
      try {
        const res = await node.call('POST', '/v1/auth/signup', { body: { email: uniqueEmail('ft4'), password: PASSWORD } });
        answers[res.status] = (answers[res.status] ?? 0) + 1;
      } catch (err) {
        answers.transport = (answers.transport ?? 0) + 1;
        firstTransportError ??= String((err as Error)?.cause ?? err);
      }
    }
  };
  let firstTransportError: string | undefined;
  const load = Promise.all(Array.from({ length: 6 }, client));
  await sleep(1_500);
  await db.stop('fast');
  await sleep(3_000);
  await db.resume();
  await sleep(3_000);
  running = false;
  await load;
  const check = new pg_.Client({ connectionString: db.url });
  await check.connect();
  try {
    const { rows } = await check.query<{ id: string; profiles: number; settings: number; identities: number; member: number; audits: number }>(`
      SELECT u.id,
        (SELECT count(*) FROM profiles p WHERE p.user_id = u.id)::int AS profiles,
        (SELECT count(*) FROM settings s WHERE s.user_id = u.id)::int AS settings,
        (SELECT count(*) FROM identities i WHERE i.user_id = u.id)::int AS identities,
        (SELECT count(*) FROM role_assignments r WHERE r.user_id = u.id AND r.role_id = 'role_platform_member')::int AS member,
        (SELECT count(*) FROM audit_events a WHERE a.target_user_id = u.id AND a.action = 'user.created')::int AS audits
      FROM users u`);
    const partial = rows.filter((r) => r.profiles !== 1 || r.settings !== 1 || r.identities !== 1 || r.member !== 1 || r.audits !== 1);
    console.log(`[FT-4] signups across the stop: ${JSON.stringify(answers)}; users ${rows.length}, partial ${partial.length}`);
    // Calls that failed below HTTP say why, with the process's exits and last output (CI once saw 4 × 201, then only such failures).
    const why = answers.transport ? `; first transport failure: ${firstTransportError}; exits ${JSON.stringify(node.unexpectedExits)}; output: ${node.output.slice(-2000)}` : '';
    assert.ok((answers[503] ?? 0) > 0 && (answers[201] ?? 0) > 0, `the stop landed under load: ${JSON.stringify(answers)}${why}`);
    // A commit whose acknowledgement the stop cut may answer 503 (docs: a write can commit while its client gets 503), never the reverse.
    assert.ok(rows.length >= answers[201], `every 201 is a User: ${rows.length} users for ${answers[201]} × 201`);
    assert.deepEqual(partial, []);
  } finally {
    await check.end();
  }
});
