// WH-4 reference model: resolved access per (user, Application) from first principles of Part B,
// written without src/access so that it can disagree with it. Users and Applications are small
// indexes (a universe of 3 users × 2 Applications × 1–2 Organizations); times are epoch ms.
//
// Spec rules encoded here (part-b-platform.md):
// - allowed only when the user's status is active and the resolved entitlement status is active;
// - a row resolves revoked, else expired (status expired or ends_at <= now), else disabled, else
//   scheduled (starts_at > now), else active;
// - paths: personal rows, and organization-wide rows of Organizations the user is an active member
//   of whose member_scope includes them (all_members; allowlist: listed; denylist: not listed);
//   pending memberships and excluded members have no path;
// - the resolved status of a pair is its best path (active > scheduled > disabled > expired >
//   revoked), `none` without a path (the data of access.revoked: "new resolved status or none").

export type UserStatus = 'active' | 'invited' | 'suspended' | 'deleted';
export type RowStatus = 'active' | 'disabled' | 'revoked' | 'expired';
export type Resolved = 'active' | 'scheduled' | 'disabled' | 'expired' | 'revoked' | 'none';
export type MemberScope = 'all_members' | 'allowlist' | 'denylist';
export type Reason =
  | 'entitlement_granted' | 'entitlement_started' | 'entitlement_enabled' | 'entitlement_disabled' | 'entitlement_revoked'
  | 'entitlement_expired' | 'entitlement_deleted' | 'org_grant_changed' | 'org_member_added' | 'org_member_removed'
  | 'user_suspended' | 'user_reactivated' | 'user_deleted';

export interface ModelRow {
  id: string;
  user: number | null;
  org: number | null;
  app: number;
  status: RowStatus;
  startsAt: number;
  endsAt: number | null;
  createdAt: number;
  scope: MemberScope | null;
  /** User indexes listed in member_overrides. */
  overrides: number[];
  /** Granted with source trial (a personal row granted with an end): its ends_at can never be null. */
  trial: boolean;
}

export interface ModelOrg {
  status: 'active' | 'suspended';
  members: Map<number, 'pending' | 'active'>;
}

export type PatchBody = { status?: 'active' | 'disabled' | 'revoked'; ends_at?: number | null; scope?: MemberScope; overrides?: number[] };

/** The Entitlement status table of Part B: from → to, and the reason of the access flips each move causes. */
const MOVES: Record<RowStatus, Partial<Record<RowStatus, Reason>>> = {
  active: { disabled: 'entitlement_disabled', revoked: 'entitlement_revoked' },
  disabled: { active: 'entitlement_enabled', revoked: 'entitlement_revoked' },
  // Renewal of an expired row: a grant again (the spec names no reason of its own for it).
  expired: { active: 'entitlement_granted', revoked: 'entitlement_revoked' },
  revoked: {},
};

export interface AccessEvent {
  type: 'access.granted' | 'access.revoked';
  user: number;
  app: number;
  reason: Reason;
  entitlement_status: Resolved;
}

const RANK: Record<Resolved, number> = { active: 5, scheduled: 4, disabled: 3, expired: 2, revoked: 1, none: 0 };

export function rowResolved(row: ModelRow, now: number): Resolved {
  if (row.status === 'revoked') return 'revoked';
  if (row.status === 'expired' || (row.endsAt !== null && row.endsAt <= now)) return 'expired';
  if (row.status === 'disabled') return 'disabled';
  if (row.startsAt > now) return 'scheduled';
  return 'active';
}

export function includes(row: ModelRow, user: number): boolean {
  if (row.scope === 'allowlist') return row.overrides.includes(user);
  if (row.scope === 'denylist') return !row.overrides.includes(user);
  return true;
}

export class AccessModel {
  now: number;
  readonly users: UserStatus[];
  readonly orgs: ModelOrg[];
  readonly rows: ModelRow[] = [];
  /** What subscribers have been told per pair (every pair starts not allowed). */
  readonly announced: boolean[][];

  constructor(users: UserStatus[], orgCount: number, readonly appCount: number, now: number) {
    this.now = now;
    this.users = [...users];
    this.orgs = Array.from({ length: orgCount }, () => ({ status: 'active' as const, members: new Map() }));
    this.announced = users.map(() => Array.from({ length: appCount }, () => false));
  }

  /** The resolved status and allowed flag of one pair at the model's now. */
  pair(user: number, app: number): { allowed: boolean; status: Resolved } {
    let best: Resolved = 'none';
    for (const row of this.rows) {
      if (row.app !== app) continue;
      if (row.user !== null && row.user !== user) continue;
      if (row.org !== null) {
        if (this.orgs[row.org].members.get(user) !== 'active' || !includes(row, user)) continue;
      }
      const s = rowResolved(row, this.now);
      if (RANK[s] > RANK[best]) best = s;
    }
    return { allowed: this.users[user] === 'active' && best === 'active', status: best };
  }

