import Ajv, { type ValidateFunction } from 'ajv';
import { createHash } from 'node:crypto';
import { RE2JS } from 're2js';
import { ApiError, invalidField } from '../../errors.js';
import { parseUrlAsSent } from '../../http/validation.js';
import { linearUniqueItems } from '../../http/unique-items.js';

export const SLUG_PATTERN = /^[a-z][a-z0-9-]{1,63}$/;
const RESERVED_SETTINGS_KEYS = ['locale', 'timezone', 'theme', 'notifications'];
const PERMISSION_SUFFIX = /^[a-z0-9_.]{1,64}$/;

export function validateSlug(slug: string): void {
  if (!SLUG_PATTERN.test(slug)) throw invalidField('slug', 'must match ^[a-z][a-z0-9-]{1,63}$');
  if (slug === 'platform') throw invalidField('slug', 'is reserved');
}

export function validateHttpsUrl(path: string, value: string | null | undefined): void {
  if (value === null || value === undefined) return;
  const url = parseUrlAsSent(value);
  if (!url) throw invalidField(path, 'must be an https URL');
  if (url.protocol !== 'https:' || url.username || url.password) throw invalidField(path, 'must be an https URL');
}

/** An absolute http or https URL without credentials (icon_url; support_url also takes mailto:). */
export function validateWebUrl(path: string, value: string | null | undefined, opts: { mailto?: boolean } = {}): void {
  if (value === null || value === undefined) return;
  const message = opts.mailto ? 'must be an http(s) URL or a mailto: URL' : 'must be an http(s) URL';
  const url = parseUrlAsSent(value);
  if (!url) throw invalidField(path, message);
  if (opts.mailto && url.protocol === 'mailto:') {
    if (!/^[^@\s/]+@[^@\s/]+$/.test(url.pathname)) throw invalidField(path, message);
    return;
  }
  if ((url.protocol !== 'https:' && url.protocol !== 'http:') || !url.hostname || url.username || url.password) throw invalidField(path, message);
}

export function validatePermissions(slug: string, permissions: { key: string; description?: string }[]): { key: string; description: string }[] {
  const prefix = `app.${slug}.`;
  const seen = new Set<string>();
  return permissions.map((p, i) => {
    if (!p.key.startsWith(prefix) || !PERMISSION_SUFFIX.test(p.key.slice(prefix.length))) {
      throw invalidField(`permissions.${i}.key`, `must start with ${prefix} followed by [a-z0-9_.]{1,64}`);
    }
    if (seen.has(p.key)) throw invalidField(`permissions.${i}.key`, 'is listed twice');
    seen.add(p.key);
    return { key: p.key, description: p.description ?? '' };
  });
}

// Each Application's settings_schema is compiled on its own. Ajv would otherwise register a schema by
// its `$id` for the life of the process (a second schema naming that `$id`, the same Application's next
// version included, was refused as "already exists", and another Application's schema could `$ref` it).
// An Ajv instance also keeps every function it compiled, with the schema and the patterns the function
// uses, for as long as the instance lives (its scope; removeSchema does not release them): one instance
// for the life of the process grew with every schema text it ever met, and when more schemas were in
// use than the cache holds, every read of an Application compiled (and kept) its schema again. So an
// instance compiles a bounded amount (a number of schemas, a total of schema text) and then gives way
// to a fresh one, the compiled functions kept here (by the schema's text) going with it.
//
// `pattern` and `patternProperties` run on RE2 (re2js: linear time in the input), not on the backtracking
// RegExp: a settings_schema is written by an Application's owner and its patterns run on every write of
// AppSettings and every read of the Application, in the one event loop every tenant shares, so
// `^(a+)+$` against 30 characters held it for minutes. RE2 has no look-around or back-references: a
// pattern using them does not compile (422 invalid_settings_schema).
//
// The patterns are still the ECMAScript ones JSON Schema names (and the ones stored before RE2 ran
// them): what RE2 spells otherwise or means otherwise is rewritten first, so a schema that compiled
// before keeps its meaning. `\uXXXX` (a surrogate pair as one code point), `\u{…}` and `\cX` become
// `\x{…}`; `[\b]` is a backspace; `[^]` any character and `[]` none; `\s`, `\S` and `.` keep their
// ECMAScript sets (RE2's `\s` is ASCII only and its `.` matches \r, U+2028 and U+2029).
const JS_SPACE = '\\t\\n\\x{b}\\f\\r \\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}\\x{feff}';
const JS_NON_SPACE =
  '\\x{0}-\\x{8}\\x{e}-\\x{1f}\\x{21}-\\x{9f}\\x{a1}-\\x{167f}\\x{1681}-\\x{1fff}\\x{200b}-\\x{2027}\\x{202a}-\\x{202e}\\x{2030}-\\x{205e}\\x{2060}-\\x{2fff}\\x{3001}-\\x{fefe}\\x{ff00}-\\x{10ffff}';
