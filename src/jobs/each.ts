import type { Deps } from '../context.js';

/** Rows a run skips after their work failed before it gives up on the rest. */
const MAX_FAILED_PER_RUN = 100;

/**
 * Runs `step` until it reports 'none'. Each step picks the next due item (oldest first), leaving out
 * the ids in `skip`, names it with `picked`, and works on it in a transaction of its own. An item whose
 * work fails (a data fault) is logged and skipped for the rest of the run, so it cannot hold back every
 * item due after it run after run; once the others are done the run fails, naming the items. A failure
 * before an item was picked (the database unreachable) ends the run at once.
 */
export async function eachSkippingFailures(
  deps: Deps,
  what: string,
  step: (skip: string[], picked: (id: string) => void) => Promise<'none' | 'done' | 'gone'>,
): Promise<number> {
  let done = 0;
  const failed: string[] = [];
  let firstError: unknown = null;
  for (;;) {
    let current: string | null = null;
    try {
      const outcome = await step(failed, (id) => { current = id; });
      if (outcome === 'none') break;
      if (outcome === 'done') done++;
    } catch (err) {
      if (current === null || failed.length >= MAX_FAILED_PER_RUN) throw err;
      deps.log.error({ err, [what]: current }, 'job: an item failed; skipped for this run');
      failed.push(current);
      firstError ??= err;
    }
  }
  if (firstError) throw runFailed(what, failed, done, firstError);
  return done;
}

/** Runs `work` on each item of a fixed list; a failing item does not stop the others (as eachSkippingFailures). */
export async function forEachSkippingFailures<T>(deps: Deps, what: string, items: T[], idOf: (item: T) => string, work: (item: T) => Promise<void>): Promise<void> {
  const failed: string[] = [];
  let firstError: unknown = null;
  for (const item of items) {
    try {
      await work(item);
    } catch (err) {
      deps.log.error({ err, [what]: idOf(item) }, 'job: an item failed; skipped for this run');
      failed.push(idOf(item));
      firstError ??= err;
    }
  }
  if (firstError) throw runFailed(what, failed, items.length - failed.length, firstError);
}

const runFailed = (what: string, failed: string[], done: number, err: unknown) =>
  new Error(`${failed.length} ${what}(s) failed (${failed.join(', ')}); ${done} done: ${(err as Error).message}`);
