import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { SMTPServer } from 'smtp-server';
import { Writable } from 'node:stream';
import { atOneInstant, buildTestApp, openTestDatabase, testConfig, withStoppedClock, type TestApp } from '../helpers/app.js';
import { bearer, createApiKey, createUser, uniqueEmail } from '../helpers/fixtures.js';
import { sql } from '../helpers/http.js';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { systemCtx } from '../../src/context.js';
import { addSeconds, MAX_CLOCK_SKEW_SECONDS, SystemClock } from '../../src/clock.js';
import { boot } from '../../src/boot.js';
import { refreshDevClock } from '../../src/dev/clock.js';
import { JobRunner } from '../../src/jobs/runner.js';
import { MODULES } from '../../src/modules/index.js';
import { eachSkippingFailures, forEachSkippingFailures } from '../../src/jobs/each.js';
import type { JobDefinition } from '../../src/jobs/types.js';
import { deliverQueuedMail, enqueueMail } from '../../src/mail/outbox.js';
import { decodeMessage, secondProcess, sleep, tokenLinks } from './support/ops.js';

const assertEnvelope = (body: any, code: string) => {
  assert.equal(body.error.code, code);
  assert.equal(typeof body.error.message, 'string');
  assert.equal(typeof body.error.details, 'object');
};

/** |a - b| in seconds. */
const secondsApart = (a: Date | string, b: Date | string) => Math.abs(new Date(a).getTime() - new Date(b).getTime()) / 1000;

let plain: TestApp;
let dev: TestApp;
before(async () => {
  [plain, dev] = await Promise.all([buildTestApp(), buildTestApp({ devClock: true })]);
});
after(async () => {
  await plain.close();
  await dev.close();
});

// ---------------------------------------------------------------- development clock and jobs

test('without DEV_CLOCK=1 the development clock and job endpoints answer 404 in the envelope', async () => {
  for (const [method, url, payload] of [
    ['GET', '/_dev/clock', undefined],
    ['POST', '/_dev/clock', { advance_seconds: 60 }],
    ['POST', '/_dev/jobs/idempotency-prune', undefined],
  ] as const) {
    const res = await plain.app.inject({ method, url, payload });
    assert.equal(res.statusCode, 404, `${method} ${url}`);
    assertEnvelope(res.json(), 'not_found');
  }
  assert.ok(secondsApart(plain.clock.now(), new Date()) < 5, 'the clock did not move');
});

test('with DEV_CLOCK=1 the server logs a warning at start', async () => {
  const lines: any[] = [];
  const stream = new Writable({
    write(chunk, _enc, done) {
      for (const line of String(chunk).split('\n').filter(Boolean)) lines.push(JSON.parse(line));
      done();
    },
  });
  const { database, drop } = await openTestDatabase();
  try {
    for (const devClock of [false, true]) {
      const { app, deps } = await boot({ config: testConfig({ devClock, logLevel: 'warn' }), database, clock: new SystemClock(), logger: { level: 'warn', stream } });
      await app.close();
      await deps.jobs.stop();
      const warned = lines.filter((l) => l.level === 40 && /DEV_CLOCK/.test(l.msg));
      assert.equal(warned.length, devClock ? 1 : 0, `DEV_CLOCK=${devClock ? 1 : 0}`);
    }
  } finally {
    await database.close();
    await drop();
  }
});

test('GET /_dev/clock answers {now} in ISO time, the service clock', async () => {
  const res = await dev.app.inject({ method: 'GET', url: '/_dev/clock' });
  assert.equal(res.statusCode, 200);
  const { now } = res.json();
  assert.equal(new Date(now).toISOString(), now);
  assert.ok(secondsApart(now, dev.clock.now()) < 5, 'secondsApart(now, dev.clock.now()) < 5');
});

test('POST /_dev/clock with {advance_seconds: N} moves the service clock forward by N seconds and answers {now}', async () => {
  // On a stopped clock (only the move moves it), so the move is exactly N seconds however long the two
  // requests take on a loaded machine (a 5 s tolerance for their run time was the machine's load).
  const { res, moved } = await withStoppedClock(dev, async () => {
    const before = (await dev.app.inject({ method: 'GET', url: '/_dev/clock' })).json().now;
    const res = await dev.app.inject({ method: 'POST', url: '/_dev/clock', payload: { advance_seconds: 3600 } });
    return { res, moved: (new Date(res.json().now).getTime() - new Date(before).getTime()) / 1000 };
  });
  assert.equal(res.statusCode, 200);
  const { now } = res.json();
  assert.equal(moved, 3600, `moved ${moved} s`);
  assert.ok(secondsApart(dev.clock.now(), addSeconds(new Date(), 3600)) < 5, 'the service clock itself moved');
  // Apart by one request's run time (milliseconds; seconds when loaded) or, unmoved, by 3,600 s.
  const after = (await dev.app.inject({ method: 'GET', url: '/_dev/clock' })).json().now;
  assert.ok(secondsApart(after, now) < 60, 'GET answers the moved clock');
});

test('the development clock moves for every process sharing the database', async () => {
  // Each pair of readings is apart by the real time between them (milliseconds; a few seconds on a
  // loaded machine) and, were a move not shared, by the move (600 s, then 60 s): 20 s is far from both.
  const SAME = 20;
  const other = await secondProcess(dev);
  try {
    await refreshDevClock(other.deps);
    assert.ok(secondsApart(other.clock.now(), dev.clock.now()) < SAME, 'a second process reads the same offset');

    const res = await dev.app.inject({ method: 'POST', url: '/_dev/clock', payload: { advance_seconds: 600 } });
    assert.equal(res.statusCode, 200);
    const seen = await other.app.inject({ method: 'GET', url: '/_dev/clock' });
    assert.equal(seen.statusCode, 200);
    assert.ok(secondsApart(seen.json().now, res.json().now) < SAME, 'the second process answers the moved clock');

    const back = await other.app.inject({ method: 'POST', url: '/_dev/clock', payload: { advance_seconds: 60 } });
    const mine = await dev.app.inject({ method: 'GET', url: '/_dev/clock' });
    assert.ok(secondsApart(mine.json().now, back.json().now) < SAME, 'and a move by the second process reaches the first');
  } finally {
    await other.close();
  }
});

test('POST /_dev/clock with an invalid body answers 422 validation_failed and does not move the clock', async () => {
  const before = dev.clock.now();
  for (const payload of [{ advance_seconds: 'x' }, { advance_seconds: -60 }, {}, { advance_seconds: 60, extra: true }]) {
    const res = await dev.app.inject({ method: 'POST', url: '/_dev/clock', payload });
    assert.equal(res.statusCode, 422, JSON.stringify(payload));
    assertEnvelope(res.json(), 'validation_failed');
  }
  assert.ok(secondsApart(dev.clock.now(), before) < 5, 'secondsApart(dev.clock.now(), before) < 5');
});