const codePoint = (cp: number) => `\\x{${cp.toString(16)}}`;

export function re2Syntax(pattern: string): string {
  let out = '';
  let inClass = false;
  for (let i = 0; i < pattern.length; ) {
    const c = pattern[i];
    if (c === '\\' && i + 1 < pattern.length) {
      const n = pattern[i + 1];
      const rest = pattern.slice(i + 2);
      const braced = n === 'u' ? /^\{([0-9a-fA-F]{1,6})\}/.exec(rest) : null;
      const hex4 = n === 'u' ? /^[0-9a-fA-F]{4}/.exec(rest) : null;
      if (braced) {
        out += codePoint(parseInt(braced[1], 16));
        i += 2 + braced[0].length;
      } else if (hex4) {
        const unit = parseInt(hex4[0], 16);
        const low = unit >= 0xd800 && unit <= 0xdbff ? /^\\u(d[c-f][0-9a-f]{2})/i.exec(pattern.slice(i + 6)) : null;
        out += codePoint(low ? 0x10000 + ((unit - 0xd800) << 10) + (parseInt(low[1], 16) - 0xdc00) : unit);
        i += low ? 12 : 6;
      } else if (n === 'c' && /^[A-Za-z]/.test(rest)) {
        out += codePoint(rest.charCodeAt(0) % 32);
        i += 3;
      } else {
        out += n === 'b' && inClass ? codePoint(8) : n === 's' ? (inClass ? JS_SPACE : `[${JS_SPACE}]`) : n === 'S' ? (inClass ? JS_NON_SPACE : `[${JS_NON_SPACE}]`) : c + n;
        i += 2;
      }
    } else if (inClass) {
      inClass = c !== ']';
      out += c;
      i += 1;
    } else if (c === '[') {
      // In ECMAScript a `]` right after `[` or `[^` closes the class; in RE2 it is a member.
      const empty = /^\[\^?\]/.exec(pattern.slice(i));
      if (empty) {
        out += empty[0] === '[]' ? `[^${codePoint(0)}-${codePoint(0x10ffff)}]` : `[${codePoint(0)}-${codePoint(0x10ffff)}]`;
        i += empty[0].length;
      } else {
        const negated = pattern[i + 1] === '^';
        out += negated ? '[^' : '[';
        i += negated ? 2 : 1;
        inClass = true;
      }
    } else {
      out += c === '.' ? `[^\\n\\r${codePoint(0x2028)}${codePoint(0x2029)}]` : c;
      i += 1;
    }
  }
  return out;
}

const linearRegExp = Object.assign((pattern: string) => RE2JS.compile(re2Syntax(pattern)), { code: 'require("re2js").RE2JS.compile' });
const COMPILED_SETTINGS_MAX = 256;
const COMPILED_SETTINGS_TEXT_MAX = 2 * 1024 * 1024;

interface SettingsCompiler {
  ajv: Ajv.default;
  /** Schemas compiled (or tried) by this instance, and the length of their texts. */
  compiles: number;
  textLength: number;
  /** Compiled functions by the sha256 of the schema's text. */
  compiled: Map<string, ValidateFunction>;
}

function newSettingsCompiler(allErrors: boolean): SettingsCompiler {
  // multipleOfPrecision: `multipleOf` means a decimal multiple (0.3 is a multiple of 0.1), not the
  // remainder of two binary floats (0.3 % 0.1 is not 0, and 1e21 / 1 failed parseInt).
  const ajv = new Ajv.default({ strict: false, allErrors, addUsedSchema: false, multipleOfPrecision: 9, code: { regExp: linearRegExp } });
  ajv.addKeyword({ keyword: 'x-pii' });
  linearUniqueItems(ajv);
  return { ajv, compiles: 0, textLength: 0, compiled: new Map() };
}
// Two compilers: the check of a schema on write keeps every reason the meta-schema gives (allErrors);
// the values' checks stop at a value's first error (allErrors off). With allErrors a failing `anyOf`
// keeps every branch's errors for every item: a 16 KB array against 1,000 branches made 8 million
// error objects (seconds and a gigabyte in one check, on the event loop every tenant shares).
const settingsCompilers = { schema: newSettingsCompiler(true), values: newSettingsCompiler(false) };
let compilesInProcess = 0;
/** Settings schemas compiled by this process so far (what the cache saves shows in it). */
export const settingsCompileCount = (): number => compilesInProcess;

