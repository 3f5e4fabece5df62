// FT-6: embedded mode (PGlite). A real server process on a fresh DATA_DIR (no DATABASE_URL) takes
// signups, profile changes and API key creations over HTTP from several clients; it is SIGKILLed in
// the middle of that load and restarted on the same DATA_DIR (over the stale lock the kill leaves), 3
// times. Every write answered 2xx must then be readable over HTTP, and after a graceful stop the data
// directory must pass amcheck (heap and every B-tree index) and the signup invariants.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { figure } from './support.js';
import { checkDataDir } from './ft-6-data-dir.js';
import { ServerProcess, serverEnv } from '../multiprocess/server-process.js';
import { freePort, sleep, type Reply } from '../multiprocess/http.js';
import { errorCode, mapLimit, PASSWORD, rand, seconds } from '../multiprocess/fixtures.js';

const KILLS = 3;
const CLIENTS = 4;
/** Writes each process must acknowledge before it may be killed: every start serves writes. */
const ACKS_BEFORE_KILL = 4;
/** How long the load may take to reach a wanted state (a dead or stuck process fails the test instead of hanging it). */
const WAIT_MS = 20_000;
const ADMIN = { email: `ft6-admin-${rand()}@example.com`, password: 'copper-willow-saddle-harbor-58' };

/** An acknowledged write and how to see it afterwards. */
type Ack =
  | { kind: 'signup'; life: number; userId: string; email: string; token: string }
  | { kind: 'profile'; life: number; userId: string; displayName: string }
  | { kind: 'api-key'; life: number; keyId: string; name: string; secret: string };

class EmbeddedLoad {
  readonly acks: Ack[] = [];
  /** Writes whose answer never came (the process died under them): they may or may not be stored. */
  unanswered = 0;
  inFlight = 0;
  /** Which start of the process the load is talking to (0 = the first). */
  life = 0;
  readonly unexpected: string[] = [];
  private stopped = false;

  constructor(
    private readonly server: ServerProcess,
    private readonly admin: string,
  ) {}

  run(clients: number): Promise<void> {
    return Promise.all(Array.from({ length: clients }, () => this.client())).then(() => undefined);
  }
  stop(): void {
    this.stopped = true;
  }
  acksInLife(life: number): number {
    return this.acks.filter((a) => a.life === life).length;
  }

  private async client(): Promise<void> {
    while (!this.stopped) {
      const email = `ft6-${rand()}@example.com`;
      const user = await this.write('POST', '/v1/auth/signup', null, { email, password: PASSWORD, display_name: 'FT-6' }, 201, (b, life) => ({
        kind: 'signup', life, userId: b.user_id, email, token: b.access_token,
      }));
      if (user?.kind === 'signup' && !this.stopped) {
        const displayName = `FT-6 ${rand()}`;
        await this.write('PATCH', `/v1/users/${user.userId}/profile`, this.admin, { display_name: displayName }, 200, (_b, life) => ({
          kind: 'profile', life, userId: user.userId, displayName,
        }));
      }
      if (this.stopped) return;
      const name = `ft6 key ${rand()}`;
      await this.write('POST', '/v1/api-keys', this.admin, { name, scope: 'platform', permissions: ['users.list'] }, 201, (b, life) => ({
        kind: 'api-key', life, keyId: b.id, name, secret: b.secret,
      }));
    }
  }

  /** One write, sent once: recorded as acknowledged on `status`, unanswered on a network error. */
  private async write(method: string, path: string, token: string | null, body: unknown, status: number, ack: (body: any, life: number) => Ack): Promise<Ack | null> {
    while (!this.server.ready) {
      if (this.stopped) return null;
      await sleep(10);
    }
    const life = this.life;
    this.inFlight++;
    let res: Reply;
    try {
      res = await this.server.call(method, path, { token, body });
    } catch {
      this.unanswered++;
      return null;
    } finally {
      this.inFlight--;
    }
    if (res.status !== status) {
      this.unexpected.push(`${method} ${path} in life ${life}: ${res.status} ${errorCode(res) ?? res.text.slice(0, 200)}`);
      return null;
    }
    const a = ack(res.json(), life);
    this.acks.push(a);
    return a;
  }
}

/** Whether the acknowledged write is visible over HTTP; a description of what is missing if not. */
async function missing(server: ServerProcess, admin: string, a: Ack): Promise<string | null> {
  const say = (what: string, res: Reply) => `${a.kind} of life ${a.life}: ${what} → ${res.status} ${res.text.slice(0, 160)}`;
  if (a.kind === 'signup') {
    const user = await server.call('GET', `/v1/users/${a.userId}`, { token: admin });
    if (user.status !== 200 || user.json().email !== a.email) return say(`GET /v1/users/${a.userId}`, user);
    const profile = await server.call('GET', `/v1/users/${a.userId}/profile`, { token: admin });
    if (profile.status !== 200) return say('its profile', profile);
    // The session the signup returned is part of the write: its access token still signs the user in.
    const me = await server.call('GET', '/v1/users/me', { token: a.token });
    return me.status === 200 && me.json().id === a.userId ? null : say('its session (GET /v1/users/me)', me);
  }
  if (a.kind === 'profile') {
    const profile = await server.call('GET', `/v1/users/${a.userId}/profile`, { token: admin });
    return profile.status === 200 && profile.json().display_name === a.displayName ? null : say(`display_name ${a.displayName}`, profile);
  }
  const key = await server.call('GET', `/v1/api-keys/${a.keyId}`, { token: admin });
  if (key.status !== 200 || key.json().name !== a.name || key.json().revoked_at !== null) return say(`GET /v1/api-keys/${a.keyId}`, key);
  const used = await server.call('GET', '/v1/users?limit=1', { token: a.secret });
  return used.status === 200 ? null : say('its secret (GET /v1/users)', used);
}

