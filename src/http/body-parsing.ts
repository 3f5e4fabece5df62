import { errorCodes as fastifyErrors, type FastifyInstance } from 'fastify';
import { ApiError } from '../errors.js';
import { LINK_PAGE_PATHS } from '../modules/links/paths.js';
import { validlyPercentEncoded } from './validation.js';

/** The largest request body read: larger is 413 payload_too_large. */
export const BODY_LIMIT_BYTES = 1024 * 1024;

/** The body parsers: JSON for the API, form bodies for the few routes that take them, no text/plain. */
export function registerBodyParsers(app: FastifyInstance): void {
  app.removeContentTypeParser('text/plain');
  registerJsonParser(app);
  registerFormParser(app);
}

function registerJsonParser(app: FastifyInstance): void {
  // An empty JSON body is no body (as Express reads it): a client that always sends
  // `Content-Type: application/json` can call the bodyless POSTs (logout, enrol, rotate), and a
  // route that needs fields names them in a 422. Anything else is parsed as before.
  // Bytes that are not UTF-8 and numbers beyond a double (1e309 parses to Infinity) are malformed
  // JSON (IV-3), never stored as U+FFFD or null; so is an object naming one key twice (RFC 8259
  // leaves which one wins to the parser, and two readers of one body must not disagree).
  const parseJson = app.getDefaultJsonParser('error', 'error');
  const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
  const malformed = () => new fastifyErrors.FST_ERR_CTP_INVALID_JSON_BODY();
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, body, done) => {
    let text: string;
    try {
      text = utf8.decode(body as Buffer);
    } catch {
      return done(malformed(), undefined);
    }
    if (text.trim() === '') return done(null, undefined);
    parseJson(request, text, (err, value) => {
      if (err) return done(err, undefined);
      if (hasNonFiniteNumber(value) || hasDuplicateKey(text, value)) return done(malformed(), undefined);
      done(null, value);
    });
  });
}

function registerFormParser(app: FastifyInstance): void {
  // The OAuth token endpoint and the HTML pages' forms (hosted sign-in, the mailed-link pages, the local payment simulator)
  // also take form bodies; the API is JSON only (Part A convention 1). A repeated parameter stays a
  // list, so the route's schema refuses it (RFC 6749 §3.1: parameters MUST NOT be included more than once).
  app.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'string' }, (request, body, done) => {
    const url = request.routeOptions.url ?? '';
    if (url !== '/v1/auth/oauth/token' && !url.startsWith('/signin') && !LINK_PAGE_PATHS.includes(url) && !url.startsWith('/billing/simulator/')) {
      return done(new fastifyErrors.FST_ERR_CTP_INVALID_MEDIA_TYPE('application/x-www-form-urlencoded'), undefined);
    }
    // URLSearchParams reads a malformed escape leniently (`%FF` as U+FFFD): refused, as in a query.
    if (!validlyPercentEncoded(body as string)) {
      return done(new ApiError('bad_request', { message: 'The form body is not validly percent-encoded.' }), undefined);
    }
    done(null, formFields(body as string));
  });
}

/**
 * A form body's fields in one pass over its pairs: a name sent once is text, a repeated one a list.
 * Not getAll per name, which scans every pair again: a 1 MB body of 150,000 distinct names then
 * held the event loop every caller shares for minutes (OWASP API4:2023), before any route saw it.
 */
function formFields(body: string): Record<string, string | string[]> {
  const fields = new Map<string, string[]>();
  for (const [name, value] of new URLSearchParams(body)) {
    const values = fields.get(name);
    if (values) values.push(value);
    else fields.set(name, [value]);
  }
  // fromEntries defines own properties: a field named __proto__ stays a field.
  return Object.fromEntries([...fields].map(([name, values]) => [name, values.length === 1 ? values[0] : values]));
}

export function refuseCodedBodies(app: FastifyInstance): void {
  // Bodies are read as sent, never decoded: one declaring a Content-Encoding (gzip, deflate, br) is
  // refused (RFC 9110 §8.4.1: 415, Accept-Encoding: identity) instead of being read as the bytes it
  // is not (a gzip body answered as malformed JSON) or applied although it claims to be compressed (a
  // proxy or log that decodes it sees another request than the one the service ran).
  app.addHook('preParsing', async (request, _reply, payload) => {
    // Likewise a transfer coding beside chunked (`gzip, chunked`), which Node does not decode either: a
    // malformed request (400, the spec's mapping; the token endpoint's invalid_request), not one read as
    // the bytes it is not (RFC 9112 §6.1 lets a server refuse a transfer coding it does not understand).
    const transfer = request.headers['transfer-encoding']?.split(',').map((c) => c.trim().toLowerCase()).filter((c) => c !== 'chunked') ?? [];
    if (transfer.length > 0) {
      throw new ApiError('bad_request', { message: 'The only transfer coding supported is chunked.' });
    }
    // A GET's (and HEAD's) body is not read (docs/decisions.md "Methods"), so neither is its coding.
    const coding = request.method === 'GET' || request.method === 'HEAD' ? undefined : request.headers['content-encoding']?.trim().toLowerCase();
    const hasBody = request.headers['transfer-encoding'] !== undefined || Number(request.headers['content-length'] ?? 0) > 0;
    if (coding && coding !== 'identity' && hasBody) {
      throw new ApiError('unsupported_media_type', {
        message: 'Request bodies must not be compressed: send them without Content-Encoding.',
        headers: { 'accept-encoding': 'identity' },
      });
    }
    return payload;
  });
}

/**
 * True when a parsed JSON value holds ±Infinity. One pass over the parsed value (about a tenth of
 * the parse; a reviver triples it), iterative so that deeply nested bodies reach their 422.
 */
function hasNonFiniteNumber(value: unknown): boolean {
  const stack: unknown[] = [value];
  while (stack.length > 0) {
    const v = stack.pop();
    if (typeof v === 'number') {
      if (!Number.isFinite(v)) return true;
    } else if (typeof v === 'object' && v !== null) {
      if (Array.isArray(v)) for (const item of v) stack.push(item);
      else for (const key in v) stack.push((v as Record<string, unknown>)[key]);
    }
  }
  return false;
}

/**
 * True when some object in the JSON text names a key twice (the parsed value kept only the last):
 * the text's name/value separators (colons outside strings) outnumber the parsed value's keys.
 */
function hasDuplicateKey(text: string, value: unknown): boolean {
  let separators = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 58) separators++;
    else if (c === 34) {
      // Skip the string: it ends at the next quote not escaped by a backslash.
      for (i++; i < text.length; i++) {
        const d = text.charCodeAt(i);
        if (d === 92) i++;
        else if (d === 34) break;
      }
    }
  }
  if (separators === 0) return false;
  let keys = 0;
  const stack: unknown[] = [value];
  while (stack.length > 0) {
    const v = stack.pop();
    if (typeof v !== 'object' || v === null) continue;
    if (Array.isArray(v)) for (const item of v) stack.push(item);
    else {
      const names = Object.keys(v);
      keys += names.length;
      for (const name of names) stack.push((v as Record<string, unknown>)[name]);
    }
  }
  return separators !== keys;
}