test('POST /_dev/jobs/{job} runs the job now and answers {job, result} when it has finished (idempotency-prune drops expired records)', async () => {
  const now = dev.clock.now();
  const insert = (key: string, expiresAt: Date) =>
    dev.database.scoped('system').query(
      `INSERT INTO idempotency_keys (credential, operation, key, request_hash, status, locked_until, created_at, expires_at)
       VALUES ('cred_probe', 'POST /probe', $1, 'h', 'done', $2, $2, $3)`,
      [key, addSeconds(expiresAt, -86400), expiresAt],
    );
  await insert('expired', addSeconds(now, -60));
  await insert('current', addSeconds(now, 3600));

  const res = await dev.app.inject({ method: 'POST', url: '/_dev/jobs/idempotency-prune' });
  assert.equal(res.statusCode, 200, res.body);
  const body = res.json();
  assert.equal(body.job, 'idempotency-prune');
  assert.equal(typeof body.result, 'object');
  const { rows } = await dev.database.scoped('system').query<{ key: string }>(`SELECT key FROM idempotency_keys WHERE credential = 'cred_probe'`);
  assert.deepEqual(
    rows.map((r) => r.key),
    ['current'],
  );
});

test('idempotency-prune: "Keys are retained 24 hours": a stored answer whose 24 hours end at the run\'s instant, or a millisecond before it, is deleted; one ending a millisecond after it stays; the run reports {idempotency_keys: <rows deleted>}', async () => {
  const at = new Date(Math.floor(dev.clock.now().getTime()));
  const insert = (key: string, expiresAt: Date) =>
    dev.database.scoped('system').query(
      `INSERT INTO idempotency_keys (credential, operation, key, request_hash, status, locked_until, created_at, expires_at)
       VALUES ('cred_cutoff', 'POST /probe', $1, 'h', 'done', $2, $2, $3)`,
      [key, addSeconds(expiresAt, -86400), expiresAt],
    );
  await insert('ended-1ms-before', new Date(at.getTime() - 1));
  await insert('ends-at-the-run', at);
  await insert('ends-1ms-after', new Date(at.getTime() + 1));
  const [{ due }] = await sql<{ due: number }>(dev, 'SELECT count(*)::int AS due FROM idempotency_keys WHERE expires_at <= $1', [at]);
  const res = await atOneInstant(dev, () => dev.app.inject({ method: 'POST', url: '/_dev/jobs/idempotency-prune' }), at);
  assert.equal(res.statusCode, 200, res.body);
  assert.equal(res.json().result.idempotency_keys, due, res.body);
  const left = await sql<{ key: string }>(dev, `SELECT key FROM idempotency_keys WHERE credential = 'cred_cutoff'`);
  assert.deepEqual(left.map((r) => r.key), ['ends-1ms-after']);
});

test('operations.md "Job names, also used by npx platform jobs run <job>": POST /_dev/jobs/{job} runs each of entitlement-expiry, scheduled-starts, erasure-cascade, test-purge, webhook-delivery, webhook-health, seat-sync and idempotency-prune now and answers {job, result} when it has finished', async () => {
  const jobs = dev.database.scoped('system');
  for (const job of ['entitlement-expiry', 'scheduled-starts', 'erasure-cascade', 'test-purge', 'webhook-delivery', 'webhook-health', 'seat-sync', 'idempotency-prune']) {
    const before = await jobs.query<{ runs: number }>(`SELECT runs FROM jobs WHERE name = $1`, [job]);
    assert.equal(before.rows.length, 1, `${job} is a job of the catalogue`);
    const res = await dev.app.inject({ method: 'POST', url: `/_dev/jobs/${job}` });
    assert.equal(res.statusCode, 200, `${job}: ${res.body}`);
    const body = res.json();
    assert.equal(body.job, job);
    assert.equal(typeof body.result, 'object', `${job}: ${res.body}`);
    const after = await jobs.query<{ runs: number; lock_token: string | null }>(`SELECT runs, lock_token FROM jobs WHERE name = $1`, [job]);
    assert.deepEqual(after.rows[0], { runs: before.rows[0]!.runs + 1, lock_token: null }, `${job}: run once and finished when answered`);
  }
});

test('POST /_dev/jobs/{job} with an unknown job answers 404 job_not_found', async () => {
  const res = await dev.app.inject({ method: 'POST', url: '/_dev/jobs/nope' });
  assert.equal(res.statusCode, 404);
  assertEnvelope(res.json(), 'job_not_found');
});

// ---------------------------------------------------------------- job scheduler

test('README Jobs: "each run by one process at a time every: mail-delivery 2 seconds, webhook-delivery 15 seconds, scheduled-starts and seat-limit-release 1 minute, entitlement-expiry and email-change-expiry 5 minutes, db-analyze 10 minutes, erasure-cascade, webhook-health and idempotency-prune 1 hour, test-purge and seat-sync 24 hours" (the periods docs/decisions.md relies on too): the catalogue is exactly these jobs at these intervals', () => {
  const readme: Record<string, number> = {
    'mail-delivery': 2,
    'webhook-delivery': 15,
    'scheduled-starts': 60,
    'seat-limit-release': 60,
    'entitlement-expiry': 300,
    'email-change-expiry': 300,
    'db-analyze': 600,
    'erasure-cascade': 3600,
    'webhook-health': 3600,
    'idempotency-prune': 3600,
    'test-purge': 24 * 3600,
    'seat-sync': 24 * 3600,
  };
  const catalogue = Object.fromEntries(MODULES.flatMap((m) => m.jobs?.() ?? []).map((job) => [job.name, job.intervalSeconds]));
  assert.deepEqual(catalogue, readme);
});

function probeJob(intervalSeconds = 3600) {
  const state = { calls: 0, active: 0, maxActive: 0 };
  const job: JobDefinition = {
    name: `probe-${randomBytes(4).toString('hex')}`,
    intervalSeconds,
    timeoutSeconds: 30,
    run: async () => {
      state.calls++;
      state.active++;
      state.maxActive = Math.max(state.maxActive, state.active);
      await sleep(200);
      state.active--;
      return { call: state.calls };
    },
  };
  return { job, state };
}

test('a due job runs exactly once when several processes tick at once, then waits for its interval (FOR UPDATE SKIP LOCKED)', async () => {
  const other = await secondProcess(dev);
  try {
    const { job, state } = probeJob(3600);
    const mine = new JobRunner(dev.deps, [job]);
    const theirs = new JobRunner(other.deps, [job]);
    await mine.register();
    await theirs.register();

    await Promise.all([mine.tick(), theirs.tick(), mine.tick(), theirs.tick()]);
    assert.equal(state.calls, 1, 'ran exactly once');

    const { rows } = await dev.database.scoped('system').query<{ next_run_at: Date; runs: number; locked_until: Date | null }>(
      'SELECT next_run_at, runs, locked_until FROM jobs WHERE name = $1',
      [job.name],
    );
    assert.ok(rows[0].next_run_at.getTime() > dev.clock.now().getTime() + 3500 * 1000, 'next run is an interval away');
    assert.equal(rows[0].runs, 1);
    assert.equal(rows[0].locked_until, null, 'the claim is released');

    await Promise.all([mine.tick(), theirs.tick()]);
    assert.equal(state.calls, 1, 'not due: nothing ran');

    const moved = await dev.app.inject({ method: 'POST', url: '/_dev/clock', payload: { advance_seconds: 3601 } });
    assert.equal(moved.statusCode, 200);
    await Promise.all([mine.tick(), theirs.tick()]);
    assert.equal(state.calls, 2, 'past the interval the job is due again and runs once');
    assert.equal(state.maxActive, 1, 'never two runs at once');
  } finally {
    await other.close();
  }
});

