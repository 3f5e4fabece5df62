import type { Deps } from '../context.js';

/** Rows a run skips after their work failed before it gives up on the rest. */
const MAX_FAILED_PER_RUN = 100;

/** A run's failed items: each logged as it fails; `end` fails the run naming them, once the others are done. */
function failures(deps: Deps, what: string) {
  const ids: string[] = [];
  let first: unknown = null;
  return {
    ids,
    add(id: string, err: unknown) {
      deps.log.error({ err, [what]: id }, 'job: an item failed; skipped for this run');
      ids.push(id);
      first ??= err;
    },
    end(done: number) {
      if (first) throw new Error(`${ids.length} ${what}(s) failed (${ids.join(', ')}); ${done} done: ${(first as Error).message}`);
    },
  };
}

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
  const failed = failures(deps, what);
  for (;;) {
    let current: string | null = null;
    try {
      const outcome = await step(failed.ids, (id) => { current = id; });
      if (outcome === 'none') break;
      if (outcome === 'done') done++;
    } catch (err) {
      if (current === null || failed.ids.length >= MAX_FAILED_PER_RUN) throw err;
      failed.add(current, err);
    }
  }
  failed.end(done);
  return done;
}

/** Runs `work` on each item of a fixed list; a failing item does not stop the others (as eachSkippingFailures). */
export async function forEachSkippingFailures<T>(deps: Deps, what: string, items: T[], idOf: (item: T) => string, work: (item: T) => Promise<void>): Promise<void> {
  const failed = failures(deps, what);
  for (const item of items) {
    try {
      await work(item);
    } catch (err) {
      failed.add(idOf(item), err);
    }
  }
  failed.end(items.length - failed.ids.length);
}
