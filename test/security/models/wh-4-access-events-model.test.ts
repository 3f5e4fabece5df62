// WH-4 (security catalog 2.8): model-based derived events. fast-check generates command sequences
// over a universe of 3 users × 2 Applications × 1–2 Organizations (grants, status moves, terms,
// expiries and scheduled starts with clock moves and the jobs, org-wide grants with member scopes,
// memberships, user suspend / reactivate / delete / restore, Organization suspension). After every
// command the access.granted / access.revoked rows newly written to the outbox must equal the
// flips of the reference model (access-model.ts, written from Part B, not from src/access): same
// pairs, same reasons, same entitlement_status, and none when another path remains.
//
// Phase 1 runs up to MODEL_RUNS sequences (MODEL_BUDGET_S caps the time) and counts mismatching
// commands: the catalog figure. If any, phase 2 replays, per kind of disagreement, its first failing
// run (same seed, fast-check path) and lets fast-check shrink it, then prints the shrunk sequence.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { buildTestApp, storageName, type TestApp } from '../../helpers/app.js';
import { createUser } from '../../helpers/fixtures.js';
import { call, sql } from '../../helpers/http.js';
import { createOrg, newApp, platformKey } from '../../access/support.js';
import { systemCtx } from '../../../src/context.js';
import { issueSession } from '../../../src/modules/auth/sessions.js';
import { AccessModel, eventKey, type AccessEvent } from './access-model.js';
import { sequenceArb, type Sequence } from './wh-4-commands.js';
import { plan, type Driver, type Fixture } from './wh-4-plan.js';

const SEED = Number(process.env.MODEL_SEED ?? 20260401);
const RUNS = Number(process.env.MODEL_RUNS ?? 500);
// Time: the whole file (boot included) aims at FILE_S seconds; phase 1 gets what boot and the shrink
// reserve leave (at least 10 s), or exactly MODEL_BUDGET_S when set. Node runs each file in its own
// process, so process.uptime() is the file's age.
const FILE_S = Number(process.env.MODEL_FILE_BUDGET_S ?? 75);
const SHRINK_MS = Number(process.env.MODEL_SHRINK_S ?? 15) * 1000;
const phaseOneMs = () => (process.env.MODEL_BUDGET_S ? Number(process.env.MODEL_BUDGET_S) * 1000 : Math.max(10_000, (FILE_S - process.uptime()) * 1000 - SHRINK_MS - 5000));
const SHRINK_KINDS = Number(process.env.MODEL_SHRINK_KINDS ?? 3);
const MAX_COMMANDS = 14;

let t: TestApp;
let admin: string;
/** The service clock, frozen so that the model and the service agree on every instant. */
const clock = { ms: 0 };

before(async () => {
  t = await buildTestApp();
  admin = await platformKey(t);
  clock.ms = t.clock.now().getTime();
  t.clock.now = () => new Date(clock.ms);
});
after(() => t.close());

const driver: Driver = {
  call: (method, url, body, headers) => call(t, method, url, admin, body, headers),
  async tokenCall(userId, method, url, body) {
    const ctx = systemCtx(t.deps, 'live');
    const auth = await ctx.db.transaction((tx) => issueSession(tx, { ...ctx, db: tx }, { id: userId, email_verified: true, test_mode: false }, ['pwd']));
    return call(t, method, url, auth.access_token, body);
  },
  setClock: (ms) => {
    clock.ms = ms;
  },
  async runJobs() {
    await t.deps.jobs.runNow('entitlement-expiry');
    await t.deps.jobs.runNow('scheduled-starts');
  },
};

/** Applications are shared by a few sequences (fresh users keep every pair new) to save setup time. */
const APPS_EVERY = 25;
let apps: { ids: string[]; uses: number } = { ids: [], uses: APPS_EVERY };

async function fixture(seq: Sequence): Promise<Fixture> {
  // Past every boundary of earlier sequences, whose rows the jobs then settle before this one starts.
  clock.ms += 6 * 3600_000;
  await driver.runJobs();
  if (apps.uses >= APPS_EVERY) apps = { ids: [(await newApp(t, admin)).id, (await newApp(t, admin)).id], uses: 0 };
  apps.uses++;
  const users = [];
  for (const status of seq.users) users.push(await createUser(t, { status }));
  const orgs: string[] = [];
  for (let i = 0; i < seq.orgs; i++) orgs.push(await createOrg(t, []));
  return { users: users.map((u) => ({ id: u.id, email: u.email })), apps: apps.ids, orgs };
}