test('runNow runs a job even when it is not due, and never two runs of it at once', async () => {
  const other = await secondProcess(dev);
  try {
    const { job, state } = probeJob(3600);
    const mine = new JobRunner(dev.deps, [job]);
    const theirs = new JobRunner(other.deps, [job]);
    await mine.register();
    await mine.tick();
    assert.equal(state.calls, 1);

    const result = await theirs.runNow(job.name);
    assert.equal(state.calls, 2, 'ran although not due');
    assert.deepEqual(result, { call: 2 });

    await Promise.all([mine.runNow(job.name), theirs.runNow(job.name)]);
    assert.equal(state.calls, 4);
    assert.equal(state.maxActive, 1, 'the second waited for the first');
    await assert.rejects(mine.runNow('nope'), (err: any) => err.code === 'job_not_found');
  } finally {
    await other.close();
  }
});

test('"several processes never run the same one twice": a run that outlasted its timeout, so that another process claimed the job, does not release that process\'s claim when it ends: a third run waits for the second to finish', async () => {
  const other = await secondProcess(dev);
  const gates: Array<() => void> = [];
  // Runs after the first (whose claim ran out): at most one of them may run at a time.
  const state = { calls: 0, later: 0, maxLater: 0, over: false };
  try {
    const job: JobDefinition = {
      name: `probe-overrun-${randomBytes(4).toString('hex')}`,
      intervalSeconds: 3600,
      timeoutSeconds: 30,
      run: async () => {
        const call = ++state.calls;
        if (call > 1) state.maxLater = Math.max(state.maxLater, ++state.later);
        if (!state.over) await new Promise<void>((release) => { gates[call - 1] = release; });
        if (call > 1) state.later--;
        return { call };
      },
    };
    const mine = new JobRunner(dev.deps, [job]);
    const theirs = new JobRunner(other.deps, [job]);
    await mine.register();

    const first = mine.runNow(job.name);
    while (!gates[0]) await sleep(20);
    // The first run outlasts its 30-second timeout: another process may then claim the job.
    const moved = await dev.app.inject({ method: 'POST', url: '/_dev/clock', payload: { advance_seconds: 31 } });
    assert.equal(moved.statusCode, 200);
    const second = theirs.runNow(job.name);
    while (!gates[1]) await sleep(20);

    // The overrun first run ends: the claim is the second's, and stays so.
    gates[0]!();
    await first;
    const { rows } = await dev.database.scoped('system').query<{ locked_until: Date | null; runs: number }>('SELECT locked_until, runs FROM jobs WHERE name = $1', [job.name]);
    assert.notEqual(rows[0].locked_until, null, 'the second run still holds the job');
    assert.equal(rows[0].runs, 0, 'the overrun run, whose claim was taken over, records nothing');

    const third = mine.runNow(job.name);
    await sleep(500);
    assert.equal(state.calls, 2, 'the third run waits while the second runs');
    gates[1]!();
    await second;
    while (!gates[2]) await sleep(20);
    gates[2]!();
    assert.deepEqual(await third, { call: 3 });
    assert.equal(state.maxLater, 1, 'never two runs at once while a claim is live');
  } finally {
    state.over = true;
    for (const release of gates) release?.();
    await other.close();
  }
});

test('"a run\'s claim lapses after this [timeout]; another process may then run it again": a run claimed by a tick holds the job for its own timeout (30 s), not the longest of its runner\'s jobs (1 hour)', async () => {
  const other = await secondProcess(dev);
  const gate: { release?: () => void } = {};
  const state = { calls: 0 };
  try {
    const short: JobDefinition = {
      name: `probe-short-${randomBytes(4).toString('hex')}`,
      intervalSeconds: 3600,
      timeoutSeconds: 30,
      run: async () => {
        if (++state.calls === 1) await new Promise<void>((r) => { gate.release = r; });
        return { call: state.calls };
      },
    };
    const long: JobDefinition = { name: `probe-long-${randomBytes(4).toString('hex')}`, intervalSeconds: 3600, timeoutSeconds: 3600, run: async () => ({}) };
    const mine = new JobRunner(dev.deps, [short, long]);
    const theirs = new JobRunner(other.deps, [short, long]);
    await mine.register();
    await sql(dev, 'UPDATE jobs SET next_run_at = next_run_at + make_interval(secs => 3600) WHERE name = $1', [long.name]);

    const first = mine.tick();
    while (!gate.release) await sleep(20);
    // The run outlasts its 30-second timeout: a tick of another process runs the job again.
    assert.equal((await dev.app.inject({ method: 'POST', url: '/_dev/clock', payload: { advance_seconds: 31 } })).statusCode, 200);
    await theirs.tick();
    assert.equal(state.calls, 2, 'the lapsed claim was taken over');
    gate.release();
    await first;
  } finally {
    gate.release?.();
    await other.close();
  }
});

test('a job keeps its interval when the clock moves back (an NTP step, a restored VM, a process started without the development clock): a next run further ahead than one interval is due at once instead of after the step; a run by a process whose clock is ahead within the skew bound still waits its interval', async () => {
  const { job, state } = probeJob(300);
  const mine = new JobRunner(plain.deps, [job]);
  await mine.register();
  const offset = plain.clock.offsetMs;
  try {
    // A process whose clock is MAX_CLOCK_SKEW_SECONDS ahead runs it: the others still wait the interval.
    plain.clock.offsetMs = offset + MAX_CLOCK_SKEW_SECONDS * 1000 - 500;
    await mine.tick();
    assert.equal(state.calls, 1);
    plain.clock.offsetMs = offset;
    await mine.tick();
    assert.equal(state.calls, 1, 'within the skew bound the run is not repeated');

    // The clock steps back an hour: the next run, 5 minutes ahead of the old reading, is 65 minutes ahead of the new one.
    plain.clock.offsetMs = offset - 3600 * 1000;
    await mine.tick();
    assert.equal(state.calls, 2, 'the job runs at once, not an hour late');
    await mine.tick();
    assert.equal(state.calls, 2, 'then waits its interval on the clock as it now reads');
    plain.clock.offsetMs += 299 * 1000;
    await mine.tick();
    assert.equal(state.calls, 2, 'not before its interval');
    plain.clock.offsetMs += 2 * 1000;
    await mine.tick();
    assert.equal(state.calls, 3, 'and once it has passed');
    assert.equal(state.maxActive, 1);
  } finally {
    plain.clock.offsetMs = offset;
  }
});

test('after the clock steps back an hour, a password reset mail (its link lives an hour) still leaves the outbox at the next tick of the service\'s jobs, not an hour later when its link is dead', async (tc) => {
  const t = await buildTestApp({}, tc);
  const user = await createUser(t);
  await t.deps.jobs.tick(); // every job has run: each next run is one interval ahead
  t.clock.offsetMs -= 3600 * 1000;
  const asked = await t.app.inject({ method: 'POST', url: '/v1/auth/password/forgot', payload: { email: user.email } });
  assert.equal(asked.statusCode, 202);
  await t.deps.jobs.tick();
  const rows = await sql<{ status: string }>(t, `SELECT status FROM emails WHERE lower(to_address) = lower($1) AND template = 'password_reset'`, [user.email]);
  assert.deepEqual(rows.map((r) => r.status), ['logged'], 'mail-delivery ran (without SMTP_URL a sent mail is logged)');
});

