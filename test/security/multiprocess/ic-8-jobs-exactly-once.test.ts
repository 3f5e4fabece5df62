// IC-8 [MP], the jobs part (the boot part is test/foundation/storage-starts.test.ts "several nodes starting
// at once"): 3 operator CLI processes (`platform jobs run <job>`, the compiled CLI) per job, all 12
// started at once, for entitlement-expiry, erasure-cascade, test-purge and webhook-health on one
// database where each job has real work. operations.md: jobs are claimed with FOR UPDATE SKIP
// LOCKED, so several processes never run the same one twice; a `jobs run` that finds the job held
// waits and then runs it again, so the later runs must find nothing left to do. Expected: each
// effect exactly once (events, audit rows, mails), and no two runs of one job overlapping.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { Cluster, ROOT } from './cluster.js';
import { runJobsAtOnce, type CliRun } from './ic-8-cli.js';
import { seedJobWork, type JobWork } from './ic-8-seed.js';
import { seconds } from './fixtures.js';
import { projectPath } from '../../../src/paths.js';

const JOBS = ['entitlement-expiry', 'erasure-cascade', 'test-purge', 'webhook-health'] as const;
/** The field of each job's result that counts its main work. */
const WORK: Record<(typeof JOBS)[number], string> = { 'entitlement-expiry': 'expired', 'erasure-cascade': 'erased', 'test-purge': 'users', 'webhook-health': 'disabled' };
const PROCESSES_PER_JOB = 3;
const DAY = 86400;
/** Past every window at once: ends_at (+1 h), erasure (7 days), test retention (30 days), unhealthy (5 days). */
const MOVE_SECONDS = 31 * DAY;

let cluster: Cluster;
let work: JobWork;
before(async () => {
  // The CLI runs the compiled sources (bin/platform.js builds them when stale): build once here, so
  // that twelve processes starting together never each start a build.
  await promisify(execFile)(process.execPath, [projectPath('scripts/build-if-needed.mjs')], { cwd: ROOT, timeout: 180_000 });
  cluster = await Cluster.start({ nodes: 1 });
  work = await seedJobWork(cluster);
});
after(() => cluster?.close());

const count = async (c: Cluster, text: string, params: unknown[] = []) => (await c.sql<{ n: number }>(`SELECT count(*)::int AS n FROM ${text}`, params))[0].n;

/** Records every claim and release of a job row (lock_token set / cleared) with the wall time. */
async function recordClaims(c: Cluster): Promise<void> {
  await c.sql(`CREATE TABLE ic8_job_claims (job text NOT NULL, token text NOT NULL, claimed_at timestamptz NOT NULL, released_at timestamptz)`);
  await c.sql(`CREATE FUNCTION ic8_record_claim() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
    BEGIN
      IF OLD.lock_token IS NOT NULL AND OLD.lock_token IS DISTINCT FROM NEW.lock_token THEN
        UPDATE ic8_job_claims SET released_at = clock_timestamp() WHERE token = OLD.lock_token;
      END IF;
      IF NEW.lock_token IS NOT NULL AND NEW.lock_token IS DISTINCT FROM OLD.lock_token THEN
        INSERT INTO ic8_job_claims (job, token, claimed_at) VALUES (NEW.name, NEW.lock_token, clock_timestamp());
      END IF;
      RETURN NEW;
    END $$`);
  await c.sql(`CREATE TRIGGER ic8_record_claim AFTER UPDATE ON jobs FOR EACH ROW EXECUTE FUNCTION ic8_record_claim()`);
}

/** Runs of one job whose claim intervals overlap another run of the same job (an open claim lasts forever). */
async function overlappingRuns(c: Cluster): Promise<Record<string, number>> {
  const rows = await c.sql<{ job: string; n: number }>(
    `SELECT a.job, count(*)::int AS n FROM ic8_job_claims a JOIN ic8_job_claims b ON a.job = b.job AND a.token < b.token
      WHERE tstzrange(a.claimed_at, a.released_at) && tstzrange(b.claimed_at, b.released_at) GROUP BY a.job`,
  );
  return Object.fromEntries(rows.map((r) => [r.job, r.n]));
}

