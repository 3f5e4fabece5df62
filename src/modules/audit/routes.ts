import type { App } from '../types.js';
import type { Deps } from '../../context.js';
import { ctxOf } from '../../http/gate.js';
import { ListOf } from '../../http/schemas.js';
import { AuditEvent, AuditIdParam, AuditQuery } from './schemas.js';
import { getAuditEvent, listAuditEvents } from './service.js';

const tags = ['Audit'];
/** The earliest timestamp the caller can read (the hot window of Part B Limits). */
export const HOT_WINDOW_HEADER = 'audit-hot-window-start';
const hotWindow = { 'Audit-Hot-Window-Start': 'The earliest timestamp this caller can read (its hot window); older events are neither listed nor found.' };

// Read-only by design: the log is written only as a side effect of changes, in their transactions.
export function auditRoutes(app: App, deps: Deps): void {
  app.get('/v1/audit-events', {
    schema: { summary: 'Audit events within the caller\'s hot window, newest first', tags, querystring: AuditQuery, response: { 200: ListOf(AuditEvent) } },
    config: { meta: { auth: 'any', errors: ['forbidden', 'user_token_required'], headers: hotWindow } },
    handler: async (request, reply) => {
      const { page, windowStart } = await listAuditEvents(ctxOf(deps, request), request.query);
      reply.header(HOT_WINDOW_HEADER, windowStart.toISOString());
      return page;
    },
  });
  app.get('/v1/audit-events/:id', {
    schema: { summary: 'Fetch one audit event', tags, params: AuditIdParam, response: { 200: AuditEvent } },
    config: { meta: { auth: 'any', errors: ['audit_event_not_found'], headers: hotWindow } },
    handler: async (request, reply) => {
      const { event, windowStart } = await getAuditEvent(ctxOf(deps, request), request.params.id);
      reply.header(HOT_WINDOW_HEADER, windowStart.toISOString());
      return event;
    },
  });
}
