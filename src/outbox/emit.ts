import type { Ctx } from '../context.js';
import type { Tx } from '../db/types.js';
import { newId } from '../ids.js';

export interface OutboundEvent {
  type: string;
  applicationId?: string | null;
  data: Record<string, unknown>;
}

/**
 * Writes a webhook event to the transactional outbox in the mutation's transaction. Nothing leaves
 * the process here; the delivery relay picks committed rows up (claimed with SKIP LOCKED).
 */
export async function emit(tx: Tx, ctx: Ctx, event: OutboundEvent): Promise<string> {
  const id = newId('wev');
  await tx.query(
    `INSERT INTO outbox_events (id, type, application_id, test_mode, data, created_at) VALUES ($1, $2, $3, $4, $5, $6)`,
    [id, event.type, event.applicationId ?? null, ctx.mode === 'test', JSON.stringify(event.data), ctx.now],
  );
  return id;
}

/** Many events in one statement (an organization-wide change can flip thousands of pairs). */
export async function emitMany(tx: Tx, ctx: Ctx, events: OutboundEvent[]): Promise<void> {
  if (events.length === 0) return;
  await tx.query(
    `INSERT INTO outbox_events (id, type, application_id, test_mode, data, created_at)
     SELECT id, type, app, $4, data::jsonb, $5 FROM unnest($1::text[], $2::text[], $3::text[], $6::text[]) AS t(id, type, app, data)`,
    [events.map(() => newId('wev')), events.map((e) => e.type), events.map((e) => e.applicationId ?? null), ctx.mode === 'test', ctx.now, events.map((e) => JSON.stringify(e.data))],
  );
}
