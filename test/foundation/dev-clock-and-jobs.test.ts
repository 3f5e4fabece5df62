// The development clock and job endpoints (DEV_CLOCK=1), the job scheduler and runs over due items.
// The mail outbox and its relay: mail-relay.test.ts.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { Writable } from 'node:stream';
import { atOneInstant, buildTestApp, openTestDatabase, testConfig, withStoppedClock, type TestApp } from '../helpers/app.js';
import { createUser, uniqueEmail } from '../helpers/fixtures.js';
import { sql } from '../helpers/http.js';
import { addSeconds, MAX_CLOCK_SKEW_SECONDS, SystemClock } from '../../src/clock.js';
import { boot } from '../../src/boot.js';
import { refreshDevClock } from '../../src/dev/clock.js';
import { JobRunner } from '../../src/jobs/runner.js';
import { MODULES } from '../../src/modules/index.js';
import { eachSkippingFailures, forEachSkippingFailures } from '../../src/jobs/each.js';
import type { JobDefinition } from '../../src/jobs/types.js';
import { secondProcess, sleep } from './support/ops.js';

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

// ---------------------------------------------------------------- job outcomes

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