interface Mismatch {
  command: number;
  label: string;
  expected: string[];
  actual: string[];
  kinds: string[];
}

interface Outcome {
  commands: number;
  requests: number;
  events: number;
  mismatches: Mismatch[];
  /** A status the model did not predict: the model no longer knows the state, so the sequence stops. */
  statusMismatch: { kind: string; text: string; command: number } | null;
  trace: string[];
}

const strip = (e: string) => e.replace(/\|u-?\d+\|a-?\d+/, '');

/** Runs one sequence on fresh fixtures and reports disagreements; stops early once `stopAt` is seen. */
async function runSequence(seq: Sequence, stopAt?: string): Promise<Outcome> {
  const fx = await fixture(seq);
  const model = new AccessModel(seq.users, seq.orgs, fx.apps.length, clock.ms);
  const userIndex = new Map(fx.users.map((u, i) => [u.id, i]));
  const appIndex = new Map(fx.apps.map((a, i) => [a, i]));
  const seen = new Set<string>();
  const out: Outcome = { commands: 0, requests: 0, events: 0, mismatches: [], statusMismatch: null, trace: [] };
  const newEvents = async (): Promise<string[]> => {
    const rows = await sql<{ id: string; type: AccessEvent['type']; data: any }>(
      t,
      `SELECT id, type, data FROM outbox_events WHERE type IN ('access.granted', 'access.revoked') AND data->>'user_id' = ANY($1::text[]) ORDER BY seq`,
      [fx.users.map((u) => u.id)],
    );
    const fresh = rows.filter((r) => !seen.has(r.id));
    for (const r of fresh) seen.add(r.id);
    return fresh
      .map((r) => eventKey({ type: r.type, user: userIndex.get(r.data.user_id)!, app: appIndex.get(r.data.application_id) ?? -1, reason: r.data.reason, entitlement_status: r.data.entitlement_status }))
      .sort();
  };
  for (const [i, cmd] of seq.cmds.entries()) {
    for (const step of plan(cmd, i, model, fx, driver)) {
      const res = await step.run();
      if (res) out.requests++;
      if (step.expect !== null && res!.statusCode !== step.expect) {
        out.statusMismatch = { kind: `${cmd.k}: status ${res!.statusCode} where the model expects ${step.expect}`, text: `#${i} ${step.label}: ${res!.body.slice(0, 300)}`, command: i };
        out.trace.push(`#${i} ${step.label} → ${res!.statusCode} (model expected ${step.expect})`);
        return out;
      }
      step.apply(res);
      const expected = model.flips(step.reason).map(eventKey).sort();
      const actual = await newEvents();
      out.events += actual.length;
      out.trace.push(`#${i} ${step.label}${res ? ` → ${res.statusCode}` : ''}${actual.length ? `  events: ${actual.join(', ')}` : ''}`);
      if (expected.join() === actual.join()) continue;
      const kinds = [
        ...expected.filter((e) => !actual.includes(e)).map((e) => `${cmd.k}: missing ${strip(e)}`),
        ...actual.filter((e) => !expected.includes(e)).map((e) => `${cmd.k}: extra ${strip(e)}`),
      ];
      out.mismatches.push({ command: i, label: step.label, expected, actual, kinds });
      if (stopAt && kinds.includes(stopAt)) return out;
    }
    out.commands++;
  }
  return out;
}

const kindsOf = (o: Outcome) => [...new Set([...o.mismatches.flatMap((m) => m.kinds), ...(o.statusMismatch ? [o.statusMismatch.kind] : [])])];

const describe = (seq: Sequence) =>
  `users ${JSON.stringify(seq.users)}, orgs ${seq.orgs}, commands:\n${seq.cmds.map((c, i) => `    #${i} ${JSON.stringify(c)}`).join('\n')}`;

