import { Type } from '@sinclair/typebox';
import type { App } from '../types.js';
import type { Deps } from '../../context.js';
import { advanceDevClock } from '../../dev/clock.js';

const Now = Type.Object({ now: Type.String({ format: 'date-time' }) });

/** Development clock and job endpoints (operations.md); registered only with DEV_CLOCK=1. */
export function devRoutes(app: App, deps: Deps): void {
  app.get('/_dev/clock', {
    schema: { hide: true, response: { 200: Now } },
    config: { meta: { auth: 'none' } },
    handler: async () => ({ now: deps.clock.now().toISOString() }),
  });
  app.post('/_dev/clock', {
    schema: {
      hide: true,
      body: Type.Object({ advance_seconds: Type.Number({ minimum: 0, maximum: 10 * 365 * 86400 }) }, { additionalProperties: false }),
      response: { 200: Now },
    },
    config: { meta: { auth: 'none' } },
    handler: async (request) => ({ now: (await advanceDevClock(deps, request.body.advance_seconds)).toISOString() }),
  });
  app.post('/_dev/jobs/:job', {
    schema: {
      hide: true,
      params: Type.Object({ job: Type.String({ maxLength: 64 }) }),
      response: { 200: Type.Object({ job: Type.String(), result: Type.Object({}, { additionalProperties: true }) }) },
    },
    config: { meta: { auth: 'none' } },
    handler: async (request) => ({ job: request.params.job, result: await deps.jobs.runNow(request.params.job) }),
  });
}
