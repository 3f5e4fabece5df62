import { randomUUID } from 'node:crypto';
import type { Deps } from '../../context.js';
import { refreshDevClock } from '../../dev/clock.js';
import { relayOutbox } from './relay.js';
import { attemptDelivery, claimDue, dueAfterStepBack, type ClaimRoom, type Outcome } from './dispatch.js';
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
  const idleMs = options.idleMs ?? 100;
  const batchSize = options.batchSize ?? 100;
  const maxInFlight = options.maxInFlight ?? 512;
  const remembered = options.rememberedSubscriptions ?? REMEMBERED_SUBSCRIPTIONS;
  const inFlight = new Set<Promise<void>>();
  const perSubscription = new Map<string, number>();
  const allowance = new Map<string, number>();
  const allowanceOf = (sub: string) => allowance.get(sub) ?? SUBSCRIPTION_START;
  // Named: the subscriptions with attempts in flight, and those held below the start after a failure;
  // any other may start SUBSCRIPTION_START (a fast one regains its allowance as those are in flight).
  const room = (): ClaimRoom => {
    const left: Record<string, number> = {};
    for (const [sub, n] of perSubscription) left[sub] = Math.max(0, allowanceOf(sub) - n);
    for (const [sub, a] of allowance) if (a < SUBSCRIPTION_START && !(sub in left)) left[sub] = a;
    return { left, fresh: SUBSCRIPTION_START };
  };
  // Most recently changed last; beyond the bound the oldest is forgotten.
  const remember = (sub: string, a: number) => {
    allowance.delete(sub);
    allowance.set(sub, a);
    if (allowance.size > remembered) allowance.delete(allowance.keys().next().value!);
  };
  const settle = (o: Outcome) => {
    const sub = o.delivery.subscription_id;
    const n = (perSubscription.get(sub) ?? 1) - 1;
    if (n > 0) perSubscription.set(sub, n);
    else perSubscription.delete(sub);
    if (o.result?.ok) remember(sub, Math.min(allowanceOf(sub) * 2, SUBSCRIPTION_MAX));
    else if (o.result) remember(sub, 1);
  };
  let finished: Outcome[] = [];
  let stopped = false;
  let nudge: (() => void) | null = null;
  let wakeNow: (() => void) | null = null;
  let lastClockRefresh = 0;

  // Sleeps up to ms; a finished attempt shortens the rest to GATHER_MS so that results are written
  // soon, together with the others that finish meanwhile (one transaction per batch, not per attempt).
  const pause = (ms: number) =>
    new Promise<void>((resolve) => {
      const done = () => {
        nudge = wakeNow = null;
        resolve();
      };
      let timer = setTimeout(done, ms);
      nudge = () => {
        clearTimeout(timer);
        nudge = null;
        timer = setTimeout(done, Math.min(ms, GATHER_MS));
      };
      wakeNow = () => {
        clearTimeout(timer);
        done();
      };
    });

  const flush = async () => {
    if (finished.length === 0) return;
    const batch = finished;
    finished = [];
    await recordOutcomes(deps, batch);
  };

  const launch = (d: Awaited<ReturnType<typeof claimDue>>[number], token: string) => {
    perSubscription.set(d.subscription_id, (perSubscription.get(d.subscription_id) ?? 0) + 1);
    const run = attemptDelivery(deps, d, token)
      .then((o) => {
        finished.push(o);
        settle(o);
        nudge?.();
      })
      .catch((err) => {
        settle({ delivery: d, token, result: null });
        deps.log.error({ err, webhook_delivery_id: d.id }, 'webhook attempt crashed');
      })
      .finally(() => inFlight.delete(run));
    inFlight.add(run);
  };

  const loop = async () => {
    while (!stopped) {
      try {
        if (deps.config.devClock && Date.now() - lastClockRefresh > 1000) {
          lastClockRefresh = Date.now();
          await refreshDevClock(deps);
        }
        await flush();
        const relayed = await relayOutbox(deps, RELAY_BATCH);
        const limit = Math.min(maxInFlight - inFlight.size, batchSize);
        let claimed = 0;
        if (limit > 0) {
          const token = randomUUID();
          const batch = await claimDue(deps, limit, token, room());
          claimed = batch.length;
          for (const d of batch) launch(d, token);
        }
        if (stopped) break;
        // More is probably waiting: go round at once. Otherwise sleep; results cut the sleep short.
        if (relayed > 0 || (claimed > 0 && claimed === limit)) continue;
        await pause(finished.length > 0 || limit <= 0 ? GATHER_MS : idleMs);
      } catch (err) {
        deps.log.error({ err }, 'webhook worker pass failed');
        await pause(1000);
      }
    }
    await Promise.allSettled([...inFlight]);
    await flush().catch((err) => deps.log.error({ err }, 'webhook worker final flush failed'));
  };

  const running = loop();
  return {
    async stop() {
      stopped = true;
      wakeNow?.();
      await running;
      await closeWebhookTransport(deps);
    },
  };
}