test('WH-4 derived access events equal the reference model flips over generated command sequences', { timeout: 900_000 }, async () => {
  const started = Date.now();
  const BUDGET_MS = phaseOneMs();
  console.log(`[WH-4] seed=${SEED} runs<=${RUNS} budget=${(BUDGET_MS / 1000).toFixed(0)}s max_commands=${MAX_COMMANDS} storage=${storageName} (MODEL_SEED / MODEL_RUNS / MODEL_BUDGET_S / MODEL_FILE_BUDGET_S)`);
  const totals = { sequences: 0, commands: 0, requests: 0, events: 0, eventMismatches: 0, statusMismatches: 0 };
  /** Per kind of disagreement: how many sequences showed it, and the first run (index, sequence). */
  const kinds = new Map<string, { count: number; run: number; seq: Sequence }>();
  // Phase 1: every sequence runs to its end; disagreements are counted, never thrown. Runs past the
  // time budget are skipped (a predicate that returns at once; nothing runs in the background).
  let run = -1;
  await fc.assert(
    fc.asyncProperty(sequenceArb(MAX_COMMANDS), async (seq) => {
      run++;
      if (Date.now() - started > BUDGET_MS) return true;
      totals.sequences++;
      const o = await runSequence(seq);
      totals.commands += o.commands;
      totals.requests += o.requests;
      totals.events += o.events;
      totals.eventMismatches += o.mismatches.length;
      if (o.statusMismatch) totals.statusMismatches++;
      for (const k of kindsOf(o)) {
        const entry = kinds.get(k) ?? { count: 0, run, seq };
        entry.count++;
        kinds.set(k, entry);
      }
      return true;
    }),
    { seed: SEED, numRuns: RUNS },
  );
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  console.log(`[WH-4] event mismatches over ${totals.sequences} sequences: ${totals.eventMismatches}`);
  console.log(`[WH-4] ${totals.commands} commands, ${totals.requests} requests, ${totals.events} access events, ${totals.statusMismatches} unexpected statuses, ${seconds} s`);
  for (const [k, v] of [...kinds].sort((x, y) => y[1].count - x[1].count)) console.log(`[WH-4]   ${v.count} sequence(s): ${k}`);
  if (kinds.size === 0) return;

  // Phase 2: per kind (first seen first), replay its first failing run and let fast-check shrink it.
  const chosen = [...kinds].sort((x, y) => x[1].run - y[1].run).slice(0, SHRINK_KINDS);
  for (const [kind, first] of chosen) {
    // Past 60% of its share of the shrink budget every candidate passes at once, so shrinking ends.
    const share = SHRINK_MS / chosen.length;
    const deadline = Date.now() + 0.6 * share;
    let interrupted = false;
    const details = await fc.check(
      fc.asyncProperty(sequenceArb(MAX_COMMANDS), async (seq) => {
        if (Date.now() > deadline) return (interrupted = true);
        return !kindsOf(await runSequence(seq, kind)).includes(kind);
      }),
      { seed: SEED, numRuns: RUNS, path: String(first.run) },
    );
    let counterexample = details.counterexample?.[0] ?? first.seq;
    let replay = await runSequence(counterexample, kind);
    // Commands after the failing one cannot matter (the run stops there): cut them, then drop any
    // single command whose removal keeps the failure, while this kind's budget lasts.
    const failing = (o: Outcome) => (o.statusMismatch?.kind === kind ? o.statusMismatch.command : o.mismatches.find((m) => m.kinds.includes(kind))?.command);
    const cut = (seq: Sequence, o: Outcome) => ({ ...seq, cmds: seq.cmds.slice(0, (failing(o) ?? seq.cmds.length - 1) + 1) });
    counterexample = cut(counterexample, replay);
    for (let i = counterexample.cmds.length - 2; i >= 0 && Date.now() < deadline + 0.4 * share; i--) {
      const candidate = { ...counterexample, cmds: counterexample.cmds.filter((_, j) => j !== i) };
      const o = await runSequence(candidate, kind);
      if (kindsOf(o).includes(kind)) counterexample = cut(candidate, o);
    }
    replay = await runSequence(counterexample, kind);
    const how = details.counterexample ? `fast-check path ${details.counterexamplePath}, ${details.numShrinks} shrinks${interrupted ? ' (stopped at the time limit)' : ''}, then trimmed` : 'the time limit came before fast-check replayed it; trimmed';
    console.log(`[WH-4] ── ${kind}\n[WH-4] shrunk counterexample (MODEL_SEED=${SEED}; ${how}):\n  ${describe(counterexample)}`);
    console.log(`[WH-4] replay:\n  ${replay.trace.join('\n  ')}`);
    for (const mm of replay.mismatches) console.log(`[WH-4] mismatch at #${mm.command} ${mm.label}: expected [${mm.expected.join(', ')}] got [${mm.actual.join(', ')}]`);
    if (replay.statusMismatch) console.log(`[WH-4] ${replay.statusMismatch.kind}: ${replay.statusMismatch.text}`);
  }
  assert.fail(`${totals.eventMismatches} event mismatches and ${totals.statusMismatches} unexpected statuses over ${totals.sequences} sequences (seed ${SEED}): ${[...kinds.keys()].join('; ')}`);
});
