// The FT-1 write load: clients run a script of state changes per fresh user, each call with its own
// Idempotency-Key, against whichever process is up. A call that fails in transit (its process was
// killed) is retried with the same key on the other process; every acknowledged step is recorded in
// the model (reconcile.ts) as the events it must have produced.
import { sleep, type Cluster, type Reply, type ServerProcess } from './cluster.js';
import { errorCode, rand, uniqueEmail } from './fixtures.js';
import { ModelUser, type Signatures } from './reconcile.js';

/** Seconds past the documented 60-second in-flight lease of an idempotency claim. */
export const LEASE_SECONDS = 61;

interface Op {
  kind: 'create' | 'grant' | 'assign' | 'suspend' | 'reactivate';
  method: string;
  path: string;
  body: Record<string, unknown>;
  status: number;
}

/** One user's script: every step is a real state change, so each key must yield exactly its events. */
function script(u: ModelUser, apps: string[]): Array<() => Op> {
  const grant = (app: string) => (): Op => ({ kind: 'grant', method: 'POST', path: `/v1/users/${u.id}/entitlements`, body: { application_id: app, source: 'admin_grant' }, status: 201 });
  const assign = (role: string) => (): Op => ({ kind: 'assign', method: 'POST', path: `/v1/users/${u.id}/roles/${role}`, body: {}, status: 201 });
  const suspend = (): Op => ({ kind: 'suspend', method: 'POST', path: `/v1/users/${u.id}/suspend`, body: { reason: 'FT-1' }, status: 200 });
  const reactivate = (): Op => ({ kind: 'reactivate', method: 'PATCH', path: `/v1/users/${u.id}`, body: { status: 'active' }, status: 200 });
  return [
    () => ({ kind: 'create', method: 'POST', path: '/v1/users', body: { email: u.email, status: 'active', send_invitation: false }, status: 201 }),
    grant(apps[0]), assign('role_platform_support'), suspend, reactivate,
    grant(apps[1]), assign('role_platform_billing_admin'), suspend, reactivate,
    grant(apps[2]),
  ];
}

export class WriteLoad {
  readonly users: ModelUser[] = [];
  readonly expected: Signatures = { audit: new Map(), events: new Map() };
  readonly acknowledged: Record<string, number> = {};
  retried = 0;
  replayed = 0;
  networkErrors = 0;
  unavailable = 0;
  strandedClaims = 0;
  readonly serverErrors: string[] = [];
  readonly unexpected: string[] = [];
  /** Calls currently sent to each process (what a kill interrupts). */
  readonly inFlight = new Map<string, number>();
  private stopped = false;
  private releasing: Promise<void> | null = null;

  constructor(
    private readonly c: Cluster,
    private readonly admin: string,
    private readonly apps: string[],
  ) {}

  /** Runs `clients` clients until stop() is called; each finishes the call it is in. */
  run(clients: number): Promise<void> {
    return Promise.all(Array.from({ length: clients }, () => this.client())).then(() => undefined);
  }

  stop(): void {
    this.stopped = true;
  }

  get total(): number {
    return Object.values(this.acknowledged).reduce((a, b) => a + b, 0);
  }

  private async client(): Promise<void> {
    while (!this.stopped) {
      const u = new ModelUser(uniqueEmail('ft1'));
      this.users.push(u);
      for (const step of script(u, this.apps)) {
        if (this.stopped) return;
        const op = step();
        const res = await this.perform(op, `ft1-${rand(8)}`);
        if (!res) break;
        u.acknowledge(op.kind, op.body, res.json(), this.expected);
      }
    }
  }

  private async pick(): Promise<ServerProcess> {
    for (;;) {
      const ready = this.c.nodes.filter((n) => n.ready);
      if (ready.length) return ready[Math.floor(Math.random() * ready.length)];
      await sleep(20);
    }
  }

  // A claim left by a killed process lapses after the lease: move the shared clock past it (once
  // for all clients that meet one at the same time).
  private releaseStrandedClaims(): Promise<void> {
    return (this.releasing ??= (async () => {
      try {
        for (;;) {
          try {
            await this.c.advanceClock(LEASE_SECONDS);
            return;
          } catch {
            await sleep(50);
          }
        }
      } finally {
        this.releasing = null;
      }
    })());
  }

  /** Sends the call until it gets a definitive answer; null (recorded) when it is not the expected one. */
  private async perform(op: Op, key: string): Promise<Reply | null> {
    let node = await this.pick();
    for (let attempt = 1; attempt <= 500; attempt++) {
      if (attempt > 1) this.retried++;
      const target = node;
      this.inFlight.set(target.name, (this.inFlight.get(target.name) ?? 0) + 1);
      let res: Reply;
      try {
        res = await target.call(op.method, op.path, { token: this.admin, body: op.body, headers: { 'idempotency-key': key } });
      } catch {
        this.networkErrors++;
        node = this.c.other(target);
        await sleep(20);
        continue;
      } finally {
        this.inFlight.set(target.name, (this.inFlight.get(target.name) ?? 1) - 1);
      }
      if (res.status === 409 && errorCode(res) === 'idempotency_key_in_flight') {
        this.strandedClaims++;
        await this.releaseStrandedClaims();
        continue;
      }
      if (res.status === 503 && errorCode(res) === 'service_unavailable') {
        // The database was briefly out of reach for this process (documented degradation): retry.
        this.unavailable++;
        await sleep(100);
        continue;
      }
      if (res.status >= 500) {
        this.serverErrors.push(`${op.kind} on ${res.node}: ${res.status} ${res.text.slice(0, 200)}`);
        node = this.c.other(target);
        await sleep(20);
        continue;
      }
      if (res.status !== op.status) {
        this.unexpected.push(`${op.kind} ${op.path} on ${res.node}: ${res.status} ${res.text.slice(0, 200)}`);
        return null;
      }
      if (res.headers['idempotent-replayed'] === 'true') this.replayed++;
      this.acknowledged[op.kind] = (this.acknowledged[op.kind] ?? 0) + 1;
      return res;
    }
    this.unexpected.push(`${op.kind} ${op.path}: gave up after 500 attempts`);
    return null;
  }
}
