import { randomUUID } from 'node:crypto';
import type { Deps } from '../context.js';
import { addSeconds, stepBoundSeconds } from '../clock.js';
import { ApiError } from '../errors.js';
import type { JobDefinition } from './types.js';
import { refreshDevClock } from '../dev/clock.js';

const TICK_MS = 1000;

export class JobRunner {
  private readonly byName: Map<string, JobDefinition>;
  private timer: NodeJS.Timeout | null = null;
  private ticking: Promise<void> | null = null;
  private stopped = false;

  constructor(
    private readonly deps: Deps,
    jobs: JobDefinition[],
  ) {
    this.byName = new Map(jobs.map((j) => [j.name, j]));
  }

  get names(): string[] {
    return [...this.byName.keys()];
  }

  /** Makes sure every catalogued job has its schedule row. */
  async register(): Promise<void> {
    const now = this.deps.clock.now();
    for (const name of this.byName.keys()) {
      await this.deps.database
        .scoped('system')
        .query('INSERT INTO jobs (name, next_run_at) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING', [name, now]);
    }
  }

  start(): void {
    this.stopped = false;
    const loop = () => {
      if (this.stopped) return;
      this.ticking = this.tick()
        .catch((err) => this.deps.log.error({ err }, 'job tick failed'))
        .finally(() => {
          this.ticking = null;
          if (!this.stopped) this.timer = setTimeout(loop, TICK_MS);
        });
    };
    this.timer = setTimeout(loop, TICK_MS);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    await this.ticking;
  }

  /**
   * Claims and runs every due job, each with SKIP LOCKED so processes never run one twice. Once stop()
   * is called (SIGTERM) the job running finishes and no other is claimed: claimed by a process about to
   * exit, it would be held from every other process until its timeout if the exit cut it short.
   */
  async tick(): Promise<void> {
    await refreshDevClock(this.deps);
    while (!this.stopped) {
      const claim = await this.claimDue();
      if (!claim) return;
      await this.execute(claim.name, claim.token);
    }
  }

  /** Runs one job now (CLI, /_dev/jobs); waits while another process runs it. Resolves when done. */
  async runNow(name: string): Promise<Record<string, unknown>> {
    if (!this.byName.has(name)) throw new ApiError('job_not_found', { details: { job: name, known: this.names } });
    await refreshDevClock(this.deps);
    const deadline = Date.now() + (this.byName.get(name)!.timeoutSeconds + 5) * 1000;
    for (;;) {
      const token = await this.claim(name, true);
      if (token) return this.execute(name, token);
      if (Date.now() > deadline) throw new Error(`job ${name} is held by another process`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  private async claimDue(): Promise<{ name: string; token: string } | null> {
    const now = this.deps.clock.now();
    const token = randomUUID();
    // locked_until is set in the claiming statement (to the longest timeout) so no other process can
    // claim in between; lock() then narrows it to this job's own timeout.
    const longest = Math.max(...[...this.byName.values()].map((j) => j.timeoutSeconds));
    // A job is due at next_run_at, or when its next run lies further ahead than one interval (plus the
    // skew between processes' clocks): only a clock that has since moved back (an NTP step, a restored
    // VM, a process started without the development clock) leaves one there, and waiting it out would
    // stop the job for as long as the clock stepped back (mail, whose links expire in an hour, included).
    const jobs = [...this.byName.values()];
    const { rows } = await this.deps.database.scoped('system').query<{ name: string }>(
      `UPDATE jobs SET lock_token = $3, last_started_at = $1, locked_until = $4
        WHERE name = (SELECT j.name FROM jobs j JOIN unnest($2::text[], $5::int[]) AS c(name, ahead) ON c.name = j.name
                       WHERE (j.next_run_at <= $1 OR j.next_run_at > $1::timestamptz + make_interval(secs => c.ahead))
                         AND (j.locked_until IS NULL OR j.locked_until < $1)
                       ORDER BY j.next_run_at LIMIT 1 FOR UPDATE OF j SKIP LOCKED)
        RETURNING name`,
      [now, jobs.map((j) => j.name), token, addSeconds(now, longest), jobs.map((j) => stepBoundSeconds(j.intervalSeconds))],
    );
    const name = rows[0]?.name;
    if (!name) return null;
    await this.lock(name, token);
    return { name, token };
  }

  private async lock(name: string, token: string): Promise<void> {
    const timeout = this.byName.get(name)!.timeoutSeconds;
    await this.deps.database
      .scoped('system')
      .query('UPDATE jobs SET locked_until = $3 WHERE name = $1 AND lock_token = $2', [name, token, addSeconds(this.deps.clock.now(), timeout)]);
  }

  private async claim(name: string, ignoreSchedule: boolean): Promise<string | null> {
    const now = this.deps.clock.now();
    const token = randomUUID();
    const job = this.byName.get(name)!;
    const { rowCount } = await this.deps.database.scoped('system').query(
      `UPDATE jobs SET lock_token = $2, locked_until = $4, last_started_at = $3
        WHERE name = (SELECT name FROM jobs WHERE name = $1 AND (locked_until IS NULL OR locked_until < $3)
                        ${ignoreSchedule ? '' : 'AND next_run_at <= $3'} FOR UPDATE SKIP LOCKED)`,
      [name, token, now, addSeconds(now, job.timeoutSeconds)],
    );
    return rowCount === 1 ? token : null;
  }

  private async execute(name: string, token: string): Promise<Record<string, unknown>> {
    const job = this.byName.get(name)!;
    const started = Date.now();
    let error: string | null = null;
    let summary: Record<string, unknown> = {};
    try {
      summary = (await job.run(this.deps)) ?? {};
      this.deps.log.debug({ job: name, ms: Date.now() - started, ...summary }, 'job finished');
    } catch (err) {
      error = String((err as Error).message).slice(0, 1024);
      this.deps.log.error({ err, job: name }, 'job failed');
    }
    const now = this.deps.clock.now();
    await this.deps.database.scoped('system').query(
      `UPDATE jobs SET locked_until = NULL, lock_token = NULL, last_finished_at = $3, last_error = $4,
              next_run_at = $5, runs = runs + 1
        WHERE name = $1 AND lock_token = $2`,
      [name, token, now, error, addSeconds(now, job.intervalSeconds)],
    );
    if (error) throw new Error(`job ${name} failed: ${error}`);
    return summary;
  }
}
