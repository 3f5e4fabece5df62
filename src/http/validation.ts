import Ajv, { type ErrorObject } from 'ajv';
import addFormats from 'ajv-formats';
import type { FastifySchemaCompiler } from 'fastify';
import { MAX_FIELD_ERRORS } from '../errors.js';
import { NOT_BLANK } from './schemas.js';
import { linearUniqueItems } from './unique-items.js';

const build = (coerceTypes: boolean | 'array') => {
  const ajv = new Ajv.default({
    allErrors: true,
    coerceTypes,
    useDefaults: true,
    removeAdditional: false,
    strict: false,
  });
  addFormats.default(ajv);
  ajv.addFormat('date-time', { type: 'string', validate: isStorableDateTime });
  ajv.addKeyword({ keyword: 'x-extensible-enum' });
  linearUniqueItems(ajv);
  return ajv;
};

const DATE_TIME = /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?(?:[Zz]|([+-])(\d{2}):(\d{2}))$/;

/**
 * RFC 3339 date-time that PostgreSQL's timestamptz stores as sent: years 0001–9999, a real calendar
 * day, no leap second (:60, which the database refuses) and a UTC offset of at most 15:59 (its limit).
 * The instant itself lies in years 0001–9999 in UTC too: `9999-12-31T23:59:59-15:59` is in year 10000
 * (no four-digit UTC form to answer with; the database refused it after the checks, naming no field).
 */
export function isStorableDateTime(text: string): boolean {
  const m = DATE_TIME.exec(text);
  if (!m) return false;
  const [year, month, day, hour, minute, second] = m.slice(1, 7).map(Number);
  if (year < 1 || month < 1 || month > 12 || day < 1 || hour > 23 || minute > 59 || second > 59) return false;
  if (day > new Date(Date.UTC(year, month, 0)).getUTCDate()) return false;
  if (m[8] === undefined) return true;
  const [offsetHours, offsetMinutes] = [Number(m[9]), Number(m[10])];
  if (offsetHours > 15 || offsetMinutes > 59) return false;
  // setUTCFullYear, not Date.UTC, which reads years 0–99 as 1900–1999.
  const utc = new Date(0);
  utc.setUTCFullYear(year, month - 1, day);
  utc.setUTCHours(hour, minute - (m[8] === '-' ? -1 : 1) * (offsetHours * 60 + offsetMinutes), second);
  return utc.getUTCFullYear() >= 1 && utc.getUTCFullYear() <= 9999;
}

// Bodies are JSON and keep their types ("true" is not a boolean); query strings and path
// parameters arrive as text and are coerced.
const bodyAjv = build(false);
const textAjv = build('array');

/** An email address as every request body checks it (format email, at most 320 characters). */
export const isEmailAddress = bodyAjv.compile({ type: 'string', format: 'email', maxLength: 320 }) as (value: unknown) => boolean;

// Ajv coerces any text JavaScript reads as a number: "0x10" is 16, "1e1" 10, "+5" 5, "2.0" 2 and a
// blank 0. A query integer (`limit`) is written in decimal digits; anything else is not an integer.
const DECIMAL_INTEGER = /^-?[0-9]+$/;

/** The names of the properties of `schema` typed integer (a query's `limit`), once per route. */
function integerProperties(schema: { properties?: Record<string, { type?: unknown }> }): string[] {
  return Object.entries(schema.properties ?? {}).filter(([, property]) => property.type === 'integer').map(([name]) => name);
}

/** The Ajv errors of the text parameters `names` that are not decimal digits. */
function nonDecimalIntegers(names: string[], data: unknown): ErrorObject[] {
  if (!data || typeof data !== 'object') return [];
  const values = data as Record<string, unknown>;
  return names
    .filter((name) => typeof values[name] === 'string' && !DECIMAL_INTEGER.test(values[name] as string))
    .map((name) => ({ instancePath: `/${name}`, schemaPath: `#/properties/${name}/type`, keyword: 'type', params: { type: 'integer' }, message: 'must be integer' }));
}

