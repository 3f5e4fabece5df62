import { randomUUID } from 'node:crypto';
import type { Deps } from '../../context.js';
import { refreshDevClock } from '../../dev/clock.js';
import { relayOutbox } from './relay.js';
import { attemptDelivery, claimDue, dueAfterStepBack, type ClaimedDelivery, type ClaimRoom, type Outcome } from './dispatch.js';
import { recordOutcomes } from './outcomes.js';
import { closeWebhookTransport } from './transport.js';

export interface WebhookWorkerOptions {
  /** Sleep when there is nothing to relay or send (ms). */
  idleMs?: number;
  /** Deliveries claimed per statement. */
  batchSize?: number;
  /** Attempts in flight at once in this process; a slow receiver holds one slot for at most 5 s. */
  maxInFlight?: number;
  /** Subscriptions whose allowance is remembered (REMEMBERED_SUBSCRIPTIONS). */
  rememberedSubscriptions?: number;
}

/**
 * Attempts in flight per subscription in this process, so that hanging receivers cannot take every
 * slot from healthy ones (catalog WH-8): a subscription starts with SUBSCRIPTION_START, doubles on
 * each success up to SUBSCRIPTION_MAX, and drops to one after a failed attempt (timeout, error or
 * non-2xx) until one succeeds again. A fast receiver reaches the maximum within a few deliveries;
 * 100 hanging ones hold 200 slots at first and 100 once their first attempts have failed.
 */
const SUBSCRIPTION_START = 2;
const SUBSCRIPTION_MAX = 64;
/**
 * Subscriptions whose allowance a worker remembers, the least recently changed forgotten first (it
 * starts again from SUBSCRIPTION_START). Unbounded, it kept every subscription the process had ever
 * sent to, deleted ones included, and named each one held below the start after a failure in every
 * claim statement (several a second) for the life of the process.
 */
const REMEMBERED_SUBSCRIPTIONS = 1000;

const RELAY_BATCH = 500;
const GATHER_MS = 20;

/**
 * The webhook-delivery job: one pass. Relays the outbox until it is empty, makes retries set before
 * the clock stepped back due (dueAfterStepBack), then claims due
 * deliveries batch by batch, sends each batch in parallel and records it, until nothing is due
 * (or a bounded number of rounds and ~10 s, so a steady stream cannot hold the job runner).
 */
export async function runDeliveryPass(deps: Deps, opts: { batchSize?: number; maxRounds?: number; budgetMs?: number } = {}): Promise<Record<string, number>> {
  const batchSize = opts.batchSize ?? 200;
  const deadline = Date.now() + (opts.budgetMs ?? 10_000);
  let relayed = 0;
  for (let n = RELAY_BATCH; n === RELAY_BATCH; relayed += n) n = await relayOutbox(deps, RELAY_BATCH);
  const stepped = await dueAfterStepBack(deps);
  let attempted = 0;
  let succeeded = 0;
  for (let round = 0; round < (opts.maxRounds ?? 50) && Date.now() < deadline; round++) {
    const token = randomUUID();
    const batch = await claimDue(deps, batchSize, token);
    if (batch.length === 0) break;
    const outcomes = await Promise.all(batch.map((d) => attemptDelivery(deps, d, token)));
    await recordOutcomes(deps, outcomes);
    attempted += outcomes.filter((o) => o.result).length;
    succeeded += outcomes.filter((o) => o.result?.ok).length;
  }
  return { relayed, attempted, succeeded, failed: attempted - succeeded, ...(stepped > 0 ? { stepped } : {}) };
}

/**
 * The continuous delivery worker: relays and claims as long as there is work, sleeping idleMs when
 * there is none. Attempts run concurrently (each with its own 5-second deadline) and finish
 * independently; their results are written in batches. A hanging receiver occupies one slot and
 * never delays anything else. Safe to run in every process: claims use SKIP LOCKED and a lease.
 */
export function startWebhookWorker(deps: Deps, options: WebhookWorkerOptions = {}): { stop(): Promise<void> } {
  const w: WorkerState = {
    deps,
    remembered: options.rememberedSubscriptions ?? REMEMBERED_SUBSCRIPTIONS,
    inFlight: new Set(),
    perSubscription: new Map(),
    allowance: new Map(),
    finished: [],
    stopped: false,
    nudge: null,
    wakeNow: null,
    lastClockRefresh: 0,
  };
  const running = runWorkerLoop(w, {
    idleMs: options.idleMs ?? 100,
    batchSize: options.batchSize ?? 100,
    maxInFlight: options.maxInFlight ?? 512,
  });
  return {
    async stop() {
      w.stopped = true;
      w.wakeNow?.();
      await running;
      await closeWebhookTransport(deps);
    },
  };
}

/** What one worker's loop, its attempts in flight and stop() share. */
interface WorkerState {
  deps: Deps;
  remembered: number;
  inFlight: Set<Promise<void>>;
  perSubscription: Map<string, number>;
  allowance: Map<string, number>;
  finished: Outcome[];
  stopped: boolean;
  nudge: (() => void) | null;
  wakeNow: (() => void) | null;
  lastClockRefresh: number;
}

