import { createHash, randomUUID } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Actor, Deps } from '../context.js';
import type { Tx } from '../db/types.js';
import { ApiError, invalidField } from '../errors.js';
import { addSeconds, beyondStep } from '../clock.js';

export const IDEMPOTENCY_RETENTION_SECONDS = 24 * 3600;
/** A claim older than this is taken to belong to a crashed process and may be taken over. */
const IN_FLIGHT_LEASE_SECONDS = 60;

export interface Claim {
  credential: string;
  operation: string;
  key: string;
  token: string;
  /** Set once the outcome is stored (in the mutation's transaction, or after an error). */
  completed: boolean;
  /**
   * The user the answer is about: the erasure cascade drops such answers. The {id} of a
   * /v1/users/{id}/… operation, else the `user_id` of the resource answered (completeInTransaction).
   */
  subjectUserId: string | null;
}

declare module 'fastify' {
  interface FastifyRequest {
    idempotencyClaim?: Claim;
  }
}

interface Row {
  request_hash: string;
  status: 'in_flight' | 'done';
  response_status: number | null;
  response_body: string | null;
  response_headers: Record<string, string> | null;
  locked_until: Date;
  expires_at: Date;
}

// Claims held by requests running in this process, with their request's fingerprint: a concurrent
// retry is answered without a round trip to the claims table, as the database record answers it from
// another process: 422 idempotency_key_reused for another request, else 409 idempotency_key_in_flight.
// The database record stays the authority across processes. On embedded storage (one connection) a
// retry whose credential check queues behind the first request's open transaction reaches this point
// only after that commits, and then replays the stored answer instead.
const running = new Map<string, string>();
const localId = (c: Pick<Claim, 'credential' | 'operation' | 'key'>) => `${c.credential}\u0000${c.operation}\u0000${c.key}`;

const credentialOf = (actor: Actor): string =>
  actor.type === 'user' ? `user:${actor.userId}` : actor.type === 'api_key' ? `api_key:${actor.keyId}` : 'anonymous';

// The preconditions a request is sent under (RFC 9110 §13) are part of what it asks: a PATCH with
// If-Match "A" is another request than the same PATCH with If-Match "B". The same key sent again with
// other preconditions is 422 idempotency_key_reused, never the replay of the answer given to the first
// ones (a client that read the new ETag after a 412 and sent it under the same key was answered the old
// 412 again, whose details.etag named the very tag it had sent). A request without them hashes as before.
const PRECONDITION_HEADERS = ['if-match', 'if-none-match'] as const;

// The body is fingerprinted with its object keys sorted, so a retry that sends the same content in
// another key order is the same request. A body whose keys were already sorted hashes as before; a
// record stored before this change from unsorted keys answers its retries 422 until it expires (24 h).
const fingerprint = (request: FastifyRequest): string => {
  const hash = createHash('sha256').update(`${request.method} ${request.url}\n${canonicalJson(request.body ?? null)}`);
  for (const name of PRECONDITION_HEADERS) {
    const value = request.headers[name];
    if (value !== undefined) hash.update(`\n${name}: ${Array.isArray(value) ? value.join(', ') : value}`);
  }
  return hash.digest('hex');
};

