// A dialer hook for the SSRF tests (WH-6, WH-7): while installed, every outbound connection the
// webhook transport opens (undici -> tls.connect / net.connect) is recorded with the address it is
// about to dial, and nothing outside loopback is ever dialled. "Public" test addresses listed in
// `publicToLoopback` are routed to a loopback receiver on the same port (the socket reports the
// public address as its peer), so a receiver can play a public host without leaving the machine.
import net from 'node:net';
import tls from 'node:tls';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isPublicAddress } from '../../../src/modules/webhooks/targets.js';

export interface Dial {
  /** Host name or literal the caller asked for. */
  host: string;
  port: number;
  /** The IP the socket would connect to (after the caller's own lookup), or null if none was reached. */
  address: string | null;
  /** What the hook did: routed to a loopback receiver, passed through to loopback, or blocked. */
  action: 'routed' | 'loopback' | 'blocked' | 'lookup-refused';
}

type LookupCallback = (err: NodeJS.ErrnoException | null, address: string | { address: string; family: number }[], family?: number) => void;
type LookupFn = (hostname: string, options: { all?: boolean }, callback: LookupCallback) => void;

const isLoopback = (a: string) => /^127\./.test(a) || a === '::1' || a === '::ffff:127.0.0.1';
const refusal = (what: string) => Object.assign(new Error(`test dialer: ${what} is never dialled`), { code: 'ECONNREFUSED' });

export class Dialer {
  readonly dials: Dial[] = [];
  /** Public test addresses served by a loopback receiver on the same port. */
  readonly publicToLoopback = new Set<string>();
  /** Trust anchor for the loopback TLS receivers. */
  ca: string | null = null;
  /** A name routed to loopback reports its public address as the socket's peer; off, the real peer (127.0.0.1) shows. */
  disguisePeers = true;
  private restore: (() => void) | null = null;

  /** Dials (or attempts) to an address that is not publicly routable. */
  internal(): Dial[] {
    return this.dials.filter((d) => d.address !== null && !isPublicAddress(d.address));
  }

  install(): void {
    const realTls = tls.connect;
    const realNet = net.connect;
    const hook = (real: (...args: any[]) => net.Socket, secure: boolean) =>
      ((...args: any[]) => {
        const options = typeof args[0] === 'object' && args[0] !== null ? { ...args[0] } : null;
        if (!options || typeof options.host !== 'string') return real(...args);
        return this.dial(real, options, secure);
      }) as any;
    tls.connect = hook(realTls as any, true);
    net.connect = hook(realNet as any, false);
    this.restore = () => {
      tls.connect = realTls;
      net.connect = realNet;
    };
  }

  uninstall(): void {
    this.restore?.();
    this.restore = null;
  }

  private dial(real: (...args: any[]) => net.Socket, options: Record<string, any>, secure: boolean): net.Socket {
    const host: string = options.host.replace(/^\[|\]$/g, '');
    const port = Number(options.port);
    const record: Dial = { host, port, address: null, action: 'lookup-refused' };
    this.dials.push(record);
    if (secure && this.ca) options.ca = this.ca;

    if (net.isIP(host)) {
      record.address = host;
      if (this.publicToLoopback.has(host)) return this.routed(real, { ...options, host: '127.0.0.1' }, record, host);
      if (isLoopback(host)) {
        record.action = 'loopback';
        return real(options);
      }
      record.action = 'blocked';
      return failedSocket(refusal(host));
    }

    // A name: the caller's lookup decides the address (that is where the transport validates it).
    const lookup: LookupFn = options.lookup ?? ((_h, _o, cb) => cb(refusal(`DNS for ${host}`), ''));
    let spoofPeer: string | null = null;
    options.lookup = ((hostname: string, opts: { all?: boolean }, callback: LookupCallback) => {
      lookup(hostname, opts, (err, address, family) => {
        if (err) return callback(err, '');
        const first = Array.isArray(address) ? address[0] : { address, family: family ?? 4 };
        record.address = first.address;
        let target = first;
        if (this.publicToLoopback.has(first.address)) {
          record.action = 'routed';
          spoofPeer = this.disguisePeers ? first.address : null;
          target = { address: '127.0.0.1', family: 4 };
        } else if (isLoopback(first.address)) {
          record.action = 'loopback';
        } else {
          record.action = 'blocked';
          return callback(refusal(first.address), '');
        }
        if (opts?.all) callback(null, [target]);
        else callback(null, target.address, target.family);
      });
    }) as LookupFn;
    const socket = real(options);
    const realPeer = Object.getOwnPropertyDescriptor(net.Socket.prototype, 'remoteAddress')!.get!;
    Object.defineProperty(socket, 'remoteAddress', { get: () => spoofPeer ?? realPeer.call(socket) });
    return socket;
  }

  private routed(real: (...args: any[]) => net.Socket, options: Record<string, any>, record: Dial, peer: string): net.Socket {
    record.action = 'routed';
    const socket = real(options);
    Object.defineProperty(socket, 'remoteAddress', { get: () => peer });
    return socket;
  }
}

/** A socket that fails on the next tick without touching the network. */
function failedSocket(err: Error): net.Socket {
  const socket = new net.Socket();
  process.nextTick(() => socket.destroy(err));
  return socket;
}

/** A throw-away self-signed certificate for these names (openssl, EC P-256, valid 2 days). */
export function selfSignedCertificate(names: string[]): { key: string; cert: string } {
  const dir = mkdtempSync(join(tmpdir(), 'wh-tls-'));
  try {
    execFileSync('openssl', [
      'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '2',
      '-subj', `/CN=${names[0]}`, '-addext', `subjectAltName=${names.map((n) => `DNS:${n}`).join(',')}`,
      '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem'),
    ], { stdio: 'ignore' });
    return { key: readFileSync(join(dir, 'key.pem'), 'utf8'), cert: readFileSync(join(dir, 'cert.pem'), 'utf8') };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
