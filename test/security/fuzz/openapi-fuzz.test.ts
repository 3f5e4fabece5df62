// IV-1 (security catalog 2.6): the OpenAPI-driven fuzzer. For every operation of GET /v1/openapi.json,
// fast-check arbitraries derived from its path, query, header and body schemas produce valid,
// boundary and invalid requests aimed at real fixture rows, sent as a superadmin (and as an API key
// with every permission, an ordinary user, a Tenant owner and anonymously). The oracle (ajv over the
// same document) checks every answer; failures are collected per operation and reported together.
//
// FUZZ_SEED (default below) and FUZZ_RUNS (random runs per operation, after the fixed probes of
// probes.ts) reproduce or widen a run; FUZZ_ONLY is
// a regular expression on "METHOD /path" to rerun a subset; FUZZ_VERBOSE=1 prints per-operation statuses and
// FUZZ_TRACE=1 every request.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { buildTestApp, storageName } from '../../helpers/app.js';
import { setWebhookResolver } from '../../../src/modules/webhooks/targets.js';
import { operationsOf, type Operation } from './operations.js';
import { Oracle } from './oracle.js';
import { Report } from './report.js';
import { probesFor } from './probes.js';
import { requestArb, send, type Planned } from './requests.js';
import { World } from './world.js';

const DEFAULT_SEED = 20260101;
const DEFAULT_RUNS = 12;
const seed = Number(process.env.FUZZ_SEED ?? DEFAULT_SEED);
const runs = Number(process.env.FUZZ_RUNS ?? DEFAULT_RUNS);
const only = process.env.FUZZ_ONLY ? new RegExp(process.env.FUZZ_ONLY) : null;

const CALLER_RISK = /^\/v1\/(users|api-keys|roles|auth\/logout)/;
const HEAL_RISK = /^\/v1\/(applications|organizations|entitlements|users\/\{id\}\/entitlements)/;

/** A per-operation seed, stable when operations are added or reordered. */
function seedOf(key: string): number {
  let h = 0x811c9dc5;
  for (const c of key) h = Math.imul(h ^ c.charCodeAt(0), 0x01000193);
  return (seed ^ h) | 0;
}

async function fuzzOperation(op: Operation, world: World, oracle: Oracle, report: Report, components: any): Promise<void> {
  const run = async (plan: Planned) => {
    try {
      const { sent, res } = await send(world, op, plan);
      const violation = oracle.requestViolation(op, sent);
      const { findings, documented5xx } = oracle.check(op, sent, res);
      if (violation && res.statusCode < 400) findings.push({ kind: 'accepted-invalid', status: res.statusCode, code: 'accepted', detail: `the published schema rejects it (${violation})` });
      report.record(op.key, plan, sent, res, findings, { documented5xx, violation });
      if (process.env.FUZZ_TRACE) console.log(`  ${res.statusCode} ${sent.method} ${sent.url.slice(0, 160)} [${plan.caller}; ${plan.variant} ${plan.where}: ${plan.note.slice(0, 60)}] ${JSON.stringify({ ...sent.headers, authorization: undefined })} ${sent.payload?.slice(0, 200) ?? ''} → ${res.body.slice(0, 200)}`);
      // A fuzzed request may have suspended or demoted the actor: replace it at once, not after the operation.
      if (res.statusCode === 401 && (plan.caller === 'actor' || plan.caller === 'key')) await world.ensureCallers();
    } catch (err) {
      report.record(op.key, plan, null, null, [{ kind: 'harness', status: 0, code: (err as Error).name, detail: String((err as Error).stack ?? err).slice(0, 600) }]);
    }
  };
  // The property never fails: every answer is judged and recorded, so one run shows every failure.
  // The deterministic probes go first (fast-check examples count toward numRuns).
  const { arb, valid } = requestArb(op, world, components);
  const probes = probesFor(op, fc.sample(valid, { seed: seedOf(op.key), numRuns: 1 })[0]).map((p) => [p] as [Planned]);
  await fc.assert(fc.asyncProperty(arb, run), { seed: seedOf(op.key), numRuns: runs + probes.length, examples: probes });
}

test('IV-1 OpenAPI-driven fuzz: no 5xx, the error envelope, documented statuses, 2xx bodies valid, invalid requests refused', async (tc) => {
  const started = Date.now();
  const t = await buildTestApp({}, tc);
  // Webhook targets resolve to a public address without DNS; workers are off, so nothing is dialled.
  setWebhookResolver(t.deps, async () => [{ address: '93.184.216.34', family: 4 }]);
  const doc = (await t.app.inject({ method: 'GET', url: '/v1/openapi.json' })).json();
  const ops = operationsOf(doc).filter((op) => !only || only.test(op.key));
  const oracle = new Oracle(doc);
  const report = new Report();
  const world = new World(t);
  await world.seed();
  console.log(`[IV-1] storage ${storageName}; seed ${seed} (FUZZ_SEED); ${runs} random runs per operation (FUZZ_RUNS) after up to 6 fixed probes; ${ops.length} operations; boot + fixtures ${Date.now() - started} ms`);

  let destructive = false;
  let replacedCallers = 0;
  for (const op of ops) {
    if (op.destructive && !destructive) {
      destructive = true;
      await world.seed(); // fresh rows for the operations that delete or suspend them
    }
    const opStarted = Date.now();
    await fuzzOperation(op, world, oracle, report, doc.components);
    report.ops.get(op.key)!.ms = Date.now() - opStarted;
    // Only writes can hurt the callers or the rows later operations rely on.
    if (op.method !== 'GET' && CALLER_RISK.test(op.path) && (await world.ensureCallers())) replacedCallers++;
    if (op.method !== 'GET' && HEAL_RISK.test(op.path)) await world.heal();
  }

  const total = operationsOf(doc).length;
  console.log(
    `[IV-1] ops covered ${report.opsCovered()} / ${total}; requests ${report.requests}; 5xx ${report.fivexx}; schema violations ${report.schemaViolations}; undocumented statuses ${report.undocumented}`,
  );
  console.log(
    `[IV-1] ops with a 2xx ${report.opsWith((s) => [...s.statuses.keys()].some((c) => c >= 200 && c < 300))} / ${total}; ` +
      `ops past validation ${report.opsWith((s) => s.pastValidation > 0)} / ${total}; variants valid ${report.variants.valid}, boundary ${report.variants.boundary}, invalid ${report.variants.invalid}; ` +
      `schema-invalid requests ${report.invalidSent}, accepted ${report.acceptedInvalid}; documented 501/503 ${report.documented5xx}; ` +
      `fixture requests ${world.setupRequests}; callers replaced ${replacedCallers}; ${((Date.now() - started) / 1000).toFixed(1)} s`,
  );
  if (process.env.FUZZ_VERBOSE) {
    for (const [key, s] of report.ops) console.log(`  ${key}: ${s.requests} requests in ${s.ms} ms, ${[...s.statuses].sort().map(([c, n]) => `${c}×${n}`).join(' ')}`);
  }
  assert.equal(report.failures.length, 0, report.message());
});
