// WH-4 planning: for each generated command, the HTTP request it makes and what the reference
// model (access-model.ts) expects of it: the status code, the model change on success and the
// reason every access flip of that change must carry.
import type { InjectResponse } from '../../helpers/http.js';
import type { AccessModel, ModelRow, PatchBody, Reason } from './access-model.js';
import type { Cmd, Target, Term } from './wh-4-commands.js';

const MIN = 60_000;
/** Terms are placed on a 10-minute grid plus a per-command jitter of seconds, so boundaries rarely coincide. */
const SLOT = 10 * MIN;

export interface Fixture {
  users: { id: string; email: string }[];
  apps: string[];
  orgs: string[];
}

/** The HTTP side the planner needs, provided by the test file (it owns the app, keys and clock). */
export interface Driver {
  call(method: string, url: string, body?: unknown, headers?: Record<string, string>): Promise<InjectResponse>;
  /** A User token for a universe user (a fresh session). */
  tokenCall(userId: string, method: string, url: string, body?: unknown): Promise<InjectResponse>;
  setClock(ms: number): void;
  runJobs(): Promise<void>;
}

export interface Step {
  label: string;
  run(): Promise<InjectResponse | null>;
  expect: number | null;
  /** The model change once the service agreed on the status. */
  apply(res: InjectResponse | null): void;
  reason: Reason | { granted: Reason; revoked: Reason };
}

const TIME_REASONS = { granted: 'entitlement_started', revoked: 'entitlement_expired' } as const;
const iso = (ms: number) => new Date(ms).toISOString();
const reasonText = 'wh-4 model';

function termTimes(term: Term, now: number, jitter: number, slotA: number, slotB: number): { startsAt: number; endsAt: number | null; send: Record<string, string> } {
  switch (term) {
    case 'ends': {
      const endsAt = now + slotA * SLOT + jitter;
      return { startsAt: now, endsAt, send: { ends_at: iso(endsAt) } };
    }
    case 'starts': {
      const startsAt = now + slotA * SLOT + jitter;
      return { startsAt, endsAt: null, send: { starts_at: iso(startsAt) } };
    }
    case 'window': {
      const startsAt = now + slotA * SLOT + jitter;
      const endsAt = startsAt + slotB * SLOT;
      return { startsAt, endsAt, send: { starts_at: iso(startsAt), ends_at: iso(endsAt) } };
    }
    case 'past': {
      // Backdated and already over: the row is created expired-by-time (Part B: starts_at has no lower bound).
      const startsAt = now - 3 * 60 * MIN - jitter;
      const endsAt = now - 60 * MIN - jitter;
      return { startsAt, endsAt, send: { starts_at: iso(startsAt), ends_at: iso(endsAt) } };
    }
    default:
      return { startsAt: now, endsAt: null, send: {} };
  }
}

const idem = () => ({ 'idempotency-key': `wh4-${Math.random().toString(36).slice(2)}${Date.now().toString(36)}` });

function overridesOf(m: AccessModel, orgIdx: number, pickMask: boolean[], strictOnly: boolean): number[] {
  const chosen = pickMask.flatMap((p, u) => (p ? [u] : []));
  const members = m.activeMembers(orgIdx);
  return strictOnly ? chosen.filter((u) => members.includes(u)) : chosen;
}

function patchStep(d: Driver, m: AccessModel, fx: Fixture, label: string, row: ModelRow, body: PatchBody): Step {
  const wire: Record<string, unknown> = {};
  if (body.status) wire.status = body.status;
  if (body.status === 'disabled' || body.status === 'revoked') wire.disabled_reason = reasonText;
  if ('ends_at' in body) wire.ends_at = body.ends_at === null || body.ends_at === undefined ? null : iso(body.ends_at);
  if (body.scope) {
    wire.member_scope = body.scope;
    wire.member_overrides = body.overrides!.map((u) => fx.users[u].id);
  }
  const out = m.patch(row, body);
  return { label, run: () => d.call('PATCH', `/v1/entitlements/${row.id}`, wire), expect: out.code, apply: out.apply, reason: out.reason };
}

const orgOf = (m: AccessModel, o: number) => o % m.orgs.length;
const rowOf = (m: AccessModel, t: Target) => m.latest('org' in t ? { org: orgOf(m, t.org), app: t.app } : { user: t.user, app: t.app }, t.back);

