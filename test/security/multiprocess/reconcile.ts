// FT-1 reconciliation: what the acknowledged writes must have produced (a model), against what the
// audit log, the outbox and the webhook receiver hold. An event is named by a signature such as
// `user.suspended|usr_…` or `access.granted|usr_…|app_…`; counts are compared per signature.
import type { Cluster } from './cluster.js';
import type { Receiver } from './receiver.js';

/** Expected counts per signature: audit actions and webhook events (outbox rows and deliveries). */
export interface Signatures {
  audit: Map<string, number>;
  events: Map<string, number>;
}

const add = (m: Map<string, number>, sig: string) => m.set(sig, (m.get(sig) ?? 0) + 1);

export const AUDIT_ACTIONS = ['user.created', 'entitlement.granted', 'role.assigned', 'user.suspended', 'user.reactivated'];
export const EVENT_TYPES = ['entitlement.granted', 'role.assigned', 'user.suspended', 'user.reactivated', 'access.granted', 'access.revoked'];

/** A user of the load script and the events each acknowledged step of it implies. */
export class ModelUser {
  id: string | null = null;
  status: 'active' | 'suspended' = 'active';
  private readonly apps: string[] = [];

  constructor(readonly email: string) {}

  acknowledge(kind: string, body: Record<string, any>, response: Record<string, any>, expected: Signatures): void {
    const { audit, events } = expected;
    switch (kind) {
      case 'create':
        this.id = response.id;
        add(audit, `user.created|${this.id}`);
        break;
      case 'grant':
        add(audit, `entitlement.granted|${response.id}`);
        add(events, `entitlement.granted|${response.id}`);
        this.apps.push(body.application_id);
        add(events, `access.granted|${this.id}|${body.application_id}`);
        break;
      case 'assign':
        add(audit, `role.assigned|${this.id}|${response.role_id}`);
        add(events, `role.assigned|${this.id}|${response.role_id}`);
        break;
      case 'suspend':
        this.status = 'suspended';
        add(audit, `user.suspended|${this.id}`);
        add(events, `user.suspended|${this.id}`);
        for (const app of this.apps) add(events, `access.revoked|${this.id}|${app}`);
        break;
      case 'reactivate':
        this.status = 'active';
        add(audit, `user.reactivated|${this.id}`);
        add(events, `user.reactivated|${this.id}`);
        for (const app of this.apps) add(events, `access.granted|${this.id}|${app}`);
        break;
      default:
        throw new Error(`unknown step ${kind}`);
    }
  }
}

function auditSignature(r: { action: string; target_id: string; target_user_id: string }): string {
  if (r.action === 'entitlement.granted') return `${r.action}|${r.target_id}`;
  if (r.action === 'role.assigned') return `${r.action}|${r.target_user_id}|${r.target_id}`;
  return `${r.action}|${r.target_user_id}`;
}

function eventSignature(type: string, data: Record<string, any>): string {
  if (type === 'entitlement.granted') return `${type}|${data.entitlement?.id}`;
  if (type === 'role.assigned') return `${type}|${data.user_id}|${data.role_id}`;
  if (type.startsWith('access.')) return `${type}|${data.user_id}|${data.application_id}`;
  return `${type}|${data.user_id}`;
}

export interface Comparison {
  lost: number;
  orphans: number;
}

function compare(name: string, expected: Map<string, number>, actual: Map<string, number>, details: string[]): Comparison {
  let lost = 0;
  let orphans = 0;
  for (const sig of new Set([...expected.keys(), ...actual.keys()])) {
    const e = expected.get(sig) ?? 0;
    const a = actual.get(sig) ?? 0;
    if (a < e) lost += e - a;
    if (a > e) orphans += a - e;
    if (a !== e) details.push(`${name}: ${sig} expected ${e}, found ${a}`);
  }
  return { lost, orphans };
}

export interface Reconciliation {
  audit: Comparison;
  outbox: Comparison;
  delivered: Comparison;
  deliveries: number;
  distinctDelivered: number;
  duplicateDeliveries: number;
  details: string[];
}

/** Compares the model with the audit log, the outbox and the receiver, ignoring rows older than the load. */
export async function reconcileSources(c: Cluster, before: { audit: Set<string>; outbox: Set<string> }, receiver: Receiver, expected: Signatures): Promise<Reconciliation> {
  const details: string[] = [];
  const auditRows = await c.sql<{ id: string; action: string; target_id: string; target_user_id: string }>(
    'SELECT id, action, target_id, target_user_id FROM audit_events WHERE action = ANY($1)',
    [AUDIT_ACTIONS],
  );
  const audit = new Map<string, number>();
  for (const r of auditRows) if (!before.audit.has(r.id)) add(audit, auditSignature(r));

  const outboxRows = await c.sql<{ id: string; type: string; data: Record<string, any> }>('SELECT id, type, data FROM outbox_events WHERE type = ANY($1)', [EVENT_TYPES]);
  const outbox = new Map<string, number>();
  for (const r of outboxRows) if (!before.outbox.has(r.id)) add(outbox, eventSignature(r.type, r.data));

  const seen = new Set<string>();
  const delivered = new Map<string, number>();
  for (const d of receiver.deliveries) {
    if (seen.has(d.id) || before.outbox.has(d.id) || !EVENT_TYPES.includes(d.type)) continue;
    seen.add(d.id);
    add(delivered, eventSignature(d.type, d.data));
  }
  const distinct = new Set(receiver.deliveries.map((d) => d.id)).size;
  return {
    audit: compare('audit', expected.audit, audit, details),
    outbox: compare('outbox', expected.events, outbox, details),
    delivered: compare('delivered', expected.events, delivered, details),
    deliveries: receiver.deliveries.length,
    distinctDelivered: distinct,
    duplicateDeliveries: receiver.deliveries.length - distinct,
    details,
  };
}

export function countMismatches(r: Reconciliation): Comparison {
  const all = [r.audit, r.outbox, r.delivered];
  return { lost: all.reduce((s, x) => s + x.lost, 0), orphans: all.reduce((s, x) => s + x.orphans, 0) };
}