// ---------------------------------------------------------------- runs over due items (src/jobs/each.ts)

/**
 * A queue of items as a job's step sees them: each step picks the first item not done and not in
 * `skip`, names it, and works on it (`fail` items throw, `gone` items were changed meanwhile).
 */
function itemQueue(items: string[], { fail = [] as string[], gone = [] as string[] } = {}) {
  const state = { steps: 0, finished: [] as string[], skips: [] as string[][] };
  const step = async (skip: string[], picked: (id: string) => void): Promise<'none' | 'done' | 'gone'> => {
    state.steps++;
    state.skips.push([...skip]);
    const next = items.find((id) => !state.finished.includes(id) && !skip.includes(id));
    if (!next) return 'none';
    picked(next);
    if (fail.includes(next)) throw new Error(`bad ${next}`);
    state.finished.push(next);
    return gone.includes(next) ? 'gone' : 'done';
  };
  return { state, step };
}

test('eachSkippingFailures: a run reports the items it did: an item gone meanwhile (a cancel came first) is not counted as done', async () => {
  const { state, step } = itemQueue(['a', 'b', 'c', 'd'], { gone: ['b'] });
  assert.equal(await eachSkippingFailures(dev.deps, 'item_id', step), 3);
  assert.deepEqual(state.finished, ['a', 'b', 'c', 'd']);
  assert.equal(state.steps, 5, 'one step per item, then the one that finds none');
});

test('eachSkippingFailures (decisions: "skipped for the rest of that run ... the run is recorded as failed naming it"): a failed item is passed in skip to every later step, the items after it are done, and the run then fails naming them and the count done, with the first one\'s error', async () => {
  const { state, step } = itemQueue(['a', 'b', 'c', 'd', 'e'], { fail: ['b', 'c'], gone: ['d'] });
  await assert.rejects(eachSkippingFailures(dev.deps, 'item_id', step), (err: Error) => {
    assert.equal(err.message, '2 item_id(s) failed (b, c); 2 done: bad b', 'the failed items, the count done, the first failure\'s error');
    return true;
  });
  assert.deepEqual(state.finished, ['a', 'd', 'e']);
  assert.deepEqual(state.skips, [[], [], ['b'], ['b', 'c'], ['b', 'c'], ['b', 'c']]);
});

test('eachSkippingFailures: a failure before an item was picked (the database unreachable) ends the run at once with that error, even after an item failed; no further step', async () => {
  const unreachable = new Error('connect ECONNREFUSED');
  let steps = 0;
  await assert.rejects(
    eachSkippingFailures(dev.deps, 'item_id', async (_skip, picked) => {
      steps++;
      if (steps === 1) return 'done';
      if (steps === 2) {
        picked('x');
        throw new Error('bad x');
      }
      throw unreachable;
    }),
    (err) => err === unreachable,
  );
  assert.equal(steps, 3);
});

test('eachSkippingFailures: after 100 failed items a run gives up on the rest: the 101st failure ends it with its own error', async () => {
  const items = Array.from({ length: 150 }, (_, i) => `i${i + 1}`);
  const { state, step } = itemQueue(items, { fail: items });
  await assert.rejects(eachSkippingFailures(dev.deps, 'item_id', step), (err: Error) => err.message === 'bad i101');
  assert.equal(state.steps, 101);
});

test('forEachSkippingFailures: a failing item does not stop the others; the run then fails naming it, with the count of items done', async () => {
  const worked: string[] = [];
  await assert.rejects(
    forEachSkippingFailures(dev.deps, 'tenant_id', ['t1', 't2', 't3'], (id) => id, async (id) => {
      if (id === 't1') throw new Error('bad t1');
      worked.push(id);
    }),
    (err: Error) => err.message === '1 tenant_id(s) failed (t1); 2 done: bad t1',
  );
  assert.deepEqual(worked, ['t2', 't3']);
});

// ---------------------------------------------------------------- mail outbox

async function queueResetMail(t: TestApp, to: string, token: string): Promise<string> {
  const ctx = systemCtx(t.deps, 'live');
  return ctx.db.transaction((tx) => enqueueMail(tx, ctx, { template: 'password_reset', to, vars: { token } }));
}

const mailRow = async (t: TestApp, id: string) =>
  (
    await t.database
      .scoped('system')
      .query<{ status: string; text_body: string; subject: string; sent_at: Date | null; attempts: number }>(
        'SELECT status, text_body, subject, sent_at, attempts FROM emails WHERE id = $1',
        [id],
      )
  ).rows[0];

test('an email that carries a token carries it in its text as a link on PUBLIC_URL whose query has token=<token>', async () => {
  const id = await queueResetMail(plain, uniqueEmail('mail'), 'abc');
  const row = await mailRow(plain, id);
  assert.equal(row.status, 'queued');
  const links = tokenLinks(row.text_body, 'abc');
  assert.equal(links.length, 1, row.text_body);
  assert.equal(links[0].origin, new URL(plain.config.publicUrl).origin);
  assert.ok(links[0].href.startsWith(plain.config.publicUrl), links[0].href);

  // Every template that carries a token (verification, email change, invitations, reset).
  const token = 'tok+/=&x';
  const ctx = systemCtx(plain.deps, 'live');
  for (const [template, vars] of [
    ['email_verification', { token }],
    ['email_change_verification', { token }],
    ['invitation', { token }],
    ['organization_invitation', { token, organizationName: 'Acme' }],
    ['password_reset', { token }],
  ] as const) {
    const mailId = await ctx.db.transaction((tx) => enqueueMail(tx, ctx, { template, to: uniqueEmail('tpl'), vars } as any));
    const text = (await mailRow(plain, mailId)).text_body;
    const found = tokenLinks(text, token);
    assert.equal(found.length, 1, `${template}: ${text}`);
    assert.ok(found[0].href.startsWith(plain.config.publicUrl), `${template}: ${found[0].href}`);
  }
});

test('without SMTP_URL queued mail is kept in the database outbox and marked logged', async () => {
  const id = await queueResetMail(plain, uniqueEmail('mail'), 'abc');
  const result = await deliverQueuedMail(plain.deps);
  assert.ok(result.sent >= 1, 'result.sent >= 1');
  assert.equal(result.failed, 0);
  const row = await mailRow(plain, id);
  assert.equal(row.status, 'logged');
  assert.ok(row.sent_at, 'row.sent_at');
  const again = await deliverQueuedMail(plain.deps);
  assert.equal(again.sent, 0, 'nothing is delivered twice');
});

test('without SMTP_URL the mail kept in the database outbox keeps its token link (it is the only copy)', async () => {
  const id = await queueResetMail(plain, uniqueEmail('kept'), 'kept-token');
  await deliverQueuedMail(plain.deps);
  const row = await mailRow(plain, id);
  assert.equal(row.status, 'logged');
  assert.equal(tokenLinks(row.text_body, 'kept-token').length, 1, row.text_body);
});