/** The steps of one command (several for a clock move: one per start or end it passes). */
export function plan(cmd: Cmd, index: number, m: AccessModel, fx: Fixture, d: Driver): Step[] {
  const jitter = (index + 1) * 1000;
  switch (cmd.k) {
    case 'grant': {
      const { startsAt, endsAt, send } = termTimes(cmd.term, m.now, jitter, cmd.slot, cmd.slot2);
      const body = { application_id: fx.apps[cmd.app], source: endsAt !== null ? 'trial' : 'admin_grant', ...send };
      // A live row whose ends_at passed (not yet swept) does not block: the grant expires it first.
      const live = m.liveRow({ user: cmd.user, app: cmd.app });
      const ended = live !== undefined && live.endsAt !== null && live.endsAt <= m.now;
      const code = m.users[cmd.user] === 'deleted' ? 404 : live && !ended ? 409 : 201;
      return [{
        label: `grant u${cmd.user} a${cmd.app} ${cmd.term}`,
        run: () => d.call('POST', `/v1/users/${fx.users[cmd.user].id}/entitlements`, body, idem()),
        expect: code,
        reason: 'entitlement_granted',
        apply: (res) => {
          if (code !== 201) return;
          if (ended) live!.status = 'expired';
          m.rows.push({ id: res!.json().id, user: cmd.user, org: null, app: cmd.app, status: 'active', startsAt, endsAt, createdAt: m.now, scope: null, overrides: [], trial: body.source === 'trial' });
        },
      }];
    }
    case 'status': {
      const row = rowOf(m, cmd.target);
      if (!row) return [];
      return [patchStep(d, m, fx, `status ${row.org !== null ? `o${row.org}` : `u${row.user}`} a${row.app} ${row.status}→${cmd.to}`, row, { status: cmd.to })];
    }
    case 'renew': {
      const row = rowOf(m, cmd.target);
      if (!row) return [];
      const endsAt = cmd.ends === 'null' ? null : m.now + cmd.slot * SLOT + jitter;
      return [patchStep(d, m, fx, `renew ${row.status} ends ${cmd.ends}`, row, { status: 'active', ends_at: endsAt })];
    }
    case 'endsAt': {
      const row = rowOf(m, cmd.target);
      if (!row) return [];
      const endsAt = cmd.when === 'null' ? null : cmd.when === 'past' ? m.now - 1000 : m.now + cmd.slot * SLOT + jitter;
      return [patchStep(d, m, fx, `ends_at ${cmd.when} on ${row.status}`, row, { ends_at: endsAt })];
    }
    case 'delete': {
      const row = rowOf(m, cmd.target);
      if (!row) return [];
      const code = row.org !== null && m.orgs[row.org].status === 'suspended' ? 403 : m.now - row.createdAt > 24 * 60 * MIN ? 409 : 204;
      return [{
        label: `delete ${row.org !== null ? `o${row.org}` : `u${row.user}`} a${row.app} (${row.status})`,
        run: () => d.call('DELETE', `/v1/entitlements/${row.id}`),
        expect: code,
        reason: 'entitlement_deleted',
        apply: () => {
          if (code === 204) m.rows.splice(m.rows.indexOf(row), 1);
        },
      }];
    }
    case 'orgGrant': {
      const o = orgOf(m, cmd.org);
      const { startsAt, endsAt, send } = termTimes(cmd.term, m.now, jitter, cmd.slot, cmd.slot2);
      const overrides = overridesOf(m, o, cmd.pick, cmd.strict);
      const members = m.activeMembers(o);
      // As for personal grants, a live grant whose ends_at passed (not yet swept) is expired first.
      const live = m.liveRow({ org: o, app: cmd.app });
      const ended = live !== undefined && live.endsAt !== null && live.endsAt <= m.now;
      const code = m.orgs[o].status === 'suspended' ? 403
        : !overrides.every((u) => members.includes(u)) ? 422
        : live && !ended ? 409 : 201;
      const body = { application_id: fx.apps[cmd.app], member_scope: cmd.scope, member_overrides: overrides.map((u) => fx.users[u].id), ...send };
      return [{
        label: `org grant o${o} a${cmd.app} ${cmd.scope}[${overrides}] ${cmd.term}`,
        run: () => d.call('POST', `/v1/organizations/${fx.orgs[o]}/entitlements`, body, idem()),
        expect: code,
        reason: 'entitlement_granted',
        apply: (res) => {
          if (code !== 201) return;
          if (ended) live!.status = 'expired';
          m.rows.push({ id: res!.json().id, user: null, org: o, app: cmd.app, status: 'active', startsAt, endsAt, createdAt: m.now, scope: cmd.scope, overrides, trial: false });
        },
      }];
    }
    case 'scope': {
      const o = orgOf(m, cmd.org);
      const row = m.latest({ org: o, app: cmd.app });
      if (!row) return [];
      const overrides = overridesOf(m, o, cmd.pick, cmd.strict);
      return [patchStep(d, m, fx, `scope o${o} a${cmd.app} ${row.scope}[${row.overrides}]→${cmd.scope}[${overrides}]`, row, { scope: cmd.scope, overrides })];
    }
    case 'addMember': {
      const o = orgOf(m, cmd.org);
      const code = m.orgs[o].status === 'suspended' ? 403 : m.users[cmd.user] === 'deleted' ? 404 : m.orgs[o].members.has(cmd.user) ? 409 : 201;
      return [{
        label: `add member u${cmd.user} to o${o}`,
        run: () => d.call('POST', `/v1/organizations/${fx.orgs[o]}/members`, { user_id: fx.users[cmd.user].id }),
        expect: code,
        reason: 'org_member_added',
        apply: () => {
          if (code === 201) m.orgs[o].members.set(cmd.user, 'active');
        },
      }];
    }
    case 'invite': {
      const o = orgOf(m, cmd.org);
      // Inviting the address of a deleted user would create a new invited User outside the universe.
      if (m.users[cmd.user] === 'deleted') return [];
      const code = m.orgs[o].status === 'suspended' ? 403 : m.orgs[o].members.has(cmd.user) ? 409 : 201;
      return [{
        label: `invite u${cmd.user} to o${o}`,
        run: () => d.call('POST', `/v1/organizations/${fx.orgs[o]}/members`, { email: fx.users[cmd.user].email }),
        expect: code,
        reason: 'org_member_added',
        apply: () => {
          if (code === 201) m.orgs[o].members.set(cmd.user, 'pending');
        },
      }];
    }
    case 'accept': {
      const o = orgOf(m, cmd.org);
      if (m.users[cmd.user] !== 'active') return []; // only an active user holds a User token
      const membership = m.orgs[o].members.get(cmd.user);
      const code = !membership ? 404 : membership === 'active' ? 200 : m.orgs[o].status === 'suspended' ? 403 : 200;
      return [{
        label: `u${cmd.user} accepts o${o} (${membership ?? 'none'})`,
        run: () => d.tokenCall(fx.users[cmd.user].id, 'POST', `/v1/organizations/${fx.orgs[o]}/members/me/accept`, {}),
        expect: code,
        reason: 'org_member_added',
        apply: () => {
          if (code === 200) m.orgs[o].members.set(cmd.user, 'active');
        },
      }];
    }
    case 'removeMember': {
      const o = orgOf(m, cmd.org);
      const membership = m.orgs[o].members.get(cmd.user);
      const code = !membership ? 404 : m.orgs[o].status === 'suspended' ? 403 : 204;
      return [{
        label: `remove u${cmd.user} from o${o} (${membership ?? 'none'})`,
        run: () => d.call('DELETE', `/v1/organizations/${fx.orgs[o]}/members/${fx.users[cmd.user].id}`),
        expect: code,
        reason: 'org_member_removed',
        apply: () => {
          if (code !== 204) return;
          m.orgs[o].members.delete(cmd.user);
          for (const row of m.rows) if (row.org === o) row.overrides = row.overrides.filter((u) => u !== cmd.user);
        },
      }];
    }
    case 'suspend': {
      const from = m.users[cmd.user];
      const code = from === 'active' || from === 'suspended' ? 200 : 409;
      return [{
        label: `suspend u${cmd.user} (${from})`,
        run: () => d.call('POST', `/v1/users/${fx.users[cmd.user].id}/suspend`, {}),
        expect: code,
        reason: 'user_suspended',
        apply: () => {
          if (code === 200) m.users[cmd.user] = 'suspended';
        },
      }];
    }
    case 'reactivate': {
      const from = m.users[cmd.user];
      // suspended → active (reactivate), deleted → active (restore), invited → active (activation):
      // every one of them can flip access on; the spec's reason list has user_reactivated for them.
      return [{
        label: `reactivate u${cmd.user} (${from})`,
        run: () => d.call('PATCH', `/v1/users/${fx.users[cmd.user].id}`, { status: 'active' }),
        expect: 200,
        reason: 'user_reactivated',
        apply: () => {
          m.users[cmd.user] = 'active';
        },
      }];
    }
    case 'deleteUser': {
      const from = m.users[cmd.user];
      return [{
        label: `delete u${cmd.user} (${from})`,
        run: () => d.call('DELETE', `/v1/users/${fx.users[cmd.user].id}`),
        expect: 204,
        reason: 'user_deleted',
        apply: () => {
          m.users[cmd.user] = 'deleted';
        },
      }];
    }
    case 'orgStatus': {
      const o = orgOf(m, cmd.org);
      // Suspending or reactivating an Organization leaves grants and members' access untouched: no flips.
      return [{
        label: `org o${o} → ${cmd.to}`,
        run: () => d.call('PATCH', `/v1/organizations/${fx.orgs[o]}`, { status: cmd.to, reason: reasonText }),
        expect: 200,
        reason: 'org_grant_changed',
        apply: () => {
          m.orgs[o].status = cmd.to;
        },
      }];
    }
    case 'advance': {
      const until = m.now + cmd.minutes * MIN;
      // The jobs run at each start or end passed, as the minute / 5-minute schedules would.
      const steps: Step[] = m.boundaries(until).map((at) => ({
        label: `clock → +${Math.round((at - m.now) / 1000)}s, jobs`,
        run: async () => {
          d.setClock(at);
          await d.runJobs();
          return null;
        },
        expect: null,
        reason: TIME_REASONS,
        apply: () => {
          m.now = at;
          m.sweep();
        },
      }));
      steps.push({
        label: `clock → +${cmd.minutes}m, jobs`,
        run: async () => {
          d.setClock(until);
          await d.runJobs();
          return null;
        },
        expect: null,
        reason: TIME_REASONS,
        apply: () => {
          m.now = until;
          m.sweep();
        },
      });
      return steps;
    }
    case 'sweep':
      return [{
        label: 'jobs now',
        run: async () => {
          await d.runJobs();
          return null;
        },
        expect: null,
        reason: TIME_REASONS,
        apply: () => m.sweep(),
      }];
  }
}
