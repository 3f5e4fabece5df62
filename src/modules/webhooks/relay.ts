import type { Deps } from '../../context.js';
import { newId } from '../../ids.js';
import { MAX_ATTEMPTS } from './catalog.js';
import { findEventMatches, insertEventDeliveries, lockUnrelayedEvents, markEventsRelayed } from './relay-store.js';

/**
 * The outbox relay: claims committed, unrelayed events with SKIP LOCKED and, in the same
 * transaction, turns each into one pending delivery per matching subscription and marks it relayed.
 * A crash before commit leaves the events unrelayed; after commit the deliveries are durable. So an
 * event is fanned out exactly once, whichever process does it.
 */
export async function relayOutbox(deps: Deps, batchSize = 500): Promise<number> {
  return deps.database.scoped('system').transaction(async (tx) => {
    const events = await lockUnrelayedEvents(tx, batchSize);
    if (events.length === 0) return 0;
    const now = deps.clock.now();
    const ids = events.map((e) => e.id);
    const pairs = await findEventMatches(tx, ids);
    if (pairs.length > 0) {
      await insertEventDeliveries(tx, pairs.map(() => newId('dlv')), pairs, MAX_ATTEMPTS, now);
    }
    await markEventsRelayed(tx, ids, now);
    return events.length;
  });
}
