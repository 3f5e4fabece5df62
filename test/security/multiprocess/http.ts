// Real HTTP for the [MP] tests (undici): one keep-alive pool per origin with unlimited connections,
// so a burst of N requests runs on N sockets; network failures reject and the caller decides.
import { Agent, request } from 'undici';
import { unusedPort } from '../../helpers/ports.js';

export interface Reply {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  /** The body exactly as received (byte-identity checks compare this). */
  text: string;
  node: string;
  json(): any;
}

export interface CallOptions {
  /** A User access token or an API key secret. */
  token?: string | null;
  body?: unknown;
  headers?: Record<string, string>;
  /** Form body instead of JSON. */
  form?: Record<string, string>;
}

const agent = new Agent({ keepAliveTimeout: 10_000, connect: { timeout: 5_000 }, headersTimeout: 30_000, bodyTimeout: 30_000 });

/** One HTTP call to an origin; network failures reject (the caller decides whether to retry). */
export async function httpCall(base: string, node: string, method: string, path: string, opts: CallOptions = {}): Promise<Reply> {
  const headers: Record<string, string> = { ...(opts.headers ?? {}) };
  if (opts.token) headers.authorization = `Bearer ${opts.token}`;
  let body: string | undefined;
  if (opts.form) {
    headers['content-type'] = 'application/x-www-form-urlencoded';
    body = new URLSearchParams(opts.form).toString();
  } else if (opts.body !== undefined) {
    headers['content-type'] = 'application/json';
    body = JSON.stringify(opts.body);
  }
  const res = await request(`${base}${path}`, { method: method as any, headers, body, dispatcher: agent });
  const text = await res.body.text();
  return {
    status: res.statusCode,
    headers: res.headers as Reply['headers'],
    text,
    node,
    json: () => JSON.parse(text),
  };
}

/**
 * A port for a server process to listen on: free, and below the kernel's ephemeral range, where no
 * other test process's listen(0) or outgoing connection can take it before the child listens (CI saw a
 * child exit with EADDRINUSE). See test/helpers/ports.ts.
 */
export const freePort = unusedPort;

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