  /**
   * The events a correct service writes now: one per pair whose allowed state differs from what
   * was last announced, with `reason` (or, for time-driven steps, a reason per direction).
   */
  flips(reason: Reason | { granted: Reason; revoked: Reason }): AccessEvent[] {
    const events: AccessEvent[] = [];
    for (let u = 0; u < this.users.length; u++) {
      for (let a = 0; a < this.appCount; a++) {
        const { allowed, status } = this.pair(u, a);
        if (allowed === this.announced[u][a]) continue;
        this.announced[u][a] = allowed;
        const r = typeof reason === 'string' ? reason : allowed ? reason.granted : reason.revoked;
        events.push({ type: allowed ? 'access.granted' : 'access.revoked', user: u, app: a, reason: r, entitlement_status: status });
      }
    }
    return events;
  }

  /** The expiry sweep: live rows whose ends_at passed are written expired (resolution already said so). */
  sweep(): void {
    for (const row of this.rows) {
      if ((row.status === 'active' || row.status === 'disabled') && row.endsAt !== null && row.endsAt <= this.now) row.status = 'expired';
    }
  }

  /** Future instants at which some row starts or ends, ascending, up to `until` (inclusive). */
  boundaries(until: number): number[] {
    const times = new Set<number>();
    for (const row of this.rows) {
      if (row.status === 'revoked' || row.status === 'expired') continue;
      if (row.startsAt > this.now && row.startsAt <= until) times.add(row.startsAt);
      if (row.endsAt !== null && row.endsAt > this.now && row.endsAt <= until) times.add(row.endsAt);
    }
    return [...times].sort((x, y) => x - y);
  }

  /** The latest personal row of (user, app), or org-wide row of (org, app); `back` 1: the one before it, if any. */
  latest(target: { user: number; app: number } | { org: number; app: number }, back = 0): ModelRow | undefined {
    const match = this.rows.filter((r) => r.app === target.app && ('user' in target ? r.user === target.user : r.org === target.org));
    return match.at(-1 - Math.min(back, match.length - 1));
  }

  liveRow(target: { user: number; app: number } | { org: number; app: number }): ModelRow | undefined {
    return this.rows.find(
      (r) => r.app === target.app && ('user' in target ? r.user === target.user : r.org === target.org) && (r.status === 'active' || r.status === 'disabled'),
    );
  }

  /**
   * PATCH /v1/entitlements/{id} per Part B (status table, term rules, member scope), refusals in the
   * order the service documents them: the status code, the flip reason and the change to apply.
   */
  patch(row: ModelRow, body: PatchBody): { code: number; reason: Reason; apply: () => void } {
    const none = { reason: 'entitlement_granted' as Reason, apply: () => undefined };
    if (row.org !== null && this.orgs[row.org].status === 'suspended') return { code: 403, ...none };
    // A live row whose ends_at passed is expired first (the sweep's work, in the request's
    // transaction); the request then moves the expired row. Refused, nothing of it stays.
    const from: RowStatus = (row.status === 'active' || row.status === 'disabled') && row.endsAt !== null && row.endsAt <= this.now ? 'expired' : row.status;
    const expireFirst = () => void (row.status = from);
    const to = body.status ?? from;
    const move = to !== from ? MOVES[from][to] : undefined;
    if (to !== from && !move) return { code: 409, ...none };
    if (row.status === 'revoked' && body.status !== 'revoked') return { code: 409, ...none };
    let endsAt = row.endsAt;
    let termChanged = false;
    if ('ends_at' in body) {
      endsAt = body.ends_at ?? null;
      if (endsAt !== null && endsAt <= row.startsAt) return { code: 422, ...none };
      termChanged = endsAt !== row.endsAt;
    }
    // A trial always ends: 422 ends_at_required for a PATCH that would leave it without an end.
    if (row.trial && endsAt === null) return { code: 422, ...none };
    const scopeChange = body.scope !== undefined;
    if (scopeChange && !body.overrides!.every((u) => this.activeMembers(row.org!).includes(u))) return { code: 422, ...none };
    if (to === 'active' && from === 'expired') {
      if (endsAt !== null && endsAt <= this.now) return { code: 409, ...none };
      // "409 entitlement_already_exists if a newer live row exists", for both kinds of row.
      const live = this.liveRow(row.user !== null ? { user: row.user, app: row.app } : { org: row.org!, app: row.app });
      if (live && live !== row) return { code: 409, ...none };
    }
    if (!move && !termChanged && !scopeChange) return { code: 200, ...none, apply: expireFirst };
    // A term moved into the past ends access as an expiry; a term moved forward restores it as a grant.
    const reason: Reason = move ?? (scopeChange ? 'org_grant_changed' : endsAt !== null && endsAt <= this.now ? 'entitlement_expired' : 'entitlement_granted');
    return {
      code: 200,
      reason,
      apply: () => {
        row.status = to;
        row.endsAt = endsAt;
        if (scopeChange) {
          row.scope = body.scope!;
          row.overrides = [...body.overrides!];
        }
      },
    };
  }

  activeMembers(org: number): number[] {
    return [...this.orgs[org].members].filter(([, s]) => s === 'active').map(([u]) => u);
  }
}

export const eventKey = (e: AccessEvent) => `${e.type}|u${e.user}|a${e.app}|${e.reason}|${e.entitlement_status}`;
