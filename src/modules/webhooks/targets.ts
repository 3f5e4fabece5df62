// Where a webhook may be sent (SSRF rules): https, no userinfo, and only public addresses, checked
// when a subscription is created or its url changes AND on every delivery connection, so a name that
// later resolves to an internal address (DNS rebinding) is never dialled.
import { lookup as dnsLookup } from 'node:dns/promises';
import { isIP, isIPv4, isIPv6 } from 'node:net';
import type { Deps } from '../../context.js';
import { ApiError } from '../../errors.js';
import { hostOf, parseUrlAsSent } from '../../http/validation.js';

export interface ResolvedAddress {
  address: string;
  family: number;
}
/** Resolves a host name to every address it has (the injection point tests use instead of DNS). */
export type Resolver = (hostname: string) => Promise<ResolvedAddress[]>;

const systemResolver: Resolver = (hostname) => dnsLookup(hostname, { all: true, verbatim: true });
const resolvers = new WeakMap<Deps, Resolver>();

/** Replaces DNS for this service instance's webhook checks and connections (tests, embedding). */
export function setWebhookResolver(deps: Deps, resolver: Resolver | null): void {
  if (resolver) resolvers.set(deps, resolver);
  else resolvers.delete(deps);
}
export const resolverFor = (deps: Deps): Resolver => resolvers.get(deps) ?? systemResolver;

// IPv4 ranges that are not publicly routable: this network, private, shared (CGNAT), loopback,
// link-local, IETF protocol assignments, documentation, 6to4 relay, benchmarking, multicast, reserved.
const IPV4_BLOCKED: [number, number][] = [
  ['0.0.0.0', 8], ['10.0.0.0', 8], ['100.64.0.0', 10], ['127.0.0.0', 8], ['169.254.0.0', 16], ['172.16.0.0', 12],
  ['192.0.0.0', 24], ['192.0.2.0', 24], ['192.88.99.0', 24], ['192.168.0.0', 16], ['198.18.0.0', 15],
  ['198.51.100.0', 24], ['203.0.113.0', 24], ['224.0.0.0', 4], ['240.0.0.0', 4],
].map(([net, bits]) => [ipv4ToInt(net as string), bits as number]);

function ipv4ToInt(text: string): number {
  return text.split('.').reduce((n, part) => n * 256 + Number(part), 0);
}

function ipv4IsPublic(text: string): boolean {
  const n = ipv4ToInt(text);
  return !IPV4_BLOCKED.some(([net, bits]) => Math.floor(n / 2 ** (32 - bits)) === Math.floor(net / 2 ** (32 - bits)));
}

