// Helpers of the operations tests (storage, dev clock, jobs, mail, CLI): a second "process" over the
// same database, a cuttable TCP proxy in front of PostgreSQL, a local SMTP server and a tiny MIME body decoder.
import net from 'node:net';
import { SMTPServer, type SMTPServerOptions } from 'smtp-server';
import { randomBytes } from 'node:crypto';
import { SystemClock } from '../../../src/clock.js';
import { openPg } from '../../../src/db/pg.js';
import type { Database } from '../../../src/db/types.js';
import { buildApp } from '../../../src/app.js';
import type { boot } from '../../../src/boot.js';
import type { Config } from '../../../src/config.js';
import type { Deps } from '../../../src/context.js';
import type { App } from '../../../src/modules/types.js';
import { TEST_DATABASE_URL, type TestApp } from '../../helpers/app.js';

export const freshSchemaName = (label = 'ops') => `t_${label}_${randomBytes(5).toString('hex')}`;

/**
 * Another connection to the database of `t`, as a second process would have: on PostgreSQL a
 * database object with its own pools on the same schema; on PGlite the one in-process database.
 */
export async function sameDatabase(t: TestApp): Promise<{ database: Database; close: () => Promise<void> }> {
  if (!TEST_DATABASE_URL) return { database: t.database, close: async () => undefined };
  const database = await openPg({ url: TEST_DATABASE_URL, schema: t.schema!, poolSize: 2 });
  return { database, close: () => database.close() };
}

export interface SecondProcess {
  app: App;
  deps: Deps;
  clock: SystemClock;
  close(): Promise<void>;
}

/** The service built a second time over the database of `t`, with its own clock (no migrations, no jobs). */
export async function secondProcess(t: TestApp, overrides: Partial<Config> = {}): Promise<SecondProcess> {
  const { database, close } = await sameDatabase(t);
  const clock = new SystemClock();
  const { app, deps } = await buildApp({ config: Object.freeze({ ...t.config, ...overrides }), database, clock, logger: false });
  await deps.secrets.ensure(); // as boot() does: the signing keys are stored sealed
  await deps.keys.reload();
  await app.ready();
  return {
    app,
    deps,
    clock,
    close: async () => {
      await app.close();
      await deps.jobs.stop();
      await close();
    },
  };
}

/** A service started by boot() (as src/main.ts starts one), in the storage tests. */
export type Booted = Awaited<ReturnType<typeof boot>>;

export async function closeBooted(...booted: Booted[]) {
  for (const b of booted) {
    await b.app.close();
    await b.deps.jobs.stop();
  }
}

/**
 * A TCP proxy to a PostgreSQL server that can be cut (listener closed, live sockets destroyed) and
 * restored, or stalled: every connection stays open but nothing more passes either way, as when the
 * server's host vanishes from the network (a failover, a partition) without closing a connection.
 */
export class CuttableProxy {
  private server: net.Server | null = null;
  private readonly sockets = new Set<net.Socket>();
  private stalled = false;
  port = 0;

  stall(): void {
    this.stalled = true;
  }

  resume(): void {
    this.stalled = false;
  }

  constructor(
    private readonly targetHost: string,
    private readonly targetPort: number,
  ) {}

  async open(): Promise<void> {
    const server = net.createServer((client) => {
      const upstream = net.connect(this.targetPort, this.targetHost);
      for (const s of [client, upstream]) {
        this.sockets.add(s);
        s.on('close', () => this.sockets.delete(s));
        s.on('error', () => {
          client.destroy();
          upstream.destroy();
        });
      }
      // What arrives while stalled is dropped, as a vanished host's packets are.
      client.on('data', (chunk) => this.stalled || upstream.write(chunk));
      upstream.on('data', (chunk) => this.stalled || client.write(chunk));
      client.on('end', () => upstream.end());
      upstream.on('end', () => client.end());
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.port, '127.0.0.1', () => {
        server.off('error', reject);
        resolve();
      });
    });
    this.port = (server.address() as net.AddressInfo).port;
    this.server = server;
  }

  async cut(): Promise<void> {
    const server = this.server;
    this.server = null;
    for (const s of this.sockets) s.destroy();
    this.sockets.clear();
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  /** `url` with its host and port replaced by this proxy's. */
  urlFor(url: string): string {
    const u = new URL(url);
    u.hostname = '127.0.0.1';
    u.port = String(this.port);
    return u.toString();
  }
}

/**
 * An SMTP server on 127.0.0.1 and a free port, without TLS or authentication, answering as
 * `handlers` say; `url` is its SMTP_URL.
 */
export async function localSmtp(handlers: Pick<SMTPServerOptions, 'onMailFrom' | 'onRcptTo' | 'onData'>) {
  const server = new SMTPServer({ authOptional: true, disabledCommands: ['STARTTLS', 'AUTH'], logger: false, ...handlers });
  const port = await new Promise<number>((resolve, reject) => {
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => resolve((server.server.address() as net.AddressInfo).port));
  });
  return { url: `smtp://127.0.0.1:${port}`, close: () => new Promise<void>((r) => server.close(() => r())) };
}

/** Collects a message's DATA and calls `then` with it as text (latin1: decodeMessage reads the MIME). */
export function onMessage(stream: NodeJS.ReadableStream, then: (raw: string) => void): void {
  const chunks: Buffer[] = [];
  stream.on('data', (c: Buffer) => chunks.push(c));
  stream.on('end', () => then(Buffer.concat(chunks).toString('latin1')));
}

/** The decoded text body of a single-part RFC 5322 message (7bit, quoted-printable or base64). */
export function decodeMessage(raw: string): { headers: Record<string, string>; text: string } {
  const split = raw.search(/\r?\n\r?\n/);
  const head = raw.slice(0, split).replace(/\r?\n[ \t]+/g, ' ');
  const body = raw.slice(split).replace(/^\r?\n\r?\n/, '');
  const headers: Record<string, string> = {};
  for (const line of head.split(/\r?\n/)) {
    const i = line.indexOf(':');
    if (i > 0) headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
  }
  const encoding = (headers['content-transfer-encoding'] ?? '7bit').toLowerCase();
  let text: string;
  if (encoding === 'quoted-printable') {
    const bytes = body.replace(/=\r?\n/g, '').replace(/=([0-9A-Fa-f]{2})/g, (_m, h: string) => String.fromCharCode(parseInt(h, 16)));
    text = Buffer.from(bytes, 'latin1').toString('utf8');
  } else if (encoding === 'base64') {
    text = Buffer.from(body.replace(/\s+/g, ''), 'base64').toString('utf8');
  } else {
    text = body;
  }
  return { headers, text };
}

/** Every http(s) link of a text whose query has token=<token>. */
export function tokenLinks(text: string, token: string): URL[] {
  return (text.match(/https?:\/\/[^\s<>"]+/g) ?? []).map((l) => new URL(l)).filter((u) => u.searchParams.get('token') === token);
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
