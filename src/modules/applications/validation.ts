import Ajv, { type ValidateFunction } from 'ajv';
import { createHash } from 'node:crypto';
import { RE2JS } from 're2js';
import { ApiError, invalidField } from '../../errors.js';
import { parseUrlAsSent } from '../../http/validation.js';

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

/**
 * redirect_uris: exact-match entries, https URLs or reverse-DNS private-use schemes
 * (com.example.app:/path); http://localhost and http://127.0.0.1 (any port) only on a test_mode
 * Application. No fragments, no userinfo (not even an empty one).
 */
export function validateRedirectUris(uris: string[], testMode: boolean): void {
  const seen = new Set<string>();
  uris.forEach((value, i) => {
    const path = `redirect_uris.${i}`;
    const url = parseUrlAsSent(value);
    if (!url) throw invalidField(path, 'is not a URI (no white space or control characters)');
    // Any userinfo, an empty one too (`https://@host/`): the URL parser drops an empty one, so the sent text is checked.
    if (url.hash || url.username || url.password || /^[^:/?#]+:\/\/[^/?#]*@/.test(value)) throw invalidField(path, 'must not carry a fragment or credentials');
    const scheme = url.protocol.slice(0, -1);
    const loopback = scheme === 'http' && (url.hostname === 'localhost' || url.hostname === '127.0.0.1');
    const privateUse = /^[a-z][a-z0-9-]*(\.[a-z0-9-]+)+$/.test(scheme);
    if (loopback && !testMode) throw invalidField(path, 'http://localhost and http://127.0.0.1 are allowed only on test_mode applications');
    if (!(scheme === 'https' || loopback || privateUse)) throw invalidField(path, 'must be https, a reverse-DNS private-use scheme, or loopback http on a test application');
    if (seen.has(value)) throw invalidField(path, 'is listed twice');
    seen.add(value);
  });
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
// version included, was refused as "already exists", and another Application's schema could `$ref` it)
// and keep every schema object it ever compiled (its cache is keyed by object, and each request reads a
// fresh one). The compiled functions are kept here instead, by the schema's text, a bounded number.
//
// `pattern` and `patternProperties` run on RE2 (re2js: linear time in the input), not on the backtracking
// RegExp: a settings_schema is written by an Application's owner and its patterns run on every write of
// AppSettings and every read of the Application, in the one event loop every tenant shares, so
// `^(a+)+$` against 30 characters held it for minutes. RE2 has no look-around or back-references: a
// pattern using them does not compile (422 invalid_settings_schema).
const linearRegExp = Object.assign((pattern: string) => RE2JS.compile(pattern), { code: 'require("re2js").RE2JS.compile' });
const schemaAjv = new Ajv.default({ strict: false, allErrors: true, addUsedSchema: false, code: { regExp: linearRegExp } });
schemaAjv.addKeyword({ keyword: 'x-pii' });
const COMPILED_SETTINGS_MAX = 256;
const compiledSettings = new Map<string, ValidateFunction>();

/** The validation function of one settings schema (or property schema); throws when it does not compile. */
function compileSettings(schema: object): ValidateFunction {
  const key = createHash('sha256').update(JSON.stringify(schema)).digest('base64');
  let validate = compiledSettings.get(key);
  if (validate) {
    compiledSettings.delete(key); // most recently used last
  } else {
    try {
      validate = schemaAjv.compile(schema);
    } finally {
      schemaAjv.removeSchema(schema);
    }
    if (compiledSettings.size >= COMPILED_SETTINGS_MAX) compiledSettings.delete(compiledSettings.keys().next().value!);
  }
  compiledSettings.set(key, validate);
  return validate;
}

/** A JSON-schema style object for AppSettings: an object schema that compiles; reserved names refused. */
export function validateSettingsSchema(schema: Record<string, unknown>): void {
  if (Object.keys(schema).length === 0) return;
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
    compileSettings(schema);
  } catch (err) {
    throw new ApiError('invalid_settings_schema', { details: { reason: (err as Error).message } });
  }
}

/** Why each value of `overrides` is refused by the schema: a key it does not declare, or a value its property rejects. */
export function settingsValueErrors(schema: Record<string, unknown>, overrides: Record<string, unknown>): { key: string; message: string }[] {
  const properties = (schema.properties ?? {}) as Record<string, object>;
  const errors: { key: string; message: string }[] = [];
  for (const [key, value] of Object.entries(overrides)) {
    const property = Object.hasOwn(properties, key) ? properties[key] : undefined;
    if (!property) {
      errors.push({ key, message: "is not a property of the Application's settings_schema" });
      continue;
    }
    let validate: ValidateFunction | null;
    try {
      validate = compileSettings(property);
    } catch {
      validate = null; // a property that does not compile accepts nothing
    }
    if (!validate || !validate(value)) errors.push({ key, message: validate?.errors?.[0]?.message ?? 'does not match its settings_schema property' });
  }
  return errors;
}

/** Keys whose stored overrides no longer validate against the schema, per key. */
export const staleOverrideKeys = (schema: Record<string, unknown>, overrides: Record<string, unknown>): string[] =>
  settingsValueErrors(schema, overrides).map((e) => e.key);