interface WorkerLimits {
  idleMs: number;
  batchSize: number;
  maxInFlight: number;
}

async function runWorkerLoop(w: WorkerState, limits: WorkerLimits): Promise<void> {
  while (!w.stopped) {
    try {
      const sleepMs = await runWorkerPass(w, limits);
      if (sleepMs !== null) await pause(w, sleepMs);
    } catch (err) {
      w.deps.log.error({ err }, 'webhook worker pass failed');
      await pause(w, 1000);
    }
  }
  await Promise.allSettled([...w.inFlight]);
  await flushOutcomes(w).catch((err) => w.deps.log.error({ err }, 'webhook worker final flush failed'));
}

/** One round: records finished attempts, relays, claims and launches; returns how long to sleep (null: go round at once). */
async function runWorkerPass(w: WorkerState, { idleMs, batchSize, maxInFlight }: WorkerLimits): Promise<number | null> {
  if (w.deps.config.devClock && Date.now() - w.lastClockRefresh > 1000) {
    w.lastClockRefresh = Date.now();
    await refreshDevClock(w.deps);
  }
  await flushOutcomes(w);
  const relayed = await relayOutbox(w.deps, RELAY_BATCH);
  const limit = Math.min(maxInFlight - w.inFlight.size, batchSize);
  let claimed = 0;
  if (limit > 0) {
    const token = randomUUID();
    const batch = await claimDue(w.deps, limit, token, claimRoom(w));
    claimed = batch.length;
    for (const d of batch) launchAttempt(w, d, token);
  }
  if (w.stopped) return null;
  // More is probably waiting: go round at once. Otherwise sleep; results cut the sleep short.
  if (relayed > 0 || (claimed > 0 && claimed === limit)) return null;
  return w.finished.length > 0 || limit <= 0 ? GATHER_MS : idleMs;
}

const allowanceOf = (w: WorkerState, sub: string) => w.allowance.get(sub) ?? SUBSCRIPTION_START;

// Named: the subscriptions with attempts in flight, and those held below the start after a failure;
// any other may start SUBSCRIPTION_START (a fast one regains its allowance as those are in flight).
function claimRoom(w: WorkerState): ClaimRoom {
  const left: Record<string, number> = {};
  for (const [sub, n] of w.perSubscription) left[sub] = Math.max(0, allowanceOf(w, sub) - n);
  for (const [sub, a] of w.allowance) if (a < SUBSCRIPTION_START && !(sub in left)) left[sub] = a;
  return { left, fresh: SUBSCRIPTION_START };
}

// Most recently changed last; beyond the bound the oldest is forgotten.
function rememberAllowance(w: WorkerState, sub: string, a: number): void {
  w.allowance.delete(sub);
  w.allowance.set(sub, a);
  if (w.allowance.size > w.remembered) w.allowance.delete(w.allowance.keys().next().value!);
}

function settleAttempt(w: WorkerState, o: Outcome): void {
  const sub = o.delivery.subscription_id;
  const n = (w.perSubscription.get(sub) ?? 1) - 1;
  if (n > 0) w.perSubscription.set(sub, n);
  else w.perSubscription.delete(sub);
  if (o.result?.ok) rememberAllowance(w, sub, Math.min(allowanceOf(w, sub) * 2, SUBSCRIPTION_MAX));
  else if (o.result) rememberAllowance(w, sub, 1);
}

// Sleeps up to ms; a finished attempt shortens the rest to GATHER_MS so that results are written
// soon, together with the others that finish meanwhile (one transaction per batch, not per attempt).
function pause(w: WorkerState, ms: number): Promise<void> {
  return new Promise<void>((resolve) => {
    const done = () => {
      w.nudge = w.wakeNow = null;
      resolve();
    };
    let timer = setTimeout(done, ms);
    w.nudge = () => {
      clearTimeout(timer);
      w.nudge = null;
      timer = setTimeout(done, Math.min(ms, GATHER_MS));
    };
    w.wakeNow = () => {
      clearTimeout(timer);
      done();
    };
  });
}

async function flushOutcomes(w: WorkerState): Promise<void> {
  if (w.finished.length === 0) return;
  const batch = w.finished;
  w.finished = [];
  await recordOutcomes(w.deps, batch);
}

function launchAttempt(w: WorkerState, d: ClaimedDelivery, token: string): void {
  w.perSubscription.set(d.subscription_id, (w.perSubscription.get(d.subscription_id) ?? 0) + 1);
  const run = attemptDelivery(w.deps, d, token)
    .then((o) => {
      w.finished.push(o);
      settleAttempt(w, o);
      w.nudge?.();
    })
    .catch((err) => {
      settleAttempt(w, { delivery: d, token, result: null });
      w.deps.log.error({ err, webhook_delivery_id: d.id }, 'webhook attempt crashed');
    })
    .finally(() => w.inFlight.delete(run));
  w.inFlight.add(run);
}