test('a mail that has left the outbox (logged, sent or failed) is deleted with its address and body 30 days after it was written, by the idempotency-prune job (GDPR Art. 5(1)(e), as the webhook delivery log); a mail still queued stays', async (tc) => {
  const t = await buildTestApp({}, tc);
  const user = await createUser(t);
  const forgot = await t.app.inject({ method: 'POST', url: '/v1/auth/password/forgot', payload: { email: user.email } });
  assert.equal(forgot.statusCode, 202, forgot.body);
  await t.deps.jobs.runNow('mail-delivery');
  const mails = () => sql<{ template: string; status: string }>(t, 'SELECT template, status FROM emails WHERE to_address = $1 ORDER BY created_at', [user.email]);
  assert.deepEqual(await mails(), [{ template: 'password_reset', status: 'logged' }]);
  // Mails an SMTP relay left sent, and failed for good, as it writes them.
  const sent = await queueResetMail(t, user.email, 'sent-token');
  await sql(t, `UPDATE emails SET status = 'sent', sent_at = created_at, attempts = 1 WHERE id = $1`, [sent]);
  const failed = await queueResetMail(t, user.email, 'failed-token');
  await sql(t, `UPDATE emails SET status = 'failed', attempts = 1, last_error = '550 No such user here' WHERE id = $1`, [failed]);
  assert.deepEqual((await mails()).map((m) => m.status).sort(), ['failed', 'logged', 'sent']);
  // A mail the relay has not taken yet (an SMTP outage's retry) is kept whatever its age.
  const held = await queueResetMail(t, user.email, 'held-token');
  await sql(t, `UPDATE emails SET next_attempt_at = $2 WHERE id = $1`, [held, addSeconds(t.clock.now(), 60 * 86400)]);

  t.clock.advance(30 * 86400 - 60);
  await t.deps.jobs.runNow('idempotency-prune');
  assert.equal((await mails()).length, 4, 'kept for 30 days');
  t.clock.advance(61);
  const result = await t.deps.jobs.runNow('idempotency-prune');
  assert.equal(result.emails, 3, JSON.stringify(result));
  assert.deepEqual(await mails(), [{ template: 'password_reset', status: 'queued' }]);
});

test('PUBLIC_URL is the origin of the links in emails: a token link is on the configured PUBLIC_URL, not the default', async (tc) => {
  const t = await buildTestApp({ publicUrl: 'https://id.example.org' }, tc);
  const id = await queueResetMail(t, uniqueEmail('origin'), 'origin-token');
  const links = tokenLinks((await mailRow(t, id)).text_body, 'origin-token');
  assert.equal(links.length, 1);
  assert.equal(links[0].origin, 'https://id.example.org');
});

test('the idempotency-prune job drops only what has ended: a login lockout still running keeps answering 429 too_many_attempts after it runs', async () => {
  const email = uniqueEmail('prune-lock');
  const attempt = () => dev.app.inject({ method: 'POST', url: '/v1/auth/login', payload: { email, password: 'wrong-password-123' } });
  for (let i = 0; i < 5; i++) assert.equal((await attempt()).statusCode, 401);
  assert.equal((await attempt()).statusCode, 429);
  const res = await dev.app.inject({ method: 'POST', url: '/_dev/jobs/idempotency-prune' });
  assert.equal(res.statusCode, 200, res.body);
  const locked = await attempt();
  assert.equal(locked.statusCode, 429, locked.body);
  assert.equal(locked.json().error.code, 'too_many_attempts');
});

test('a job that fails is reported as failed: runNow rejects, the error is recorded and the job is released for its next run', async () => {
  const job: JobDefinition = { name: `probe-fail-${randomBytes(4).toString('hex')}`, intervalSeconds: 3600, timeoutSeconds: 30, run: async () => { throw new Error('boom'); } };
  const runner = new JobRunner(dev.deps, [job]);
  await runner.register();
  await assert.rejects(runner.runNow(job.name), /boom/);
  const { rows } = await dev.database.scoped('system').query<{ last_error: string | null; locked_until: Date | null; runs: number }>(
    'SELECT last_error, locked_until, runs FROM jobs WHERE name = $1',
    [job.name],
  );
  assert.deepEqual(rows.map((r) => [r.last_error, r.locked_until, r.runs]), [['boom', null, 1]]);
  // Its next run is one interval after the failure (no retry in a loop): a tick now runs nothing.
  const [next] = await sql<{ next_run_at: Date; last_finished_at: Date }>(dev, 'SELECT next_run_at, last_finished_at FROM jobs WHERE name = $1', [job.name]);
  assert.equal(secondsApart(next.next_run_at, next.last_finished_at), 3600);
  await runner.tick();
  assert.equal((await sql<{ runs: number }>(dev, 'SELECT runs FROM jobs WHERE name = $1', [job.name]))[0].runs, 1, 'not run again before its interval');
});

test('a mail queued in a transaction that rolls back never exists', async () => {
  const to = uniqueEmail('rollback');
  const ctx = systemCtx(plain.deps, 'live');
  let id = '';
  await assert.rejects(
    ctx.db.transaction(async (tx) => {
      id = await enqueueMail(tx, ctx, { template: 'password_reset', to, vars: { token: 'abc' } });
      throw new Error('roll back');
    }),
    /roll back/,
  );
  assert.ok(id, 'id');
  const { rows } = await plain.database.scoped('system').query('SELECT id FROM emails WHERE id = $1 OR to_address = $2', [id, to]);
  assert.equal(rows.length, 0);
});

interface Received {
  from: string;
  to: string[];
  subject: string;
  text: string;
}

async function startSmtp(delayMs = 0): Promise<{ server: SMTPServer; port: number; received: Received[] }> {
  const received: Received[] = [];
  const server = new SMTPServer({
    authOptional: true,
    disabledCommands: ['STARTTLS', 'AUTH'],
    logger: false,
    onData(stream, session, callback) {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', async () => {
        const { headers, text } = decodeMessage(Buffer.concat(chunks).toString('latin1'));
        received.push({
          from: session.envelope.mailFrom ? session.envelope.mailFrom.address : '',
          to: session.envelope.rcptTo.map((r) => r.address),
          subject: headers.subject ?? '',
          text,
        });
        if (delayMs) await sleep(delayMs);
        callback();
      });
    },
  });
  const port = await new Promise<number>((resolve, reject) => {
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => resolve((server.server.address() as { port: number }).port));
  });
  return { server, port, received };
}

test('with SMTP_URL the relay sends queued mail through that server and marks it sent', async (tc) => {
  const smtp = await startSmtp();
  tc.after(() => new Promise<void>((r) => smtp.server.close(() => r())));
  const t = await buildTestApp({ smtpUrl: `smtp://127.0.0.1:${smtp.port}` }, tc);
  const to = uniqueEmail('smtp');
  const id = await queueResetMail(t, to, 'abc');

  const result = await deliverQueuedMail(t.deps);
  assert.deepEqual(result, { sent: 1, failed: 0 });
  assert.equal(smtp.received.length, 1);
  const [mail] = smtp.received;
  assert.deepEqual(mail.to, [to]);
  assert.equal(mail.from, 'no-reply@localhost', 'MAIL_FROM defaults to no-reply@<PUBLIC_URL host>');
  assert.equal(mail.subject, 'Reset your password');
  const links = tokenLinks(mail.text, 'abc');
  assert.equal(links.length, 1, mail.text);
  assert.ok(links[0].href.startsWith(t.config.publicUrl), 'links[0].href.startsWith(t.config.publicUrl)');

  const row = await mailRow(t, id);
  assert.equal(row.status, 'sent');
  assert.ok(row.sent_at, 'row.sent_at');
  assert.equal(row.attempts, 1);
  // The stored copy of a sent mail keeps no live link (catalog AU-2).
  assert.equal(tokenLinks(row.text_body, 'abc').length, 0, row.text_body);
  assert.match(row.text_body, /\?token=\[redacted\]/);
});

