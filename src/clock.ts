// The one clock. Every timestamp the service writes or compares comes from clock.now().
// With DEV_CLOCK=1 an offset stored in the database moves it for every process (see dev/).
export interface Clock {
  now(): Date;
}

export class SystemClock implements Clock {
  /** Milliseconds added to the wall clock; only ever non-zero with DEV_CLOCK or in tests. */
  offsetMs = 0;

  now(): Date {
    return new Date(Date.now() + this.offsetMs);
  }

  advance(seconds: number): void {
    this.offsetMs += seconds * 1000;
  }
}

/**
 * How far apart the clocks of the processes sharing one database are assumed to be at most (NTP keeps
 * them within tens of milliseconds; a VM pause or a bad time source gives seconds). Leases outlast
 * their work by far more; see docs/decisions.md, "Clocks of several processes".
 */
export const MAX_CLOCK_SKEW_SECONDS = 10;

export const toUnixSeconds = (d: Date): number => Math.floor(d.getTime() / 1000);
export const addSeconds = (d: Date, s: number): Date => new Date(d.getTime() + s * 1000);

/**
 * Seconds ahead of now beyond which an instant set `seconds` ahead was set before the clock stepped
 * back: no process whose clock is within MAX_CLOCK_SKEW_SECONDS of this one could have set it later.
 * Leases, locks and schedules found beyond it are treated as set now (docs/decisions.md, "Clocks of
 * several processes").
 */
export const stepBoundSeconds = (seconds: number): number => seconds + MAX_CLOCK_SKEW_SECONDS;
export const beyondStep = (now: Date, seconds: number): Date => addSeconds(now, stepBoundSeconds(seconds));