/** JSON.stringify with object keys in sorted order at every depth; arrays keep their order. */
function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map((item) => canonicalJson(item ?? null)).join(',')}]`;
  if (typeof value === 'object' && value !== null) {
    const entries = Object.keys(value)
      .sort()
      .filter((key) => (value as Record<string, unknown>)[key] !== undefined)
      .map((key) => `${JSON.stringify(key)}:${canonicalJson((value as Record<string, unknown>)[key])}`);
    return `{${entries.join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

/**
 * Part A convention 9. Claims (credential, operation, key) before the handler runs. A retry after
 * completion replays the stored status and body; one while the first runs gets 409
 * idempotency_key_in_flight; the same key with another request gets 422 idempotency_key_reused.
 * Returns true when the reply was sent (replay).
 */
export async function claimIdempotencyKey(
  deps: Deps,
  request: FastifyRequest,
  reply: FastifyReply,
  actor: Actor,
  required: boolean,
): Promise<boolean> {
  const header = request.headers['idempotency-key'];
  const key = Array.isArray(header) ? header[0] : header;
  if (key === undefined || key === '') {
    if (required) throw new ApiError('idempotency_key_required');
    return false;
  }
  if (key.length > 255) {
    throw invalidField('header.idempotency-key', 'must be at most 255 characters');
  }
  const claim: Claim = {
    credential: credentialOf(actor),
    operation: `${request.method} ${request.routeOptions.url}`,
    key,
    token: randomUUID(),
    completed: false,
    subjectUserId: subjectUserOf(request, actor),
  };
  const id = localId(claim);
  const hash = fingerprint(request);
  const runningHash = running.get(id);
  if (runningHash !== undefined) throw new ApiError(runningHash === hash ? 'idempotency_key_in_flight' : 'idempotency_key_reused');
  running.set(id, hash);
  try {
    const claimed = await claimInDatabase(deps, reply, claim, hash);
    if (claimed) request.idempotencyClaim = claim;
    else running.delete(id);
    return !claimed;
  } catch (err) {
    running.delete(id);
    throw err;
  }
}

/** True when this request now holds the claim; false when it replayed the stored response. */
async function claimInDatabase(deps: Deps, reply: FastifyReply, claim: Claim, hash: string): Promise<boolean> {
  const { key } = claim;
  const db = deps.database.scoped('system');
  for (let attempt = 0; attempt < 3; attempt++) {
    const now = deps.clock.now();
    const inserted = await db.query(
      `INSERT INTO idempotency_keys (credential, operation, key, request_hash, status, claim_token, locked_until, created_at, expires_at, subject_user_id)
       VALUES ($1, $2, $3, $4, 'in_flight', $5, $6, $7, $8, $9) ON CONFLICT DO NOTHING`,
      [claim.credential, claim.operation, key, hash, claim.token, addSeconds(now, IN_FLIGHT_LEASE_SECONDS), now, addSeconds(now, IDEMPOTENCY_RETENTION_SECONDS), claim.subjectUserId],
    );
    if (inserted.rowCount === 1) return true;
    const { rows } = await db.query<Row>(
      `SELECT request_hash, status, response_status, response_body, response_headers, locked_until, expires_at
         FROM idempotency_keys WHERE credential = $1 AND operation = $2 AND key = $3`,
      [claim.credential, claim.operation, key],
    );
    const row = rows[0];
    if (!row) continue; // released meanwhile (the first attempt failed): claim again
    if (row.expires_at <= now) {
      await db.query('DELETE FROM idempotency_keys WHERE credential = $1 AND operation = $2 AND key = $3 AND expires_at <= $4', [
        claim.credential, claim.operation, key, now,
      ]);
      continue;
    }
    if (row.request_hash !== hash) throw new ApiError('idempotency_key_reused');
    if (row.status === 'done') {
      // Opened first: an answer that cannot be opened (its key dropped from ENCRYPTION_KEY within
      // its 24 hours) fails as an error of this request, not as a replay.
      const body = row.response_body ? deps.secrets.open(row.response_body, localId(claim)) : '';
      reply
        .code(row.response_status ?? 200)
        .headers(row.response_headers ?? {})
        .header('idempotent-replayed', 'true')
        .header('content-type', 'application/json; charset=utf-8');
      await reply.send(body);
      return false;
    }
    // A lease ending further ahead than its length (plus the skew bound) was taken before the clock
    // stepped back: it has lapsed as well, or a dead claim would hold the key for 60 seconds plus the
    // step. Its holder, should it still run, names its claim token at commit and changes nothing.
    const stepped = beyondStep(now, IN_FLIGHT_LEASE_SECONDS);
    if (row.locked_until > now && row.locked_until <= stepped) throw new ApiError('idempotency_key_in_flight');
    // The first attempt's process died before committing anything: take the claim over.
    const taken = await db.query(
      `UPDATE idempotency_keys SET locked_until = $4, claim_token = $5
        WHERE credential = $1 AND operation = $2 AND key = $3 AND status = 'in_flight' AND (locked_until <= $6 OR locked_until > $7)`,
      [claim.credential, claim.operation, key, addSeconds(now, IN_FLIGHT_LEASE_SECONDS), claim.token, now, stepped],
    );
    if (taken.rowCount === 1) return true;
    throw new ApiError('idempotency_key_in_flight');
  }
  throw new ApiError('idempotency_key_in_flight');
}

/**
 * At start: seals stored answers written in the clear (before sealing existed, e.g. by the previous
 * version during an upgrade). Answers sealed with an older key are left: they expire within 24 hours
 * (README: keep a rotated-out ENCRYPTION_KEY listed that long).
 */
export async function sealStoredAnswers(deps: Deps): Promise<number> {
  const db = deps.database.scoped('system');
  const { rows } = await db.query<{ credential: string; operation: string; key: string; response_body: string }>(
    `SELECT credential, operation, key, response_body FROM idempotency_keys WHERE response_body IS NOT NULL AND response_body <> '' AND response_body NOT LIKE 'enc:%'`,
  );
  let sealed = 0;
  for (const row of rows) {
    const { rowCount } = await db.query(
      'UPDATE idempotency_keys SET response_body = $4 WHERE credential = $1 AND operation = $2 AND key = $3 AND response_body = $5',
      [row.credential, row.operation, row.key, deps.secrets.seal(row.response_body, localId(row)), row.response_body],
    );
    sealed += rowCount;
  }
  return sealed;
}

/**
 * The erasure cascade: drops the stored answers (still inside their 24 hours) of operations on this
 * user (`/v1/users/{id}/…`, `/v1/organizations/{id}/members/{userId}`, an answer naming them as its
 * `user_id`; e.g. an admin's Profile write, an org admin's role change of the soft-deleted user or an
 * operator's PATCH of their personal Entitlement in the cascade's last day). A retry then runs
 * again and gets a 404 instead of replaying erased data.
 */
export async function dropStoredAnswersAbout(tx: Tx, userId: string): Promise<number> {
  return (await tx.query('DELETE FROM idempotency_keys WHERE subject_user_id = $1', [userId])).rowCount;
}

/**
 * The user an operation is about (`me` is the caller), else null: {id} under /v1/users/{id}, and the
 * member {userId} under /v1/organizations/{id}/members/{userId}, whose answer (a role change) holds
 * the member's email and display name.
 */
function subjectUserOf(request: FastifyRequest, actor: Actor): string | null {
  const route = request.routeOptions.url;
  const params = request.params as { id?: unknown; userId?: unknown };
  const id = route?.startsWith('/v1/users/:id') ? params.id : route?.startsWith('/v1/organizations/:id/members/:userId') ? params.userId : null;
  if (typeof id !== 'string') return null;
  if (id === 'me') return actor.type === 'user' ? actor.userId : null;
  return id;
}

/** The top-level `user_id` of an answered resource (an Entitlement, a member), else null. */
function userIdOf(payload: unknown): string | null {
  const id = typeof payload === 'object' && payload !== null ? (payload as { user_id?: unknown }).user_id : null;
  return typeof id === 'string' ? id : null;
}

// A stored response may hold a secret the service shows once (a webhook signing secret) and always
// holds the caller's data: it is kept sealed (src/auth/secret-box.ts), bound to its claim.
const sealedBody = (deps: Deps, claim: Claim, body: string): string => (body ? deps.secrets.seal(body, localId(claim)) : body);

/** The headers of a response a client relies on besides its status and body: replayed with them. */
const REPLAYED_HEADERS = ['etag', 'location'];

export function replayedHeaders(reply: FastifyReply): Record<string, string> | null {
  const kept: Record<string, string> = {};
  for (const name of REPLAYED_HEADERS) {
    const value = reply.getHeader(name);
    if (value !== undefined) kept[name] = String(value);
  }
  return Object.keys(kept).length > 0 ? kept : null;
}

/**
 * Stores the successful outcome in the mutation's own transaction, so the change and its replay
 * record commit together: a crash leaves either both or neither. Fails (rolling the mutation back)
 * if another process took the claim over meanwhile.
 */
export async function completeInTransaction(
  deps: Deps,
  tx: Tx,
  claim: Claim,
  status: number,
  body: string,
  headers: Record<string, string> | null = null,
  payload: unknown = null,
): Promise<void> {
  // An answer whose path names no user can still be about one: a PATCH /v1/entitlements/{id} of a
  // personal grant answers the Entitlement with its user_id (and an admin's free-text disabled_reason),
  // an added member answers the member. It records that user, so the erasure cascade drops it too.
  claim.subjectUserId ??= userIdOf(payload);
  const { rowCount } = await tx.query(
    `UPDATE idempotency_keys SET status = 'done', response_status = $5, response_body = $6, response_headers = $7, subject_user_id = $8
      WHERE credential = $1 AND operation = $2 AND key = $3 AND claim_token = $4 AND status = 'in_flight'`,
    [claim.credential, claim.operation, claim.key, claim.token, status, sealedBody(deps, claim, body), headers === null ? null : JSON.stringify(headers), claim.subjectUserId],
  );
  if (rowCount !== 1) throw new ApiError('idempotency_key_in_flight');
  claim.completed = true;
}

/** After an error (nothing committed): a client error is stored for replay, a server error or a 429 releases the key. */
export async function settleAfterResponse(deps: Deps, claim: Claim, status: number, body: string, headers: Record<string, string> | null = null): Promise<void> {
  running.delete(localId(claim));
  if (claim.completed) return;
  const db = deps.database.scoped('system');
  const where = 'credential = $1 AND operation = $2 AND key = $3 AND claim_token = $4';
  const params = [claim.credential, claim.operation, claim.key, claim.token];
  // docs/conventions.md: "Validation failures are not recorded": a 422 validation_failed a handler
  // raises (a rule the schema cannot state) releases the key like the schema's own, so a corrected
  // retry with the same key runs. A 429 (a per-caller quota: 10 organizations a day, email change
  // mails an hour) judged the caller's recent activity, not the request, and its Retry-After invites
  // the same request again: it releases the key too, or that retry would replay the 429 for 24 hours.
  if (status >= 500 || status === 429 || (status === 422 && errorCodeOf(body) === 'validation_failed')) {
    await db.query(`DELETE FROM idempotency_keys WHERE ${where}`, params);
    return;
  }
  await db.query(`UPDATE idempotency_keys SET status = 'done', response_status = $5, response_body = $6, response_headers = $7 WHERE ${where} AND status = 'in_flight'`, [
    ...params, status, sealedBody(deps, claim, body), headers === null ? null : JSON.stringify(headers),
  ]);
}

/** The error code of an error envelope, or null. */
function errorCodeOf(body: string): string | null {
  try {
    const code = (JSON.parse(body) as { error?: { code?: unknown } })?.error?.code;
    return typeof code === 'string' ? code : null;
  } catch {
    return null;
  }
}