test('a failed mail is retried 2, 4, 8, 16 and 32 minutes after its attempts, then every hour, and fails for good after 4 days (RFC 5321 4.5.4.1); its stored copy then keeps no live link (the invitation lives 7 days, the row 30 days)', async (tc) => {
  const { t } = await outageApp();
  const admin = (await createApiKey(t, { permissions: ['users.manage'] })).secret;
  const to = uniqueEmail('undeliverable');
  const invited = await t.app.inject({ method: 'POST', url: '/v1/users', headers: bearer(admin), payload: { email: to } });
  assert.equal(invited.statusCode, 201, invited.body);
  const row = async () =>
    (await t.database.scoped('system').query<{ status: string; attempts: number; text_body: string; last_error: string; next_attempt_at: Date; created_at: Date }>(
      'SELECT status, attempts, text_body, last_error, next_attempt_at, created_at FROM emails WHERE to_address = $1', [to],
    )).rows[0];
  const queued = await row();
  assert.match(queued.text_body, /\?token=inv_/, 'a queued mail keeps its link: it is still to be sent');
  const delays: number[] = [];
  let now = queued;
  const attempt = async () => {
    t.clock.advance(Math.max(0, now.next_attempt_at.getTime() - t.clock.now().getTime()) / 1000);
    const attemptedAt = t.clock.now().getTime();
    await deliverQueuedMail(t.deps);
    now = await row();
    if (now.status === 'queued') delays.push(Math.round((now.next_attempt_at.getTime() - attemptedAt) / 60_000));
  };
  for (let i = 1; i <= 8; i++) {
    await attempt();
    assert.deepEqual([now.attempts, now.status], [i, 'queued']);
    assert.match(now.text_body, /\?token=inv_/, `attempt ${i}: kept for the retry`);
  }
  assert.deepEqual(delays, [2, 4, 8, 16, 32, 60, 60, 60]);
  // The hourly retries go on to the fourth day's last hour: the attempt there is the last.
  const lastHour = queued.created_at.getTime() + 4 * 86_400_000 - 30 * 60_000;
  t.clock.advance((lastHour - t.clock.now().getTime()) / 1000);
  now = { ...now, next_attempt_at: t.clock.now() };
  await attempt();
  assert.equal(now.attempts, 9);
  assert.equal(now.status, 'failed');
  assert.match(now.last_error, /451 try again later/);
  assert.match(now.text_body, /\/accept-invitation\?token=\[redacted\]/, now.text_body);
  assert.doesNotMatch(now.text_body, /inv_/);
});

test('a mail whose retry was set before the clock stepped back an hour leaves at the next run of the relay, not an hour later: a retry time further ahead than the longest back-off (1 hour) is due at once', async () => {
  const { t, smtp } = await outageApp();
  const admin = (await createApiKey(t, { permissions: ['users.manage'] })).secret;
  const to = uniqueEmail('stepped-back');
  const invited = await t.app.inject({ method: 'POST', url: '/v1/users', headers: bearer(admin), payload: { email: to } });
  assert.equal(invited.statusCode, 201, invited.body);
  const row = async () =>
    (await t.database.scoped('system').query<{ status: string; attempts: number }>('SELECT status, attempts FROM emails WHERE to_address = $1', [to])).rows[0];
  await deliverQueuedMail(t.deps);
  assert.deepEqual(await row(), { status: 'queued', attempts: 1 }, 'the first attempt failed: retried 2 minutes later');
  t.clock.advance(-3600);
  try {
    smtp.state.down = false;
    await deliverQueuedMail(t.deps);
    assert.equal((await row()).status, 'sent', 'sent at once, not after the step');
    assert.equal(smtp.state.received.filter((m) => m.to === to).length, 1);
  } finally {
    t.clock.advance(3600);
  }
});

test('a mail the SMTP server refuses for good (a 5xx answer to its recipient or to its data: RFC 5321 4.2.1, "the SMTP client SHOULD NOT repeat the exact request") is not retried: it fails at its first attempt, with the answer kept and its link redacted; a 4xx is still retried', async (tc) => {
  const refusals = new Map<string, { at: 'rcpt' | 'data'; code: number; message: string }>();
  const attempts = new Map<string, number>();
  const server = new SMTPServer({
    authOptional: true,
    disabledCommands: ['STARTTLS', 'AUTH'],
    logger: false,
    onRcptTo(address, _session, callback) {
      attempts.set(address.address, (attempts.get(address.address) ?? 0) + 1);
      const r = refusals.get(address.address);
      if (r?.at === 'rcpt') return callback(Object.assign(new Error(r.message), { responseCode: r.code }));
      callback();
    },
    onData(stream, session, callback) {
      stream.resume();
      stream.on('end', () => {
        const r = refusals.get(session.envelope.rcptTo[0].address);
        if (r?.at === 'data') return callback(Object.assign(new Error(r.message), { responseCode: r.code }));
        callback();
      });
    },
  });
  const port = await new Promise<number>((resolve) => server.listen(0, '127.0.0.1', () => resolve((server.server.address() as AddressInfo).port)));
  tc.after(() => new Promise<void>((r) => server.close(() => r())));
  const t = await buildTestApp({ smtpUrl: `smtp://127.0.0.1:${port}` }, tc);
  const [noMailbox, rejected, busy] = [await createUser(t), await createUser(t), await createUser(t)];
  refusals.set(noMailbox.email, { at: 'rcpt', code: 550, message: 'No such user here' });
  refusals.set(rejected.email, { at: 'data', code: 554, message: 'Message rejected' });
  refusals.set(busy.email, { at: 'rcpt', code: 450, message: 'Mailbox busy' });
  for (const u of [noMailbox, rejected, busy]) {
    assert.equal((await t.app.inject({ method: 'POST', url: '/v1/auth/password/forgot', payload: { email: u.email } })).statusCode, 202);
  }
  const row = async (email: string) => (await sql(t, 'SELECT status, attempts, last_error, text_body FROM emails WHERE to_address = $1', [email]))[0];
  await t.deps.jobs.runNow('mail-delivery');
  t.clock.advance(121); // past the 2-minute retry of a failed first attempt
  await t.deps.jobs.runNow('mail-delivery');
  for (const [u, answer] of [[noMailbox, /550 No such user here/], [rejected, /554 Message rejected/]] as const) {
    const mail = await row(u.email);
    assert.deepEqual([mail.status, mail.attempts], ['failed', 1], `${u.email}: failed for good at its first attempt`);
    assert.match(mail.last_error, answer);
    assert.match(mail.text_body, /\/reset-password\?token=\[redacted\]/, 'its stored copy keeps no live link');
    assert.equal(attempts.get(u.email), 1, 'the refused recipient was tried once');
  }
  const transient = await row(busy.email);
  assert.deepEqual([transient.status, transient.attempts], ['queued', 2], 'a 4xx answer is retried');
  assert.match(transient.last_error, /450 Mailbox busy/);
});

