import type { Mode, Tx } from './types.js';

/** The role request connections run as; row-level security policies apply to it, not to the owner. */
export const APP_ROLE = 'platform_app';

/**
 * Runs `fn` inside a system transaction as a request of `mode` sees the data (that mode's row-level
 * security), then back as the system. For reads that must count what the mode's own endpoints count.
 */
export async function asModeWithin<T>(tx: Tx, mode: Mode, fn: () => Promise<T>): Promise<T> {
  if (tx.scope !== 'system') {
    if (tx.scope !== mode) throw new Error(`asModeWithin(${mode}) on a ${tx.scope} transaction`);
    return fn();
  }
  await tx.exec(`SET LOCAL ROLE ${APP_ROLE}; SELECT set_config('app.test_mode', '${mode === 'test' ? 'on' : 'off'}', true)`);
  const result = await fn();
  // Not on failure: the transaction is aborted then, and rolls back with these settings.
  await tx.exec(`RESET ROLE; SELECT set_config('app.test_mode', '', true)`);
  return result;
}