/** The validation function of one settings schema (or property schema); throws when it does not compile. */
function compileSettings(schema: object, use: keyof typeof settingsCompilers): ValidateFunction {
  const text = JSON.stringify(schema);
  const key = createHash('sha256').update(text).digest('base64');
  const cached = settingsCompilers[use].compiled.get(key);
  if (cached) return cached;
  if (settingsCompilers[use].compiles >= COMPILED_SETTINGS_MAX || settingsCompilers[use].textLength + text.length > COMPILED_SETTINGS_TEXT_MAX) {
    settingsCompilers[use] = newSettingsCompiler(use === 'schema');
  }
  const compiler = settingsCompilers[use];
  compiler.compiles++;
  compilesInProcess++;
  compiler.textLength += text.length;
  let validate: ValidateFunction;
  try {
    validate = compiler.ajv.compile(schema);
  } finally {
    compiler.ajv.removeSchema(schema);
  }
  compiler.compiled.set(key, validate);
  return validate;
}

/** A JSON-schema style object for AppSettings: an object schema that compiles; reserved names refused. */
/**
 * A settings_schema is at most 64 KB serialized and none of its arrays (enum, required, …) has more
 * than 1,000 entries: the work of checking overrides grows with the schema's size, in the event loop
 * every tenant shares, and 16 KB of overrides never need more. (The meta-schema's unique-items check,
 * which compared every pair and so held the loop for tens of seconds on one enum of 80,000 names, is
 * linear since src/http/unique-items.ts.)
 */
export const SETTINGS_SCHEMA_MAX_BYTES = 64 * 1024;
export const SETTINGS_SCHEMA_ARRAY_MAX = 1000;
/**
 * An anyOf, oneOf or allOf holds at most 100 subschemas: a value is tried against every branch before
 * the one it matches, so 16 KB of array items against 1,000 branches cost seconds per check (and a
 * schema change checks every stored row), where an enum of the same 1,000 names costs milliseconds.
 */
export const SETTINGS_SCHEMA_BRANCHES_MAX = 100;
const BRANCH_KEYWORDS = new Set(['anyOf', 'oneOf', 'allOf']);

function assertSettingsSchemaSize(schema: Record<string, unknown>): void {
  const bytes = Buffer.byteLength(JSON.stringify(schema));
  if (bytes > SETTINGS_SCHEMA_MAX_BYTES) {
    throw new ApiError('invalid_settings_schema', { details: { reason: `must be at most ${SETTINGS_SCHEMA_MAX_BYTES} bytes serialized (got ${bytes})` } });
  }
  const walk = (value: unknown, path: string): void => {
    if (Array.isArray(value)) {
      if (value.length > SETTINGS_SCHEMA_ARRAY_MAX) {
        throw new ApiError('invalid_settings_schema', { details: { reason: `${path || 'the schema'} has ${value.length} entries; at most ${SETTINGS_SCHEMA_ARRAY_MAX}` } });
      }
      value.forEach((item, i) => walk(item, `${path}[${i}]`));
    } else if (value && typeof value === 'object') {
      for (const [key, item] of Object.entries(value)) {
        const at = path ? `${path}.${key}` : key;
        if (BRANCH_KEYWORDS.has(key) && Array.isArray(item) && item.length > SETTINGS_SCHEMA_BRANCHES_MAX) {
          throw new ApiError('invalid_settings_schema', { details: { reason: `${at} has ${item.length} subschemas; at most ${SETTINGS_SCHEMA_BRANCHES_MAX}` } });
        }
        walk(item, at);
      }
    }
  };
  walk(schema, '');
}

export function validateSettingsSchema(schema: Record<string, unknown>): void {
  if (Object.keys(schema).length === 0) return;
  assertSettingsSchemaSize(schema);
  if (schema.type !== undefined && schema.type !== 'object') {
    throw new ApiError('invalid_settings_schema', { details: { reason: 'type must be object' } });
  }
  const properties = schema.properties;
  if (properties !== undefined && (typeof properties !== 'object' || properties === null || Array.isArray(properties))) {
    throw new ApiError('invalid_settings_schema', { details: { reason: 'properties must be an object' } });
  }
  const reserved = Object.keys((properties as object) ?? {}).filter((k) => RESERVED_SETTINGS_KEYS.includes(k));
  if (reserved.length) throw new ApiError('reserved_settings_key', { details: { keys: reserved } });
  try {
    compileSettings(schema, 'schema');
  } catch (err) {
    throw new ApiError('invalid_settings_schema', { details: { reason: (err as Error).message } });
  }
}