test(`IC-8 "exactly-once jobs": ${PROCESSES_PER_JOB} processes run \`jobs run\` expiry-sweep, erasure-cascade, test-purge and webhook-health at the same time: each expired row gives exactly one entitlement.expired (plus access.revoked where access flips); duplicate job effects 0`, async () => {
  const c = cluster;
  const w = work;
  const moved = await c.advanceClock(MOVE_SECONDS);
  // Nothing else may run a job: the one server process (WORKERS=0) only seeded the data.
  await c.a.stop();
  const cutoff = new Date(moved.getTime() - 30 * DAY * 1000);
  const PURGED = ['users', 'entitlements', 'audit_events', 'outbox_events', 'emails'] as const;
  const testRows: Record<string, number> = {};
  for (const table of PURGED) testRows[table] = await count(c, `${table} WHERE test_mode AND created_at < $1`, [cutoff]);
  const liveUsers = await count(c, 'users WHERE NOT test_mode');
  await recordClaims(c);

  const started = Date.now();
  const runs = await runJobsAtOnce(c.databaseUrl, JOBS.flatMap((job) => Array.from({ length: PROCESSES_PER_JOB }, () => job)));
  const elapsed = Date.now() - started;
  const bad: string[] = [];
  for (const r of runs) if (r.code !== 0 || !r.result) bad.push(`${r.job} exited ${r.code}: ${r.stderr.slice(-500)}`);
  const resultsOf = (job: string) => runs.filter((r: CliRun) => r.job === job).map((r) => r.result ?? {});
  const sumOf = (job: string, field: string) => resultsOf(job).reduce((s, r) => s + Number(r[field] ?? 0), 0);

  // Effects written since the clock move, keyed by what must occur exactly once.
  const since = [moved];
  const expiredEvents = await c.sql<{ id: string; n: number }>(
    `SELECT data->'entitlement'->>'id' AS id, count(*)::int AS n FROM outbox_events WHERE type = 'entitlement.expired' AND created_at >= $1 GROUP BY 1`, since);
  const expiredAudit = await c.sql<{ id: string; n: number }>(
    `SELECT target_id AS id, count(*)::int AS n FROM audit_events WHERE action = 'entitlement.expired' AND created_at >= $1 GROUP BY 1`, since);
  const accessEvents = await c.sql<{ id: string; n: number }>(
    `SELECT type || ' ' || (data->>'user_id') || ' ' || (data->>'application_id') || ' ' || (data->>'reason') AS id, count(*)::int AS n
       FROM outbox_events WHERE type LIKE 'access.%' AND created_at >= $1 GROUP BY 1`, since);
  const erasedAudit = await c.sql<{ id: string; n: number }>(
    `SELECT target_id AS id, count(*)::int AS n FROM audit_events WHERE action = 'user.erased' AND created_at >= $1 GROUP BY 1`, since);
  const memberRemoved = await c.sql<{ id: string; n: number }>(
    `SELECT 'outbox ' || (data->>'user_id') AS id, count(*)::int AS n FROM outbox_events WHERE type = 'organization.member_removed' AND created_at >= $1 GROUP BY 1
     UNION ALL SELECT 'audit ' || target_user_id, count(*)::int FROM audit_events WHERE action = 'organization.member_removed' AND created_at >= $1 GROUP BY 1`, since);
  const purgedGrants = await c.sql<{ id: string; n: number }>(
    `SELECT 'outbox ' || (data->'entitlement'->>'id') AS id, count(*)::int AS n FROM outbox_events WHERE type = 'entitlement.deleted' AND test_mode AND created_at >= $1 GROUP BY 1
     UNION ALL SELECT 'audit ' || target_id, count(*)::int FROM audit_events WHERE action = 'entitlement.deleted' AND test_mode AND created_at >= $1 GROUP BY 1`, since);
  const statusChanged = await c.sql<{ id: string; n: number }>(
    `SELECT target_id AS id, count(*)::int AS n FROM audit_events WHERE action = 'webhook.status_changed' AND created_at >= $1 GROUP BY 1`, since);
  const disabledMail = await c.sql<{ id: string; n: number }>(
    `SELECT to_address AS id, count(*)::int AS n FROM emails WHERE template = 'webhook_disabled' AND created_at >= $1 GROUP BY 1`, since);

  /** Compares what occurred (id → times) with what must occur once each; counts duplicates, misses and strays. */
  const tally = { duplicates: 0, missing: 0, unexpected: 0 };
  const exactlyOnce = (what: string, got: { id: string; n: number }[], expected: string[]) => {
    const seen = new Map(got.map((g) => [g.id, g.n]));
    for (const id of expected) {
      const n = seen.get(id) ?? 0;
      if (n > 1) tally.duplicates += n - 1;
      if (n === 0) tally.missing++;
      if (n !== 1) bad.push(`${what} ${id}: ${n} times`);
    }
    for (const [id, n] of seen) {
      if (!expected.includes(id)) {
        tally.unexpected += n;
        bad.push(`${what} ${id}: ${n} times, none expected`);
      }
    }
  };
  exactlyOnce('entitlement.expired event', expiredEvents, w.expiring);
  exactlyOnce('entitlement.expired audit row', expiredAudit, w.expiring);
  exactlyOnce('access event', accessEvents, w.flips.map((p) => `access.revoked ${p.user_id} ${p.application_id} entitlement_expired`));
  exactlyOnce('user.erased audit row', erasedAudit, w.erasures);
  exactlyOnce('organization.member_removed', memberRemoved, [`outbox ${w.erasedMember}`, `audit ${w.erasedMember}`]);
  exactlyOnce('entitlement.deleted of a purged test grant', purgedGrants, w.testGrants.flatMap((id) => [`outbox ${id}`, `audit ${id}`]));
  exactlyOnce('webhook.status_changed audit row', statusChanged, w.webhooks.map((h) => h.id));
  exactlyOnce('webhook_disabled mail', disabledMail, w.webhooks.map((h) => h.ownerEmail));

  // End states, and each job's own account of its work summed over its three runs.
  const notExpired = await count(c, `entitlements WHERE id = ANY($1) AND status <> 'expired'`, [w.expiring]);
  const notErased = await count(c, `erasure_requests r JOIN users u ON u.id = r.user_id WHERE r.user_id = ANY($1) AND (r.status <> 'completed' OR u.erased_at IS NULL)`, [w.erasures]);
  const notDisabled = await count(c, `webhook_subscriptions WHERE id = ANY($1) AND status <> 'disabled'`, [w.webhooks.map((h) => h.id)]);
  const testLeft = await count(c, `users WHERE test_mode`);
  // Besides the purge's announcements of the grants it deletes (counted above).
  const newTestRows = await count(c, `audit_events WHERE test_mode AND created_at >= $1 AND action <> 'entitlement.deleted'`, since)
    + (await count(c, `outbox_events WHERE test_mode AND created_at >= $1 AND type <> 'entitlement.deleted'`, since));
  const liveUsersAfter = await count(c, 'users WHERE NOT test_mode');
  if (notExpired) bad.push(`${notExpired} expiring rows not expired`);
  if (notErased) bad.push(`${notErased} erasure requests not completed`);
  if (notDisabled) bad.push(`${notDisabled} unhealthy subscriptions not disabled`);
  if (testLeft) bad.push(`${testLeft} test-mode users left after the purge`);
  if (newTestRows) bad.push(`${newTestRows} test-mode audit or outbox rows written by the jobs`);
  if (liveUsersAfter !== liveUsers) bad.push(`live users ${liveUsers} → ${liveUsersAfter}`);
  const reported: Record<string, [number, number]> = {
    'entitlement-expiry expired': [sumOf('entitlement-expiry', 'expired'), w.expiring.length],
    'erasure-cascade erased': [sumOf('erasure-cascade', 'erased'), w.erasures.length],
    'webhook-health disabled': [sumOf('webhook-health', 'disabled'), w.webhooks.length],
    ...Object.fromEntries(PURGED.map((t) => [`test-purge ${t}`, [sumOf('test-purge', t), testRows[t]] as [number, number]])),
  };
  for (const [what, [got, want]] of Object.entries(reported)) if (got !== want) bad.push(`${what}: ${got} over ${PROCESSES_PER_JOB} runs, ${want} rows`);

  const claims = await c.sql<{ job: string; n: number; open: number }>(
    `SELECT job, count(*)::int AS n, count(*) FILTER (WHERE released_at IS NULL)::int AS open FROM ic8_job_claims GROUP BY job ORDER BY job`);
  const overlaps = await overlappingRuns(c);
  for (const job of JOBS) {
    const row = claims.find((r) => r.job === job);
    if (row?.n !== PROCESSES_PER_JOB || row.open !== 0) bad.push(`${job}: ${row?.n ?? 0} claims, ${row?.open ?? 0} never released`);
    if (overlaps[job]) bad.push(`${job}: ${overlaps[job]} overlapping runs`);
  }

  console.log(`[IC-8] ${JOBS.length} jobs × ${PROCESSES_PER_JOB} CLI processes started at once, all done in ${seconds(elapsed)} s; exit codes ${JSON.stringify(runs.map((r) => r.code))}`);
  console.log(`[IC-8] duplicate job effects: ${tally.duplicates} (missing: ${tally.missing}, unexpected: ${tally.unexpected})`);
  console.log(`[IC-8] entitlement.expired per expired row (${w.expiring.length} rows: ${w.describe}): events ≠ 1: ${w.expiring.filter((id) => expiredEvents.find((e) => e.id === id)?.n !== 1).length}, audit rows ≠ 1: ${w.expiring.filter((id) => expiredAudit.find((e) => e.id === id)?.n !== 1).length}`);
  console.log(`[IC-8] access.revoked: ${accessEvents.reduce((s, e) => s + e.n, 0)} events for ${w.flips.length} flipped (user, app) pairs; ${w.unflipped} expiring paths that leave access in place`);
  console.log(`[IC-8] erasures cascaded: ${erasedAudit.reduce((s, e) => s + e.n, 0)} user.erased for ${w.erasures.length} requests; webhook disables: ${statusChanged.reduce((s, e) => s + e.n, 0)} audit rows, ${disabledMail.reduce((s, e) => s + e.n, 0)} mails for ${w.webhooks.length} subscriptions`);
  console.log(`[IC-8] test-purge rows per run: ${JSON.stringify(resultsOf('test-purge'))} (test rows before: ${JSON.stringify(testRows)})`);
  console.log(`[IC-8] work per run: ${JOBS.map((job) => `${job} ${WORK[job]} ${JSON.stringify(resultsOf(job).map((r) => r[WORK[job]]))}`).join('; ')}`);
  const spans = await c.sql<{ job: string; span: string }>(
    `SELECT job, string_agg(round(extract(epoch FROM claimed_at - $1::timestamptz)::numeric, 2) || '–' || COALESCE(round(extract(epoch FROM released_at - $1::timestamptz)::numeric, 2)::text, 'open'), ' ' ORDER BY claimed_at) AS span
       FROM ic8_job_claims GROUP BY job ORDER BY job`, [new Date(started)]);
  console.log(`[IC-8] process wall times (ms): ${JSON.stringify(runs.map((r) => r.ms))}; runs (s after the spawn): ${spans.map((s) => `${s.job} ${s.span}`).join('; ')}`);
  console.log(`[IC-8] claims per job: ${JSON.stringify(Object.fromEntries(claims.map((r) => [r.job, r.n])))}; overlapping runs of one job: ${Object.values(overlaps).reduce((s, n) => s + n, 0)}`);
  for (const line of bad.slice(0, 20)) console.log(`[IC-8]   ${line}`);
  assert.deepEqual(bad, []);
  assert.equal(tally.duplicates, 0);
});