/** An SMTP server that answers 451 (try again later) to every message while `down` is set. */
async function flakySmtp() {
  const state = { down: true, received: [] as { to: string; text: string }[] };
  const server = new SMTPServer({
    authOptional: true,
    disabledCommands: ['STARTTLS', 'AUTH'],
    logger: false,
    onData(stream, session, callback) {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        if (state.down) return callback(Object.assign(new Error('try again later'), { responseCode: 451 }));
        state.received.push({ to: session.envelope.rcptTo[0].address, text: decodeMessage(Buffer.concat(chunks).toString('latin1')).text });
        callback();
      });
    },
  });
  const port = await new Promise<number>((resolve) => server.listen(0, '127.0.0.1', () => resolve((server.server.address() as AddressInfo).port)));
  return { state, url: `smtp://127.0.0.1:${port}`, close: () => new Promise<void>((r) => server.close(() => r())) };
}

let outage: Promise<{ t: TestApp; smtp: Awaited<ReturnType<typeof flakySmtp>> }> | undefined;
/** One service whose SMTP server is down (451) until a test brings it up; shared by the outage tests. */
async function outageApp() {
  outage ??= (async () => {
    const smtp = await flakySmtp();
    return { t: await buildTestApp({ smtpUrl: smtp.url }), smtp };
  })();
  const shared = await outage;
  shared.smtp.state.down = true;
  shared.smtp.state.received.length = 0;
  return shared;
}
after(async () => {
  if (!outage) return;
  const { t, smtp } = await outage;
  await t.close();
  await smtp.close();
});

/** The token of the one link in a mail's text. */
const linkToken = (text: string) => new URL(text.match(/https?:\/\/\S+token=\S+/)![0]).searchParams.get('token');

/** Runs the relay at each queued mail's next attempt for the next `seconds`. */
async function relayFor(t: TestApp, seconds: number): Promise<void> {
  const end = t.clock.now().getTime() + seconds * 1000;
  for (;;) {
    const [next] = await sql(t, `SELECT min(next_attempt_at) AS at FROM emails WHERE status = 'queued'`);
    const at = next.at ? (next.at as Date).getTime() : Infinity;
    if (at > end) break;
    t.clock.advance(Math.max(0, at - t.clock.now().getTime()) / 1000);
    await deliverQueuedMail(t.deps);
  }
  t.clock.advance(Math.max(0, end - t.clock.now().getTime()) / 1000);
}

test('an SMTP outage of two days does not lose an invitation: it stays queued, retried hourly, and is delivered, with its working link, once the server answers', async (tc) => {
  const { t, smtp } = await outageApp();
  const admin = (await createApiKey(t, { permissions: ['users.manage'] })).secret;
  const to = uniqueEmail('outage');
  assert.equal((await t.app.inject({ method: 'POST', url: '/v1/users', headers: bearer(admin), payload: { email: to } })).statusCode, 201);
  await relayFor(t, 3600);
  // Two days later (the relay's hourly attempts in between failed alike), it is still queued.
  t.clock.advance(2 * 86_400);
  await deliverQueuedMail(t.deps);
  const [waiting] = await sql(t, 'SELECT status, attempts, next_attempt_at FROM emails WHERE to_address = $1', [to]);
  assert.deepEqual([waiting.status, waiting.attempts], ['queued', 6]);
  assert.equal((waiting.next_attempt_at as Date).getTime() - t.clock.now().getTime() <= 3600_000, true);
  smtp.state.down = false;
  await relayFor(t, 3600);
  assert.equal((await sql(t, 'SELECT status FROM emails WHERE to_address = $1', [to]))[0].status, 'sent');
  assert.equal(smtp.state.received.length, 1);
  const accepted = await t.app.inject({ method: 'POST', url: '/v1/auth/invitations/accept', payload: { token: linkToken(smtp.state.received[0].text), password: 'a long enough passphrase 1' } });
  assert.equal(accepted.statusCode, 200, accepted.body);
});

test('a mail whose link stopped working during an SMTP outage is not sent: a reset link replaced by a newer request, and one whose hour ran out, fail for good (link redacted) while the newer link is delivered', async (tc) => {
  const { t, smtp } = await outageApp();
  const [replaced, live] = [await createUser(t), await createUser(t)];
  const forgot = async (email: string) => assert.equal((await t.app.inject({ method: 'POST', url: '/v1/auth/password/forgot', payload: { email } })).statusCode, 202);
  await forgot(replaced.email);
  await forgot(live.email);
  await relayFor(t, 600);
  await forgot(replaced.email);
  smtp.state.down = false;
  await relayFor(t, 1200);
  assert.deepEqual(smtp.state.received.map((m) => m.to).sort(), [live.email, replaced.email].sort(), 'the newer reset link and the one still live are sent');
  const [first] = await sql(t, 'SELECT status, last_error, text_body FROM emails WHERE to_address = $1 ORDER BY created_at', [replaced.email]);
  assert.equal(first.status, 'failed');
  assert.match(first.last_error, /link was used, replaced or expired/);
  assert.doesNotMatch(first.text_body, /token=rst_|token=(?!\[redacted\])/);
  const delivered = linkToken(smtp.state.received.find((m) => m.to === replaced.email)!.text);
  const reset = await t.app.inject({ method: 'POST', url: '/v1/auth/password/reset', payload: { token: delivered, password: 'a long enough passphrase 2' } });
  assert.equal(reset.statusCode, 204, reset.body);

  // A reset link lives one hour: the server down again past it, the mail is given up at its
  // next attempt after the hour, and never sent dead.
  smtp.state.down = true;
  smtp.state.received.length = 0;
  const later = await createUser(t);
  await forgot(later.email);
  await relayFor(t, 2 * 3600);
  smtp.state.down = false;
  await relayFor(t, 3600);
  assert.deepEqual(smtp.state.received, []);
  const [gone] = await sql(t, 'SELECT status, attempts, text_body FROM emails WHERE to_address = $1', [later.email]);
  assert.equal(gone.status, 'failed');
  assert.ok(gone.attempts <= 6, `no attempt after the link expired (${gone.attempts})`);
  assert.match(gone.text_body, /token=\[redacted\]/);
});

test('several relays running at once never send one mail twice (FOR UPDATE SKIP LOCKED)', async (tc) => {
  const smtp = await startSmtp(50);
  tc.after(() => new Promise<void>((r) => smtp.server.close(() => r())));
  const t = await buildTestApp({ smtpUrl: `smtp://127.0.0.1:${smtp.port}` }, tc);
  const other = await secondProcess(t);
  tc.after(() => other.close());
  const recipients = Array.from({ length: 6 }, () => uniqueEmail('relay'));
  for (const to of recipients) await queueResetMail(t, to, `tok-${to}`);

  const results = await Promise.all([deliverQueuedMail(t.deps), deliverQueuedMail(other.deps), deliverQueuedMail(t.deps), deliverQueuedMail(other.deps)]);
  assert.equal(
    results.reduce((n, r) => n + r.sent, 0),
    recipients.length,
  );
  assert.equal(results.reduce((n, r) => n + r.failed, 0), 0);
  const delivered = smtp.received.flatMap((m) => m.to).sort();
  assert.deepEqual(delivered, [...recipients].sort(), 'each mail exactly once');
  const { rows } = await t.database.scoped('system').query<{ status: string; attempts: number }>('SELECT status, attempts FROM emails');
  assert.equal(rows.length, recipients.length);
  for (const r of rows) {
    assert.equal(r.status, 'sent');
    assert.equal(r.attempts, 1);
  }
});