// Root keywords about the overrides object as a whole (which keys it holds, or must): overrides are
// partial, and each value is checked against its property. What stays (`properties`, `$defs`,
// `definitions`, `$id`, anything else) is the document the properties' `$ref`s point into.
const WHOLE_OBJECT_KEYWORDS = new Set([
  'type', 'required', 'additionalProperties', 'patternProperties', 'propertyNames', 'minProperties', 'maxProperties', 'dependencies',
  'dependentRequired', 'dependentSchemas', 'unevaluatedProperties', 'if', 'then', 'else', 'allOf', 'anyOf', 'oneOf', 'not', '$ref', 'enum', 'const',
]);

/**
 * One validation function for every property of a schema, compiled with the schema's own document, so
 * a property's `$ref` (`#/$defs/…`, `#/definitions/…`, `#/properties/…`, a nested `$id`) resolves as it
 * did when the whole schema was checked on write. Null when it does not compile (a pattern RE2 cannot
 * run): each property is then compiled alone, and only the broken one refuses its values.
 */
function propertiesValidator(schema: Record<string, unknown>): ValidateFunction | null {
  // By the schema object too: stale_override_counts checks every stored row against one schema.
  if (documentValidators.has(schema)) return documentValidators.get(schema)!;
  let validate: ValidateFunction | null;
  try {
    validate = compileSettings(Object.fromEntries(Object.entries(schema).filter(([k]) => !WHOLE_OBJECT_KEYWORDS.has(k))), 'values');
  } catch {
    validate = null;
  }
  documentValidators.set(schema, validate);
  return validate;
}
const documentValidators = new WeakMap<object, ValidateFunction | null>();

/** Why each value of `overrides` is refused by the schema: a key it does not declare, or a value its property rejects. */
export function settingsValueErrors(schema: Record<string, unknown>, overrides: Record<string, unknown>): { key: string; message: string }[] {
  const properties = (schema.properties ?? {}) as Record<string, object | boolean>;
  const errors = new Map<string, string>();
  // The declared keys' values, in an object without a prototype: `properties` then meets only these
  // (a `constructor` property is not met by Object.prototype.constructor).
  const declared: Record<string, unknown> = Object.create(null);
  for (const [key, value] of Object.entries(overrides)) {
    if (Object.hasOwn(properties, key) && properties[key]) declared[key] = value;
    else errors.set(key, "is not a property of the Application's settings_schema");
  }
  const keys = Object.keys(declared);
  const whole = keys.length ? propertiesValidator(schema) : null;
  if (whole) {
    // One pass over all the values; when it fails (it stops at its first error), each value alone, with
    // the same document: a value's message is the first error under its key (by instancePath).
    if (!whole(declared)) {
      for (const key of keys) {
        const one: Record<string, unknown> = Object.create(null);
        one[key] = declared[key];
        if (whole(one)) continue;
        const first = whole.errors?.find((e) => e.instancePath.split('/')[1]?.replace(/~1/g, '/').replace(/~0/g, '~') === key);
        if (first) errors.set(key, first.message ?? 'does not match its settings_schema property');
      }
    }
  } else {
    for (const key of keys) {
      let validate: ValidateFunction;
      try {
        validate = compileSettings(properties[key] as object, 'values');
      } catch {
        // A property stored before a rule it breaks (a pattern RE2 cannot run) accepts nothing, and says so.
        errors.set(key, "cannot be set: its settings_schema property no longer compiles (the Application's owner must change it)");
        continue;
      }
      if (!validate(declared[key])) errors.set(key, validate.errors?.[0]?.message ?? 'does not match its settings_schema property');
    }
  }
  // In the order the keys were sent.
  return Object.keys(overrides).filter((key) => errors.has(key)).map((key) => ({ key, message: errors.get(key)! }));
}

/** Keys whose stored overrides no longer validate against the schema, per key. */
export const staleOverrideKeys = (schema: Record<string, unknown>, overrides: Record<string, unknown>): string[] =>
  settingsValueErrors(schema, overrides).map((e) => e.key);
