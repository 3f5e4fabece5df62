// Kept apart from main.ts so that the CLI reports a failure without loading the service.

/**
 * A failure at start (address in use, database unreachable, DATA_DIR unusable or in use, a bootstrap
 * password the policy refuses) as one clear line on stderr; the stack only at LOG_LEVEL debug or trace.
 */
export function reportFailure(what: string, err: unknown): void {
  const e = err as { message?: string; code?: string; details?: Record<string, unknown> };
  const details = e?.details && Object.keys(e.details).length ? ` ${JSON.stringify(e.details)}` : '';
  console.error(`platform: ${what}: ${e?.message ?? String(err)}${e?.code ? ` (${e.code})` : ''}${details}`);
  if (['debug', 'trace'].includes(process.env.LOG_LEVEL ?? '')) console.error(err);
}
