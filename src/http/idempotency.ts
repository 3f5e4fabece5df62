import { createHash } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Actor, Deps } from '../context.js';
import { ApiError } from '../errors.js';
import { addSeconds } from '../clock.js';

export const IDEMPOTENCY_RETENTION_SECONDS = 24 * 3600;
/** A claim older than this is taken to belong to a crashed process and may be taken over. */
const IN_FLIGHT_LEASE_SECONDS = 60;

interface Claim {
  credential: string;
  operation: string;
  key: string;
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
  locked_until: Date;
  expires_at: Date;
}

const credentialOf = (actor: Actor): string =>
  actor.type === 'user' ? `user:${actor.userId}` : actor.type === 'api_key' ? `api_key:${actor.keyId}` : 'anonymous';

const fingerprint = (request: FastifyRequest): string =>
  createHash('sha256')
    .update(`${request.method} ${request.url}\n${JSON.stringify(request.body ?? null)}`)
    .digest('hex');

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
    throw new ApiError('validation_failed', {
      details: { fields: [{ path: 'header.idempotency-key', message: 'must be at most 255 characters' }] },
    });
  }
  const claim: Claim = { credential: credentialOf(actor), operation: `${request.method} ${request.routeOptions.url}`, key };
  const hash = fingerprint(request);
  const db = deps.database.scoped('system');

  for (let attempt = 0; attempt < 3; attempt++) {
    const now = deps.clock.now();
    const inserted = await db.query(
      `INSERT INTO idempotency_keys (credential, operation, key, request_hash, status, locked_until, created_at, expires_at)
       VALUES ($1, $2, $3, $4, 'in_flight', $5, $6, $7) ON CONFLICT DO NOTHING`,
      [claim.credential, claim.operation, key, hash, addSeconds(now, IN_FLIGHT_LEASE_SECONDS), now, addSeconds(now, IDEMPOTENCY_RETENTION_SECONDS)],
    );
    if (inserted.rowCount === 1) {
      request.idempotencyClaim = claim;
      return false;
    }
    const { rows } = await db.query<Row>(
      `SELECT request_hash, status, response_status, response_body, locked_until, expires_at
         FROM idempotency_keys WHERE credential = $1 AND operation = $2 AND key = $3`,
      [claim.credential, claim.operation, key],
    );
    const row = rows[0];
    if (!row) continue; // deleted meanwhile (failed first attempt): claim again
    if (row.expires_at <= now) {
      await db.query('DELETE FROM idempotency_keys WHERE credential = $1 AND operation = $2 AND key = $3 AND expires_at <= $4', [
        claim.credential, claim.operation, key, now,
      ]);
      continue;
    }
    if (row.request_hash !== hash) throw new ApiError('idempotency_key_reused');
    if (row.status === 'done') {
      reply
        .code(row.response_status ?? 200)
        .header('idempotent-replayed', 'true')
        .header('content-type', 'application/json; charset=utf-8');
      await reply.send(row.response_body ?? '');
      return true;
    }
    if (row.locked_until > now) throw new ApiError('idempotency_key_in_flight');
    // The first attempt's process died: take the claim over.
    const taken = await db.query(
      `UPDATE idempotency_keys SET locked_until = $4
        WHERE credential = $1 AND operation = $2 AND key = $3 AND status = 'in_flight' AND locked_until <= $5`,
      [claim.credential, claim.operation, key, addSeconds(now, IN_FLIGHT_LEASE_SECONDS), now],
    );
    if (taken.rowCount === 1) {
      request.idempotencyClaim = claim;
      return false;
    }
    throw new ApiError('idempotency_key_in_flight');
  }
  throw new ApiError('idempotency_key_in_flight');
}

/** Stores the outcome for replay; a server error releases the key so the client can retry. */
export async function completeIdempotencyKey(deps: Deps, claim: Claim, status: number, body: string): Promise<void> {
  const db = deps.database.scoped('system');
  if (status >= 500) {
    await db.query('DELETE FROM idempotency_keys WHERE credential = $1 AND operation = $2 AND key = $3', [claim.credential, claim.operation, claim.key]);
    return;
  }
  await db.query(
    `UPDATE idempotency_keys SET status = 'done', response_status = $4, response_body = $5
      WHERE credential = $1 AND operation = $2 AND key = $3`,
    [claim.credential, claim.operation, claim.key, status, body],
  );
}