/** Polls until `ready()` or WAIT_MS; false on the deadline. */
async function until(ready: () => boolean): Promise<boolean> {
  const deadline = Date.now() + WAIT_MS;
  while (!ready()) {
    if (Date.now() > deadline) return false;
    await sleep(2);
  }
  return true;
}

let dataDir: string | null = null;
let server: ServerProcess | null = null;
after(async () => {
  await server?.kill();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

test('FT-6 embedded mode (PGlite): kill -9 during writes, restart on the same DATA_DIR — the process starts; acknowledged writes are present; nothing corrupt', async () => {
  const started = Date.now();
  dataDir = mkdtempSync(join(tmpdir(), 'platform-ft6-'));
  const port = await freePort();
  const env = serverEnv('', port, `http://127.0.0.1:${port}`, {
    DATA_DIR: dataDir,
    BOOTSTRAP_ADMIN_EMAIL: ADMIN.email,
    BOOTSTRAP_ADMIN_PASSWORD: ADMIN.password,
    // As `npm start` runs: background jobs and relays write beside the requests.
    WORKERS: '1',
  });
  delete env.DATABASE_URL; // embedded storage, whatever TEST_DATABASE_URL says
  const s = (server = new ServerProcess('ft6', port, env));
  await s.start();

  const login = await s.call('POST', '/v1/auth/login', { body: ADMIN });
  assert.equal(login.status, 200, login.text);
  const admin: string = login.json().access_token;

  const load = new EmbeddedLoad(s, admin);
  const running = load.run(CLIENTS);
  const kills: string[] = [];
  const startFailures: string[] = [];
  const served = () => load.acksInLife(load.life) >= ACKS_BEFORE_KILL || load.unexpected.length > 0;
  for (let k = 0; k < KILLS; k++) {
    // Let this process acknowledge writes, then kill it while some are in flight.
    if (!(await until(served))) break;
    await sleep(100 + Math.random() * 500);
    if (!(await until(() => load.inFlight > 0))) break;
    const inFlight = load.inFlight;
    await s.kill();
    const staleLock = existsSync(join(dataDir, 'pglite.lock'));
    const down = Date.now();
    load.life++;
    try {
      await s.start();
    } catch (err) {
      startFailures.push(`restart ${k + 1}: ${(err as Error).message.slice(0, 2000)}`);
      break;
    }
    kills.push(`${inFlight} in flight${staleLock ? ', stale lock' : ''}, restarted in ${seconds(Date.now() - down)} s`);
  }
  // The last process serves writes too, then the load ends.
  if (startFailures.length === 0) await until(served);
  load.stop();
  await running;
  assert.deepEqual(startFailures, [], 'the process starts after every kill');

  const lost = (await mapLimit(load.acks, 8, (a) => missing(s, admin, a))).filter((m): m is string => m !== null);
  const byKind = (kind: Ack['kind']) => load.acks.filter((a) => a.kind === kind).length;
  await s.stop();
  assert.deepEqual(s.unexpectedExits, [], `no exit the test did not cause:\n${s.output.slice(-4000)}`);
  const check = await checkDataDir(join(dataDir, 'pglite'));

  figure('FT-6', `acknowledged writes lost: ${lost.length} / ${load.acks.length} over ${kills.length} kills (${Math.round((Date.now() - started) / 1000)} s)`);
  console.log(`[FT-6] acknowledged: signups ${byKind('signup')}, profile changes ${byKind('profile')}, API keys ${byKind('api-key')}; unanswered (in flight at a kill) ${load.unanswered}; per process life ${Array.from({ length: KILLS + 1 }, (_, l) => load.acksInLife(l)).join('/')}`);
  console.log(`[FT-6] kills: ${kills.join('; ')}`);
  console.log(`[FT-6] after the last stop: ${check.tables} tables (${check.rows} rows) read, ${check.indexes} B-tree indexes and every heap checked by amcheck; corruption ${check.corruption.length}; invariant breaks ${check.invariants.length}`);
  for (const line of [...load.unexpected, ...lost, ...check.corruption, ...check.invariants].slice(0, 20)) console.log(`[FT-6]   ${line}`);

  assert.equal(kills.length, KILLS);
  assert.deepEqual(load.unexpected, [], `every write the process answered succeeded:\n${s.output.slice(-4000)}`);
  for (let life = 0; life <= KILLS; life++) assert.ok(load.acksInLife(life) >= ACKS_BEFORE_KILL, `start ${life} acknowledged writes`);
  assert.deepEqual(lost, [], 'acknowledged writes lost');
  assert.deepEqual(check.corruption, [], 'amcheck and a full read of every table find nothing corrupt');
  assert.deepEqual(check.invariants, [], 'every user has its password identity, profile, settings and member role; every migration recorded');
});
