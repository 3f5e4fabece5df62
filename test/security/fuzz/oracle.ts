// The checks every fuzzed answer must pass, all derived from the published OpenAPI document: the
// status is documented for the operation, no 5xx (beyond the documented 501/503 codes), non-2xx
// bodies match the documented error schema (the envelope, or RFC 6749 at the OAuth token endpoint)
// with a code whose table status is the status sent and which the operation's response for that
// status names, 2xx bodies validate against the response schema, and a request the published schema
// rejects is never accepted.
import Ajv, { type ValidateFunction } from 'ajv';
import addFormats from 'ajv-formats';
import type { InjectResponse } from '../../helpers/http.js';
import type { Operation } from './operations.js';
import { querySchema, type Sent } from './requests.js';
import type { Schema } from './schema-arbitraries.js';

export type FindingKind = '5xx' | 'undocumented-status' | 'non-envelope' | 'error-code' | 'response-schema' | 'content-type' | 'accepted-invalid' | 'harness';
export const SCHEMA_KINDS: FindingKind[] = ['non-envelope', 'error-code', 'response-schema', 'content-type'];

export interface Finding {
  kind: FindingKind;
  status: number;
  code: string;
  detail: string;
}

const ENVELOPE_REF = { $ref: 'oas#/components/schemas/ErrorEnvelope' };

/** The codes an error response's description names: `code: why; code; …`. */
const namedCodes = (description: unknown): string[] => String(description ?? '').split('; ').map((text) => text.split(':')[0]);

function newAjv(coerceTypes: boolean | 'array'): Ajv.default {
  const ajv = new Ajv.default({ strict: false, allErrors: false, coerceTypes, useDefaults: true, validateFormats: true });
  addFormats.default(ajv);
  return ajv;
}