export const validatorCompiler: FastifySchemaCompiler<any> = ({ schema, httpPart }) => {
  const validate = (httpPart === 'body' ? bodyAjv : textAjv).compile(schema as object);
  const plain = (data: unknown) => (validate(data) ? { value: data } : { error: validate.errors as unknown as Error });
  const integers = httpPart === 'body' ? [] : integerProperties(schema as object);
  if (integers.length === 0) return plain;
  return (data: unknown) => {
    const notDecimal = nonDecimalIntegers(integers, data);
    if (validate(data) && notDecimal.length === 0) return { value: data };
    const others = (validate.errors ?? []).filter((e) => !notDecimal.some((n) => n.instancePath === e.instancePath));
    return { error: [...notDecimal, ...others] as unknown as Error };
  };
};

// An unpaired UTF-16 surrogate has no UTF-8 form: stored or hashed, it silently becomes U+FFFD, so two
// different inputs (two passwords, say) would turn into the same text.
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
// A text that begins with U+FEFF comes back from the embedded database without it: PGlite decodes each
// value it returns with a TextDecoder, which takes a leading U+FEFF for a byte order mark and drops it
// (a display_name of "\uFEFF" read back empty). As a first character it is one, never content.
const unstorable = (text: string): string | null =>
  text.includes('\u0000')
    ? 'must not contain U+0000'
    : LONE_SURROGATE.test(text)
      ? 'must be well-formed Unicode (no unpaired surrogate)'
      : text.startsWith('\uFEFF')
        ? 'must not begin with U+FEFF (a byte order mark)'
        : null;

/** How deep a request's JSON may nest (objects and arrays); no field of the API comes near it. */
export const MAX_JSON_DEPTH = 64;

/**
 * The first string or key that text columns cannot hold as sent: U+0000 (PostgreSQL text and jsonb
 * refuse it), an unpaired surrogate (it would change) or a leading U+FEFF (embedded storage drops it
 * on read); or the first value nested deeper than
 * MAX_JSON_DEPTH. Its field path and why, or null.
 */
export function unstorableText(value: unknown, path: string, depth = 0): FieldError | null {
  if (typeof value === 'string') {
    const message = unstorable(value);
    return message ? { path, message } : null;
  }
  if (!value || typeof value !== 'object' || Buffer.isBuffer(value)) return null;
  if (depth >= MAX_JSON_DEPTH) return { path: path || 'body', message: `must not nest deeper than ${MAX_JSON_DEPTH} levels` };
  for (const [key, item] of Object.entries(value)) {
    const sub = path ? `${path}.${key}` : key;
    const inKey = unstorable(key);
    if (inKey) return { path: sub, message: inKey };
    const found = unstorableText(item, sub, depth + 1);
    if (found !== null) return found;
  }
  return null;
}

/**
 * The message of a schema error (Fastify's schemaErrorFormatter): `body/path message` for each of the
 * first MAX_FIELD_ERRORS Ajv errors, as Fastify words them. Fastify's own joined every one, and a 1 MB
 * body can hold millions (a wrong-typed item of webhook events fails each of its 19 names twice): a text
 * of hundreds of megabytes built for an answer that names 100 fields from `validation`.
 */
export function schemaErrorMessage(errors: { instancePath?: string; message?: string }[], dataVar: string): Error {
  return new Error(errors.slice(0, MAX_FIELD_ERRORS).map((e) => `${dataVar}${e.instancePath || ''} ${e.message}`).join(', '));
}

export interface FieldError {
  path: string;
  message: string;
}

