import type { Ctx } from '../../context.js';
import { hasPermission } from '../../context.js';
import { addSeconds } from '../../clock.js';
import { ApiError } from '../../errors.js';
import { keyset, toPage } from '../../http/pagination.js';
import type { AuditEvent, AuditQuery } from './schemas.js';
import { ENTERPRISE_HOT_WINDOW_DAYS } from '../tenancy/plans.js';
import {
  applicationPlan, auditListFilter, eventsAboutUser, eventsOfApplication, eventsOfTenant, everyEvent, findAuditRow, listAuditRows, ownedTenants,
  tenantsOfEvent, toAuditEvent, windowDaysOf, type AuditRow, type AuditRowFilter,
} from './store.js';

/** Hot window of a user reading events about themselves (and of an app key whose Tenant is unknown). */
export const PLATFORM_HOT_WINDOW_DAYS = 365;
/**
 * Platform audit.view "sees everything": the longest window any Tenant keeps (Enterprise), so no
 * event a Tenant owner can read is hidden from it.
 */
export const PLATFORM_VIEWER_HOT_WINDOW_DAYS = ENTERPRISE_HOT_WINDOW_DAYS;

/** How the caller may read the log: which rows and how far back. */
interface AuditView {
  /** Its rows (a store filter): every event for platform audit.view. */
  condition: AuditRowFilter;
  windowDays: number;
}

const appKeyOf = (ctx: Ctx) => (ctx.actor.type === 'api_key' && ctx.actor.scope !== 'platform' ? ctx.actor.scope : null);
const platformViewer = (ctx: Ctx) => hasPermission(ctx.actor, 'audit.view') && !appKeyOf(ctx);
const forbidden = () =>
  new ApiError('forbidden', { message: 'Reading the audit log needs audit.view, target_user_id=me, or tenant_id of a Tenant you own.', details: { required_permission: 'audit.view' } });

export const windowStart = (ctx: Ctx, days: number): Date => addSeconds(ctx.now, -days * 86400);

/**
 * Part B visibility for the list: platform audit.view sees everything; an app-scoped key with
 * audit.view only its Application (forced filter); a Tenant owner passing tenant_id of their
 * Tenant that Tenant's events; any user passing target_user_id=me events about themselves; else 403.
 */
async function listView(ctx: Ctx, q: AuditQuery): Promise<AuditView> {
  // `me` names the caller as a User (convention 8): an API key sending it gets 400, as on user paths.
  if (q.target_user_id === 'me' && ctx.actor.type !== 'user') throw new ApiError('user_token_required', { message: 'target_user_id=me needs a User token.' });
  if (platformViewer(ctx)) return { condition: everyEvent, windowDays: PLATFORM_VIEWER_HOT_WINDOW_DAYS };
  const app = appKeyOf(ctx);
  if (app && hasPermission(ctx.actor, 'audit.view')) {
    const plan = await applicationPlan(ctx.db, app);
    return { condition: eventsOfApplication(app), windowDays: plan ? windowDaysOf(plan) : PLATFORM_HOT_WINDOW_DAYS };
  }
  if (ctx.actor.type !== 'user') throw forbidden();
  const userId = ctx.actor.userId;
  const self: AuditView | null = q.target_user_id === 'me' || q.target_user_id === userId
    ? { condition: eventsAboutUser(userId), windowDays: PLATFORM_HOT_WINDOW_DAYS }
    : null;
  if (q.tenant_id) {
    const [owned] = await ownedTenants(ctx.db, userId, [q.tenant_id]);
    if (owned) {
      const tenant: AuditView = { condition: eventsOfTenant(owned.id), windowDays: windowDaysOf(owned.plan) };
      // Filtered on both, every row listed is the caller's under either view (both filters are applied
      // below): the longer window applies, as GET by id reads under the longest, so adding tenant_id to
      // target_user_id=me only narrows the list.
      return self && self.windowDays > tenant.windowDays ? self : tenant;
    }
  }
  if (self) return self;
  throw forbidden();
}

function resolveTargetUser(ctx: Ctx, value: string): string {
  if (value !== 'me') return value;
  if (ctx.actor.type === 'user') return ctx.actor.userId;
  throw new ApiError('user_token_required', { message: 'target_user_id=me needs a User token.' });
}

/** GET /v1/audit-events: newest first, within the caller's hot window (returned for the header). */
export async function listAuditEvents(ctx: Ctx, q: AuditQuery) {
  const view = await listView(ctx, q);
  const start = windowStart(ctx, view.windowDays);
  const targetUserId = q.target_user_id ? resolveTargetUser(ctx, q.target_user_id) : undefined;
  const filter = auditListFilter(start, view.condition, q, targetUserId);
  const ks = keyset(q, filter.params.length + 1, 'e');
  const rows = await listAuditRows(ctx.db, filter, ks);
  return { page: toPage(rows, ks.limit, toAuditEvent), windowStart: start };
}

/**
 * GET /v1/audit-events/{id}: the same readers, judged on the event itself; missing, not visible
 * and outside the caller's hot window (archived) are all 404 audit_event_not_found.
 */
export async function getAuditEvent(ctx: Ctx, id: string): Promise<{ event: AuditEvent; windowStart: Date }> {
  const row = await findAuditRow(ctx.db, id);
  const days = row ? await eventWindow(ctx, row) : null;
  if (!row || days === null) throw new ApiError('audit_event_not_found');
  const start = windowStart(ctx, days);
  if (row.created_at < start) throw new ApiError('audit_event_not_found');
  return { event: toAuditEvent(row), windowStart: start };
}

/** The longest hot window under which the caller may read this event, or null if none. */
async function eventWindow(ctx: Ctx, row: AuditRow): Promise<number | null> {
  if (platformViewer(ctx)) return PLATFORM_VIEWER_HOT_WINDOW_DAYS;
  const app = appKeyOf(ctx);
  if (app) {
    if (!hasPermission(ctx.actor, 'audit.view') || row.application_id !== app) return null;
    const plan = await applicationPlan(ctx.db, app);
    return plan ? windowDaysOf(plan) : PLATFORM_HOT_WINDOW_DAYS;
  }
  if (ctx.actor.type !== 'user') return null;
  const windows: number[] = [];
  if (row.target_user_id === ctx.actor.userId) windows.push(PLATFORM_HOT_WINDOW_DAYS);
  for (const t of await ownedTenants(ctx.db, ctx.actor.userId, await tenantsOfEvent(ctx.db, row))) windows.push(windowDaysOf(t.plan));
  return windows.length ? Math.max(...windows) : null;
}

