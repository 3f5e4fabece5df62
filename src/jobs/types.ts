import type { Deps } from '../context.js';

/** A periodic job: at most one run at a time across every process sharing the database. */
export interface JobDefinition {
  name: string;
  intervalSeconds: number;
  /** A run's claim lapses after this; another process may then run it again. */
  timeoutSeconds: number;
  run(deps: Deps): Promise<Record<string, unknown> | void>;
}