/** The 16 bytes of an IPv6 address (zone id dropped, embedded dotted IPv4 accepted), or null. */
export function ipv6Bytes(input: string): number[] | null {
  let text = input.split('%')[0];
  if (!isIPv6(text)) return null;
  const dotted = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text);
  if (dotted) {
    const [a, b, c, d] = dotted.slice(1).map(Number);
    text = `${text.slice(0, dotted.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  let groups: string[];
  if (text.includes('::')) {
    const [l, r] = text.split('::');
    const left = l ? l.split(':') : [];
    const right = r ? r.split(':') : [];
    groups = [...left, ...Array(8 - left.length - right.length).fill('0'), ...right];
  } else groups = text.split(':');
  if (groups.length !== 8) return null;
  return groups.flatMap((g) => {
    const n = parseInt(g, 16);
    return [n >> 8, n & 255];
  });
}

/**
 * Only global unicast (2000::/3) is public, minus IETF special-purpose (2001::/23, incl. Teredo),
 * documentation (2001:db8::/32, 3fff::/20) and 6to4 (2002::/16, it embeds an IPv4 address).
 * Everything else is refused: ::, ::1, IPv4-mapped ::ffff:0:0/96, NAT64 64:ff9b::/96,
 * unique-local fc00::/7, link-local fe80::/10, multicast ff00::/8.
 */
function ipv6IsPublic(bytes: number[]): boolean {
  if ((bytes[0] & 0xe0) !== 0x20) return false;
  const first = (bytes[0] << 8) | bytes[1];
  const second = (bytes[2] << 8) | bytes[3];
  if (first === 0x2001 && second < 0x0200) return false;
  if (first === 0x2001 && second === 0x0db8) return false;
  if (first === 0x2002) return false;
  if (first === 0x3fff && second < 0x1000) return false;
  return true;
}

/** True only for a publicly routable unicast address; anything unparsable is not public. */
export function isPublicAddress(address: string): boolean {
  const bare = address.replace(/^\[|\]$/g, '');
  if (isIPv4(bare)) return ipv4IsPublic(bare);
  const bytes = ipv6Bytes(bare);
  return bytes !== null && ipv6IsPublic(bytes);
}

export class TargetRefused extends Error {
  constructor(readonly reason: string) {
    super(reason);
  }
}

const invalid = (reason: string) => new ApiError('invalid_webhook_url', { message: `The webhook URL is not allowed: ${reason}.`, details: { reason } });

/**
 * The static rules (scheme, userinfo, literal and reserved hosts). The WHATWG parser has already
 * turned decimal, octal and hex IPv4 forms (2130706433, 0x7f000001, 017700000001, 127.1) into
 * dotted quads, so they meet the address check like any other literal.
 */
export function checkUrlShape(raw: string, allowPrivate: boolean): URL {
  const url = parseUrlAsSent(raw);
  if (!url) throw invalid('not an absolute URL (no white space or control characters)');
  const schemes = allowPrivate ? ['https:', 'http:'] : ['https:'];
  if (!schemes.includes(url.protocol)) throw invalid('the scheme must be https');
  if (url.username !== '' || url.password !== '' || /^[a-z][a-z0-9+.-]*:\/\/[^/?#]*@/i.test(raw)) throw invalid('credentials (userinfo) are not allowed');
  const host = hostOf(url);
  if (!host) throw invalid('no host');
  if (allowPrivate) return url;
  if (host === 'localhost' || host.endsWith('.localhost')) throw invalid('the host is not public');
  if (isIP(host) && !isPublicAddress(host)) throw invalid('the address is not public');
  return url;
}

/** How long a webhook host's name may take to resolve (a resolver's own retries can take 20 s and more). */
export const RESOLVE_DEADLINE_MS = 3000;

/**
 * Every address the host resolves to must be public (one private answer refuses it). A name that does
 * not resolve and one that resolves to a private address get the same words, without the address:
 * whoever may register a webhook must not learn the service's internal names and addresses from it.
 */
export async function resolvePublic(resolver: Resolver, host: string): Promise<ResolvedAddress[]> {
  if (isIP(host)) {
    if (!isPublicAddress(host)) throw new TargetRefused(`${host} is not a public address`);
    return [{ address: host, family: isIPv4(host) ? 4 : 6 }];
  }
  const notPublic = () => new TargetRefused(`${host} does not resolve to public addresses only`);
  let addresses: ResolvedAddress[];
  let timer: NodeJS.Timeout | undefined;
  // A resolver that does not answer is a name that does not resolve: the request waiting on it (a
  // create, a PATCH, a test send) is answered within the deadline instead of hanging with it.
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer for ${host} within ${RESOLVE_DEADLINE_MS} ms`)), RESOLVE_DEADLINE_MS);
  });
  try {
    addresses = await Promise.race([resolver(host), deadline]);
  } catch {
    throw notPublic();
  } finally {
    clearTimeout(timer);
  }
  if (addresses.length === 0 || addresses.some((a) => !isPublicAddress(a.address))) throw notPublic();
  return addresses;
}

/** Create / PATCH check: 422 invalid_webhook_url unless the URL may receive deliveries. */
export async function assertWebhookUrl(deps: Deps, raw: string): Promise<void> {
  const allowPrivate = deps.config.webhookAllowPrivateTargets;
  const url = checkUrlShape(raw, allowPrivate);
  if (allowPrivate) return;
  try {
    await resolvePublic(resolverFor(deps), hostOf(url));
  } catch (err) {
    if (err instanceof TargetRefused) throw invalid(err.reason);
    throw err;
  }
}