/** Rewrites local component references so they resolve against the registered document. */
function rebase(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(rebase);
  if (!schema || typeof schema !== 'object') return schema;
  return Object.fromEntries(Object.entries(schema).map(([k, v]) => [k, k === '$ref' && typeof v === 'string' ? v.replace(/^#\//, 'oas#/') : rebase(v)]));
}

export class Oracle {
  private readonly responses = newAjv(false);
  private readonly bodies = newAjv(false);
  private readonly texts = newAjv('array');
  private readonly cache = new Map<string, ValidateFunction>();
  readonly errorCodes: Record<string, { status: number }>;

  constructor(readonly doc: any) {
    this.responses.addSchema({ $id: 'oas', components: doc.components });
    this.errorCodes = doc['x-error-codes'] ?? {};
  }

  private compiled(ajv: Ajv.default, key: string, schema: Schema): ValidateFunction {
    let fn = this.cache.get(key);
    if (!fn) this.cache.set(key, (fn = ajv.compile(rebase(schema) as object)));
    return fn;
  }

  /** Why the request breaks its published schema (body, query, path, headers), or null when it does not. */
  requestViolation(op: Operation, sent: Sent): string | null {
    const clone = (v: unknown) => (v === undefined ? undefined : JSON.parse(JSON.stringify(v)));
    if (op.body) {
      const body = sent.body === undefined ? (op.body.required ? undefined : {}) : clone(sent.body);
      if (body === undefined) return 'body: required and missing';
      const validate = this.compiled(this.bodies, `req-body ${op.key}`, op.body.schema);
      if (!validate(body)) return `body: ${this.bodies.errorsText(validate.errors)}`;
    }
    if (op.queryParams.length) {
      const query: Record<string, unknown> = {};
      for (const k of new Set(sent.query.keys())) {
        const all = sent.query.getAll(k);
        query[k] = all.length > 1 ? all : all[0];
      }
      const validate = this.compiled(this.texts, `req-query ${op.key}`, querySchema(op));
      if (!validate(query)) return `query: ${this.texts.errorsText(validate.errors)}`;
    }
    for (const p of op.pathParams) {
      const validate = this.compiled(this.texts, `req-path ${op.key} ${p.name}`, p.schema);
      if (!validate(sent.params[p.name])) return `path.${p.name}: ${this.texts.errorsText(validate.errors)}`;
    }
    for (const p of op.headerParams) {
      const value = sent.headers[p.name.toLowerCase()];
      if (value === undefined || value === '') {
        if (p.required) return `header ${p.name}: required and missing`;
        continue;
      }
      const validate = this.compiled(this.texts, `req-header ${op.key} ${p.name}`, p.schema);
      if (!validate(value)) return `header ${p.name}: ${this.texts.errorsText(validate.errors)}`;
    }
    return null;
  }

  /** Every rule the answer breaks; `documented5xx` reports 501/503 answers the document promises. */
  check(op: Operation, sent: Sent, res: InjectResponse): { findings: Finding[]; documented5xx: boolean } {
    const findings: Finding[] = [];
    const status = res.statusCode;
    const documented = op.doc.responses?.[String(status)];
    const media = String(res.headers['content-type'] ?? '').split(';')[0].trim();
    let json: any;
    try {
      json = res.body ? JSON.parse(res.body) : undefined;
    } catch {
      json = undefined;
    }
    const code = typeof json?.error === 'string' ? json.error : typeof json?.error?.code === 'string' ? json.error.code : media || 'no-body';
    const add = (kind: FindingKind, detail: string) => findings.push({ kind, status, code, detail });

    const tableStatus = this.errorCodes[json?.error?.code]?.status;
    const promised5xx = status >= 500 && !!documented && tableStatus === status && json?.error?.code !== 'internal_error';
    // A 5xx is reported as such (and counted as undocumented too), not listed twice.
    if (status >= 500 && !promised5xx) add('5xx', `${json?.error?.code ?? res.body.slice(0, 120)}${documented ? '' : ' (undocumented status)'}`);
    else if (!documented) add('undocumented-status', `documented: ${Object.keys(op.doc.responses ?? {}).join(', ')}`);

    const promisedMedia = Object.keys(documented?.content ?? {});
    if (status >= 400 && promisedMedia.length > 0 && !promisedMedia.includes('application/json') && promisedMedia.includes(media)) {
      // The document promises another shape for this answer (an HTML page for people): nothing more to check.
    } else if (status >= 400) {
      const schema = documented?.content?.['application/json']?.schema ?? ENVELOPE_REF;
      const validate = this.compiled(this.responses, `res ${op.key} ${documented ? status : 'envelope'}`, schema);
      const matches = json !== undefined && validate(json);
      if (media !== 'application/json' || json === undefined) add('non-envelope', `content-type ${media || 'none'}: ${res.body.slice(0, 80)}`);
      else if (!matches) add('non-envelope', this.responses.errorsText(validate.errors));
      else if (json.error?.code !== undefined && tableStatus !== status) {
        add('error-code', tableStatus === undefined ? `code ${json.error.code} is not in x-error-codes` : `code ${json.error.code} is ${tableStatus} in x-error-codes`);
      } else if (documented && json.error?.code !== undefined && !namedCodes(documented.description).includes(json.error.code)) {
        // A client branches on the codes the operation names ("code: why; code"), not on the global table.
        add('error-code', `code ${json.error.code} is not named in the documented ${status} (${documented.description})`);
      }
    } else if (status >= 200 && status < 300 && documented) {
      const content = documented.content ?? {};
      const mediaTypes = Object.keys(content);
      if (mediaTypes.length === 0) {
        if (res.body.length > 0 && status === 204) add('response-schema', `204 with a body: ${res.body.slice(0, 80)}`);
      } else if (!mediaTypes.includes(media)) {
        add('content-type', `content-type ${media || 'none'}, documented ${mediaTypes.join(', ')}`);
      } else if (media === 'application/json') {
        const validate = this.compiled(this.responses, `res ${op.key} ${status} ${media}`, content[media].schema ?? {});
        if (json === undefined || !validate(json)) add('response-schema', json === undefined ? 'body is not JSON' : this.responses.errorsText(validate.errors));
      }
    }
    return { findings, documented5xx: promised5xx };
  }
}
