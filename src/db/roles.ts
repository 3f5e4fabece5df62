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

/**
 * Runs `fn` inside a request transaction under `mode`'s row-level security, then back under the
 * transaction's own: for the one row a request writes about a subject of the other mode (an audit row
 * about a shared Application, Part A convention 10). A system transaction, or one of that mode, runs
 * `fn` as it is.
 */
export async function inSubjectMode<T>(tx: Tx, mode: Mode, fn: () => Promise<T>): Promise<T> {
  if (tx.scope === 'system' || tx.scope === mode) return fn();
  await tx.exec(`SELECT set_config('app.test_mode', '${mode === 'test' ? 'on' : 'off'}', true)`);
  const result = await fn();
  // Not on failure: the transaction is aborted then, and rolls back with this setting.
  await tx.exec(`SELECT set_config('app.test_mode', '${tx.scope === 'test' ? 'on' : 'off'}', true)`);
  return result;
}