/** Turns Ajv errors into `details.fields`, each naming the offending field: the first MAX_FIELD_ERRORS found. */
export function fieldErrors(errors: ErrorObject[], part: string | undefined): FieldError[] {
  const prefix = part === 'querystring' ? 'query' : part === 'params' ? 'path' : part === 'headers' ? 'header' : '';
  const seen = new Set<string>();
  const fields: FieldError[] = [];
  const blank = (e: ErrorObject) => e.keyword === 'pattern' && (e.params as { pattern: string }).pattern === NOT_BLANK;
  // An empty name breaks minLength and NOT_BLANK alike: one message for it, the length's.
  const tooShort = new Set(errors.filter((e) => e.keyword === 'minLength').map((e) => e.instancePath));
  // A Nullable(...) field failing its other branch: that branch's error says it ("or null" on a type
  // error), not the union's "must be null" and "must match a schema in anyOf" beside it.
  const isNull = (e: ErrorObject) => e.keyword === 'type' && (e.params as { type: string }).type === 'null';
  const nullable = new Set(errors.filter(isNull).map((e) => e.instancePath));
  const unionNoise = (e: ErrorObject) => nullable.has(e.instancePath) && (isNull(e) || e.keyword === 'anyOf');
  const explained = (at: string) => errors.some((e) => !unionNoise(e) && (e.instancePath === at || e.instancePath.startsWith(`${at}/`)));
  for (const e of errors) {
    if (fields.length >= MAX_FIELD_ERRORS) break;
    if (blank(e) && tooShort.has(e.instancePath)) continue;
    if (unionNoise(e) && explained(e.instancePath)) continue;
    let path = e.instancePath.replace(/^\//, '').replace(/\//g, '.');
    let message = e.message ?? 'is invalid';
    if (e.keyword === 'required') {
      const missing = (e.params as { missingProperty: string }).missingProperty;
      path = path ? `${path}.${missing}` : missing;
      message = 'is required';
    } else if (e.keyword === 'additionalProperties') {
      const extra = (e.params as { additionalProperty: string }).additionalProperty;
      path = path ? `${path}.${extra}` : extra;
      message = 'is not a known field';
    } else if (e.keyword === 'enum') {
      message = `must be one of ${((e.params as { allowedValues: unknown[] }).allowedValues ?? []).join(', ')}`;
    } else if (blank(e)) {
      message = 'must not be blank';
    } else if (e.keyword === 'type' && nullable.has(e.instancePath)) {
      message = `${message} or null`;
    }
    if (prefix) path = path ? `${prefix}.${path}` : prefix;
    if (!path) path = part === 'body' || !part ? 'body' : prefix;
    const id = `${path}|${message}`;
    if (!seen.has(id)) {
      seen.add(id);
      fields.push({ path, message });
    }
  }
  return fields;
}

/** False for text with a `%` not followed by two hex digits, or escapes whose bytes are not UTF-8. */
export function validlyPercentEncoded(text: string): boolean {
  if (!text.includes('%')) return true;
  try {
    decodeURIComponent(text);
    return true;
  } catch {
    return false;
  }
}

/**
 * A URL exactly as sent, or null when the WHATWG parser would have to repair it first: white space
 * or control characters anywhere (it strips them at the ends and drops tabs and line breaks inside,
 * so the stored text would not be the URL used, and a CR/LF could reach a header), or an http(s)
 * URL written without `//` (`https:x.com`), with an empty host (`https:///x.com`) or with a backslash
 * before its query (`https://a.example\b`, read as `/`). Every URL field the service stores goes through it.
 */
export function parseUrlAsSent(value: string): URL | null {
  if (/[\u0000-\u0020\u007f-\u009f]/.test(value)) return null;
  if (!URL.canParse(value)) return null;
  const url = new URL(value);
  // http(s) only: `//` then the host, no backslash before the query. The WHATWG parser skips extra
  // slashes (`https:///evil.example/` loads evil.example; RFC 3986 reads an empty host, which RFC 9110
  // §4.2.2 forbids) and reads `\` as `/` there, so the text would name another URL than the one used.
  if ((url.protocol === 'http:' || url.protocol === 'https:') && !/^https?:\/\/(?![/\\])[^?#\\]*(?:[?#]|$)/i.test(value)) return null;
  return url;
}

/** The host of a parsed URL without IPv6 brackets and without a trailing dot. */
export const hostOf = (url: URL): string => url.hostname.replace(/^\[|\]$/g, '').replace(/\.$/, '');
