// The operations of the OpenAPI document, flattened for the fuzzer, in the order they are fuzzed:
// operations that cannot damage the fixtures first, destructive ones (x-platform-destructive) last
// (DELETEs after the writes), and the ones that remove users or their roles at the very end.
import type { Schema } from './schema-arbitraries.js';

export interface Param {
  name: string;
  in: 'path' | 'query' | 'header';
  required: boolean;
  schema: Schema;
}

export interface Operation {
  key: string;
  method: string;
  path: string;
  doc: any;
  pathParams: Param[];
  queryParams: Param[];
  headerParams: Param[];
  body: { schema: Schema; required: boolean; media: string[] } | null;
  bearer: boolean;
  idempotency: 'required' | 'optional' | null;
  destructive: boolean;
  /** An API key may call it (no documented user_token_required answer). */
  keyAllowed: boolean;
}

const METHODS = ['get', 'put', 'post', 'patch', 'delete'];
// Last of all: these end users or their sessions, which every later operation would miss.
const LAST = [
  /^DELETE \/v1\/users\/\{id\}\/roles/, /^POST \/v1\/users\/\{id\}\/suspend$/, /^POST \/v1\/users\/\{id\}\/erasure-requests$/,
  /^DELETE \/v1\/users\/\{id\}\/erasure-requests\/current$/, /^DELETE \/v1\/users\/\{id\}$/,
];

export function operationsOf(doc: any): Operation[] {
  const ops: Operation[] = [];
  for (const [path, item] of Object.entries<any>(doc.paths ?? {})) {
    for (const method of METHODS) {
      const op = item[method];
      if (!op) continue;
      const params: Param[] = (op.parameters ?? []).map((p: any) => ({ name: p.name, in: p.in, required: !!p.required, schema: p.schema ?? {} }));
      const content = op.requestBody?.content ?? {};
      const media = Object.keys(content);
      const idem = params.find((p) => p.in === 'header' && p.name.toLowerCase() === 'idempotency-key');
      ops.push({
        key: `${method.toUpperCase()} ${path}`,
        method: method.toUpperCase(),
        path,
        doc: op,
        pathParams: params.filter((p) => p.in === 'path'),
        queryParams: params.filter((p) => p.in === 'query'),
        headerParams: params.filter((p) => p.in === 'header'),
        body: media.length ? { schema: content[media[0]].schema ?? {}, required: op.requestBody.required !== false, media } : null,
        bearer: Array.isArray(op.security) && op.security.length > 0,
        idempotency: idem ? (idem.required ? 'required' : 'optional') : null,
        destructive: !!op['x-platform-destructive'],
        keyAllowed: !/user_token_required/.test(op.responses?.['400']?.description ?? ''),
      });
    }
  }
  const rank = (o: Operation) => {
    const last = LAST.findIndex((re) => re.test(o.key));
    // Destructive writes that only change rows (entitlement PATCH, logout) before the DELETEs.
    return last >= 0 ? 3 + last : o.destructive ? (o.method === 'DELETE' ? 2 : 1) : 0;
  };
  return ops.sort((a, b) => rank(a) - rank(b) || a.key.localeCompare(b.key));
}

/** A non-JSON or empty answer that an operation documents (text/html pages, 204s). */
export function documentedMedia(op: Operation, status: number): string[] | null {
  const response = op.doc.responses?.[String(status)];
  if (!response) return null;
  return Object.keys(response.content ?? {});
}
