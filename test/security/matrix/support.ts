// Small readers shared by the AZ-1 and AZ-6 suites: the document's operations, the router's routes,
// and the outcome (status and error code) of a response.
import type { TestApp } from '../../helpers/app.js';
import { sql, type InjectResponse } from '../../helpers/http.js';
import type { Outcome } from './expectations.js';
import type { DocOp } from './derive.js';

const HTTP_METHODS = ['get', 'put', 'post', 'delete', 'patch', 'options', 'trace'];

export interface DocOperation {
  /** `METHOD /path` with OpenAPI `{param}` placeholders. */
  key: string;
  method: string;
  path: string;
  op: DocOp & Record<string, any>;
}

export function docOperations(doc: any): DocOperation[] {
  const out: DocOperation[] = [];
  for (const [path, item] of Object.entries<any>(doc.paths ?? {})) {
    for (const method of Object.keys(item)) {
      if (HTTP_METHODS.includes(method)) out.push({ key: `${method.toUpperCase()} ${path}`, method: method.toUpperCase(), path, op: item[method] });
    }
  }
  return out;
}

/**
 * The router's routes from Fastify's route tree (printRoutes, without common-prefix compression),
 * in OpenAPI notation. HEAD is left out where Fastify adds it to a GET route.
 */
export function servedRoutes(app: TestApp['app']): { method: string; path: string }[] {
  const stack: string[] = [];
  const out: { method: string; path: string }[] = [];
  for (const line of app.printRoutes({ commonPrefix: false }).split('\n')) {
    const m = /^(.*?)(?:├── |└── )(\S+)(?: \(([^)]*)\))?\s*$/.exec(line);
    if (!m) continue;
    const depth = Math.round([...m[1]].length / 4);
    stack.length = depth;
    const url = (stack[depth - 1] ?? '') + m[2];
    stack[depth] = url;
    const methods = (m[3] ?? '').split(',').map((s) => s.trim().toUpperCase()).filter(Boolean);
    for (const method of methods) {
      if (method === 'HEAD' && methods.includes('GET')) continue;
      out.push({ method, path: url.replace(/:([A-Za-z0-9_]+)/g, '{$1}') });
    }
  }
  return out;
}

/** Status and error code: `error.code` of the envelope, or `error` of the OAuth shape. */
export function outcomeOf(res: InjectResponse): Outcome {
  let code: string | undefined;
  if (String(res.headers['content-type'] ?? '').includes('json') && res.body) {
    try {
      const body = JSON.parse(res.body);
      code = typeof body?.error === 'string' ? body.error : typeof body?.error?.code === 'string' ? body.error.code : undefined;
    } catch {
      code = undefined;
    }
  }
  return { status: res.statusCode, code };
}

/** Audit rows, outbox events and emails written since `since` (the service clock is the wall clock here). */
export async function writtenSince(t: TestApp, since: Date): Promise<number> {
  const rows = await sql<{ n: number }>(
    t,
    `SELECT ((SELECT count(*) FROM audit_events WHERE created_at >= $1) + (SELECT count(*) FROM outbox_events WHERE created_at >= $1)
           + (SELECT count(*) FROM emails WHERE created_at >= $1))::int AS n`,
    [since],
  );
  return rows[0].n;
}