test('a mail keeps its Message-ID through its retries: an attempt the SMTP server refused after the data (451) and the retry carry the same Message-ID, another mail another one; every mail says Auto-Submitted: auto-generated (RFC 3834: no vacation replies)', async (tc) => {
  const seen: { to: string; messageId: string; autoSubmitted: string }[] = [];
  const server = new SMTPServer({
    authOptional: true,
    disabledCommands: ['STARTTLS', 'AUTH'],
    logger: false,
    onData(stream, session, callback) {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        const { headers } = decodeMessage(Buffer.concat(chunks).toString('latin1'));
        seen.push({ to: session.envelope.rcptTo[0].address, messageId: headers['message-id'] ?? '', autoSubmitted: headers['auto-submitted'] ?? '' });
        if (seen.length === 1) callback(Object.assign(new Error('try again later'), { responseCode: 451 }));
        else callback();
      });
    },
  });
  const port = await new Promise<number>((resolve) => server.listen(0, '127.0.0.1', () => resolve((server.server.address() as AddressInfo).port)));
  tc.after(() => new Promise<void>((r) => server.close(() => r())));
  const t = await buildTestApp({ smtpUrl: `smtp://127.0.0.1:${port}` }, tc);
  const [user, other] = [await createUser(t), await createUser(t)];
  assert.equal((await t.app.inject({ method: 'POST', url: '/v1/auth/password/forgot', payload: { email: user.email } })).statusCode, 202);
  await t.deps.jobs.runNow('mail-delivery');
  const [row] = await sql(t, 'SELECT id, status, attempts FROM emails WHERE to_address = $1', [user.email]);
  assert.deepEqual([row.status, row.attempts], ['queued', 1], 'the first attempt failed');
  t.clock.advance(120);
  assert.equal((await t.app.inject({ method: 'POST', url: '/v1/auth/password/forgot', payload: { email: other.email } })).statusCode, 202);
  await t.deps.jobs.runNow('mail-delivery');
  const ids = (to: string) => seen.filter((m) => m.to === to).map((m) => m.messageId);
  assert.equal(ids(user.email).length, 2);
  assert.equal(ids(user.email)[0], `<${row.id}@localhost>`);
  assert.equal(ids(user.email)[1], ids(user.email)[0], 'the retry is the same message');
  assert.equal(ids(other.email).length, 1);
  assert.notEqual(ids(other.email)[0], ids(user.email)[0]);
  assert.deepEqual(seen.map((m) => m.autoSubmitted), ['auto-generated', 'auto-generated', 'auto-generated']);
});

test('a relay never sends a mail another relay is still sending: when one SMTP exchange outlasts the batch claim (2 minutes), a second relay sends only the batch\'s other mail, and each recipient gets one mail', async (tc) => {
  const received: string[] = [];
  const held: (() => void)[] = [];
  const server = new SMTPServer({
    authOptional: true,
    disabledCommands: ['STARTTLS', 'AUTH'],
    logger: false,
    onData(stream, session, callback) {
      stream.resume();
      stream.on('end', () => {
        received.push(session.envelope.rcptTo[0].address);
        // The first mail's final answer waits until the test lets it go (a slow relay).
        if (received.length === 1) held.push(() => callback());
        else callback();
      });
    },
  });
  const port = await new Promise<number>((resolve) => server.listen(0, '127.0.0.1', () => resolve((server.server.address() as AddressInfo).port)));
  tc.after(() => new Promise<void>((r) => server.close(() => r())));
  const t = await buildTestApp({ smtpUrl: `smtp://127.0.0.1:${port}` }, tc);
  const other = await secondProcess(t);
  tc.after(() => other.close());
  const users = [await createUser(t), await createUser(t)];
  for (const u of users) {
    const res = await t.app.inject({ method: 'POST', url: '/v1/auth/password/forgot', payload: { email: u.email } });
    assert.equal(res.statusCode, 202, res.body);
  }

  const first = deliverQueuedMail(t.deps);
  for (let waited = 0; received.length < 1; waited += 20) {
    assert.ok(waited < 10_000, 'the first relay reached the SMTP server');
    await sleep(20);
  }
  other.clock.advance(121); // the first relay's batch claim has lapsed for the second relay
  const second = await deliverQueuedMail(other.deps);
  held.forEach((release) => release());
  assert.deepEqual(await first, { sent: 1, failed: 0 });
  assert.deepEqual(second, { sent: 1, failed: 0 }, 'the second relay sent only the mail nobody was sending');
  assert.deepEqual([...received].sort(), users.map((u) => u.email).sort(), 'each mail exactly once');
  const rows = await sql(t, 'SELECT status, attempts FROM emails WHERE to_address = ANY($1::text[])', [users.map((u) => u.email)]);
  assert.deepEqual(rows.map((r) => [r.status, r.attempts]), [['sent', 1], ['sent', 1]]);
});

test('a mail the SMTP server accepted is not sent again when recording it fails once (its database connection lost): the relay records it sent, and each recipient gets one mail', async (tc) => {
  const smtp = await startSmtp();
  tc.after(() => new Promise<void>((r) => smtp.server.close(() => r())));
  const t = await buildTestApp({ smtpUrl: `smtp://127.0.0.1:${smtp.port}` }, tc);
  const user = await createUser(t);
  const res = await t.app.inject({ method: 'POST', url: '/v1/auth/password/forgot', payload: { email: user.email } });
  assert.equal(res.statusCode, 202, res.body);

  // The statement that records the send fails once, as on a connection the server dropped.
  const database = t.deps.database;
  const original = database.scoped;
  let failed = 0;
  database.scoped = (scope) => {
    const db = original.call(database, scope);
    const query = (async (text: string, params?: unknown[]) => {
      if (failed === 0 && text.includes('sent_at = $3')) {
        failed++;
        throw new Error('Connection terminated unexpectedly');
      }
      return db.query(text, params);
    }) as typeof db.query;
    return { ...db, query };
  };
  tc.after(() => {
    database.scoped = original;
  });
  await t.deps.jobs.runNow('mail-delivery').catch(() => undefined);
  database.scoped = original;
  assert.equal(failed, 1, 'the recording statement was failed once');
  assert.equal(smtp.received.length, 1);

  t.clock.advance(16 * 60); // past the retry (2 minutes) and the sending claim (15 minutes)
  await t.deps.jobs.runNow('mail-delivery');
  assert.deepEqual(smtp.received.map((m) => m.to), [[user.email]], 'one mail');
  const [row] = await sql(t, 'SELECT status, attempts, last_error FROM emails WHERE to_address = $1', [user.email]);
  assert.deepEqual([row.status, row.attempts, row.last_error], ['sent', 1, null]);
});
