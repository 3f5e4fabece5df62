// One HTTP attempt of a delivery through undici. The connection's DNS lookup goes through the
// target rules, so the address dialled is the one just validated (pinned); redirects are never
// followed; the whole attempt (connect, headers, error body) ends by a 5-second deadline.
import { Agent, buildConnector, request } from 'undici';
import { isIP } from 'node:net';
import type { Deps } from '../../context.js';
import { ApiError } from '../../errors.js';
import { DELIVERY_TIMEOUT_MS, ERROR_BODY_BYTES } from './catalog.js';
import { hostOf } from '../../http/validation.js';
import { checkUrlShape, isPublicAddress, resolvePublic, resolverFor, TargetRefused } from './targets.js';

export interface AttemptRequest {
  url: string;
  headers: Record<string, string>;
  body: string;
}

export interface AttemptResult {
  ok: boolean;
  /** null when no response arrived (refused target, connection error, timeout). */
  responseStatus: number | null;
  durationMs: number;
  /** The first 1 KB of a non-2xx body, or what went wrong. */
  error: string | null;
}

type LookupCallback = (err: NodeJS.ErrnoException | null, address: string | { address: string; family: number }[], family?: number) => void;

const agents = new WeakMap<Deps, Agent>();

function agentFor(deps: Deps): Agent {
  let agent = agents.get(deps);
  if (agent) return agent;
  // net/tls call this for host names (never for IP literals, which are checked before dialling).
  const lookup = (hostname: string, options: { all?: boolean }, callback: LookupCallback) => {
    const resolve = deps.config.webhookAllowPrivateTargets ? resolverFor(deps)(hostname) : resolvePublic(resolverFor(deps), hostname);
    resolve.then(
      (addresses) => {
        if (addresses.length === 0) return callback(Object.assign(new Error(`${hostname} does not resolve`), { code: 'ENOTFOUND' }), '');
        if (options?.all) callback(null, [addresses[0]]);
        else callback(null, addresses[0].address, addresses[0].family);
      },
      (err) => callback(err, ''),
    );
  };
  const base = buildConnector({ timeout: DELIVERY_TIMEOUT_MS, lookup } as buildConnector.BuildOptions);
  // Belt and braces: whatever was dialled, a socket to a non-public peer is closed unused.
  const connect: buildConnector.connector = (opts, callback) =>
    base(opts, (err, socket) => {
      if (err || !socket) return callback(err ?? new Error('no socket'), null);
      const peer = socket.remoteAddress;
      if (!deps.config.webhookAllowPrivateTargets && peer && !isPublicAddress(peer)) {
        socket.destroy();
        // The words of a private DNS answer, without the peer: a refusal never discloses where a name led.
        return callback(new TargetRefused(`${opts.hostname} does not resolve to public addresses only`), null);
      }
      callback(null, socket);
    });
  agent = new Agent({ connect, keepAliveTimeout: 4000, headersTimeout: DELIVERY_TIMEOUT_MS, bodyTimeout: DELIVERY_TIMEOUT_MS });
  agents.set(deps, agent);
  return agent;
}

/** Closes this instance's connections (worker stop, tests). */
export async function closeWebhookTransport(deps: Deps): Promise<void> {
  const agent = agents.get(deps);
  agents.delete(deps);
  await agent?.destroy().catch(() => undefined);
}

function describe(err: unknown): string {
  if (err instanceof TargetRefused) return `refused: ${err.reason}`;
  const e = err as { name?: string; code?: string; message?: string; cause?: { code?: string; message?: string } };
  const timeouts = ['UND_ERR_ABORTED', 'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT', 'UND_ERR_CONNECT_TIMEOUT'];
  if (e?.name === 'TimeoutError' || e?.name === 'AbortError' || timeouts.includes(e?.code ?? '')) return `timeout: no 2xx response within ${DELIVERY_TIMEOUT_MS / 1000} seconds`;
  const cause = e?.cause instanceof TargetRefused ? e.cause : null;
  if (cause) return `refused: ${cause.reason}`;
  return `${e?.code ?? e?.name ?? 'error'}: ${e?.message ?? String(err)}`.slice(0, ERROR_BODY_BYTES);
}

