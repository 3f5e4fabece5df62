import type { Deps } from '../context.js';
import { SystemClock } from '../clock.js';

/**
 * With DEV_CLOCK=1 the clock offset lives in the database so that moving it moves every process.
 * Each request and job tick reads it first; without the flag nothing is read.
 */
export async function refreshDevClock(deps: Deps): Promise<void> {
  if (!deps.config.devClock || !(deps.clock instanceof SystemClock)) return;
  const { rows } = await deps.database.scoped('system').query<{ offset_ms: number }>('SELECT offset_ms FROM dev_clock');
  deps.clock.offsetMs = Number(rows[0]?.offset_ms ?? 0);
}

export async function advanceDevClock(deps: Deps, seconds: number): Promise<Date> {
  const { rows } = await deps.database
    .scoped('system')
    .query<{ offset_ms: number }>('UPDATE dev_clock SET offset_ms = offset_ms + $1 RETURNING offset_ms', [Math.round(seconds * 1000)]);
  if (deps.clock instanceof SystemClock) deps.clock.offsetMs = Number(rows[0].offset_ms);
  return deps.clock.now();
}