/**
 * What may be stored as an attempt's error: a receiver's bytes are text, but PostgreSQL text refuses
 * U+0000, and one refused row would fail the whole batch of outcomes; it is kept as U+FFFD instead.
 */
const storable = (text: string): string => {
  const kept = text.replace(/\u0000/g, '\uFFFD');
  const cut = kept.slice(0, ERROR_BODY_BYTES);
  // A cut between the two halves of a surrogate pair would store U+FFFD for the half character.
  return cut.length < kept.length && /[\uD800-\uDBFF]$/.test(cut) ? cut.slice(0, -1) : cut;
};

/**
 * The first ERROR_BODY_BYTES bytes as text, cut between characters: bytes of a character cut in two
 * would decode as U+FFFD, a character the receiver never sent. A UTF-8 character is at most 4 bytes,
 * so at most 3 continuation bytes are dropped (bytes that are not UTF-8 are cut where they fall).
 */
function utf8Prefix(bytes: Buffer): string {
  let end = Math.min(bytes.length, ERROR_BODY_BYTES);
  for (let dropped = 0; end < bytes.length && dropped < 3 && end > 0 && (bytes[end]! & 0xc0) === 0x80; dropped++) end--;
  return bytes.subarray(0, end).toString('utf8');
}

async function readPrefix(body: AsyncIterable<Buffer> & { destroy(): void }): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of body) {
      chunks.push(chunk);
      size += chunk.length;
      if (size >= ERROR_BODY_BYTES) break;
    }
  } catch {
    /* a timeout or reset while reading keeps what arrived */
  } finally {
    body.destroy();
  }
  return utf8Prefix(Buffer.concat(chunks));
}

/** POSTs once. Success is a 2xx within the deadline; 3xx and everything else fail. Never throws. */
export async function postAttempt(deps: Deps, req: AttemptRequest): Promise<AttemptResult> {
  const started = performance.now();
  const elapsed = () => Math.round(performance.now() - started);
  const signal = AbortSignal.timeout(DELIVERY_TIMEOUT_MS);
  try {
    const url = checkUrlShape(req.url, deps.config.webhookAllowPrivateTargets);
    if (!deps.config.webhookAllowPrivateTargets) {
      const host = hostOf(url);
      if (!isPublicAddressOrName(host)) throw new TargetRefused(`${host} is not a public address`);
    }
    const res = await request(url, { dispatcher: agentFor(deps), method: 'POST', headers: req.headers, body: req.body, signal });
    if (res.statusCode >= 200 && res.statusCode < 300) {
      res.body.dump({ signal, limit: 64 * 1024 }).catch(() => undefined);
      return { ok: true, responseStatus: res.statusCode, durationMs: elapsed(), error: null };
    }
    const text = await readPrefix(res.body as unknown as AsyncIterable<Buffer> & { destroy(): void });
    const error = res.statusCode >= 300 && res.statusCode < 400 ? `redirect ${res.statusCode} not followed${text ? `: ${text}` : ''}` : text || `HTTP ${res.statusCode}`;
    return { ok: false, responseStatus: res.statusCode, durationMs: elapsed(), error: storable(error) };
  } catch (err) {
    if (err instanceof ApiError) return { ok: false, responseStatus: null, durationMs: elapsed(), error: storable(`refused: ${String(err.details.reason ?? err.message)}`) };
    return { ok: false, responseStatus: null, durationMs: elapsed(), error: storable(describe(err)) };
  }
}

/** A literal address must be public; a name is checked when the connection resolves it. */
const isPublicAddressOrName = (host: string): boolean => isIP(host) === 0 || isPublicAddress(host);
