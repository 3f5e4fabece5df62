import type { Deps } from '../../context.js';
import { addSeconds, beyondStep, toUnixSeconds } from '../../clock.js';
import { renderEnvelope } from './catalog.js';
import { SIGNATURE_HEADER, signatureHeader } from './signature.js';
import { postAttempt, type AttemptResult } from './transport.js';
import { claimDueDeliveries, claimDueWithinRoom, updateDueAfterStepBack, type ClaimedDelivery, type ClaimRoom } from './claim-store.js';

export type { ClaimedDelivery, ClaimRoom } from './claim-store.js';

/** A claim outlives the 5-second attempt by far; a process that dies holding one loses it after this. */
export const CLAIM_LEASE_SECONDS = 60;

export interface Outcome {
  delivery: ClaimedDelivery;
  token: string;
  /** null: not sent (subscription disabled, event gone); `skipped` says why. */
  result: AttemptResult | null;
  skipped?: string;
}

/**
 * Claims due deliveries, skipping rows another claimer holds locked, with a lease token, counting the
 * attempt in the same statement, so concurrent workers in any number of processes never send one
 * attempt twice (claim-store.ts).
 * With `room`, at most that many per subscription (oldest due first): a subscription with no room is
 * passed over, so the others' deliveries are claimed instead of waiting behind it.
 */
export async function claimDue(deps: Deps, limit: number, token: string, room?: ClaimRoom): Promise<ClaimedDelivery[]> {
  const now = deps.clock.now();
  const lease = addSeconds(now, CLAIM_LEASE_SECONDS);
  if (!room) return claimDueDeliveries(deps.database.scoped('system'), now, token, lease, limit);
  return claimDueWithinRoom(deps.database.scoped('system'), now, token, lease, limit, room);
}

/**
 * Retries set before the clock stepped back are made due now (updateDueAfterStepBack: what counts as
 * such a retry, and why the claim statements do not look for them); run by each delivery pass.
 */
export async function dueAfterStepBack(deps: Deps): Promise<number> {
  const now = deps.clock.now();
  return updateDueAfterStepBack(deps.database.scoped('system'), now, beyondStep(now, 0));
}

/** The signing secrets in force now: the current one, plus the previous one during a rotation overlap. */
export function secretsOf(deps: Deps, d: Pick<ClaimedDelivery, 'subscription_id' | 'signing_secret' | 'previous_secret' | 'previous_secret_expires_at'>, now: Date): string[] {
  const previous = d.previous_secret && d.previous_secret_expires_at && d.previous_secret_expires_at > now ? [d.previous_secret] : [];
  return [d.signing_secret, ...previous].map((stored) => openSigningSecret(deps, d.subscription_id, stored));
}

// Signing secrets are stored sealed (src/auth/secret-box.ts), bound to their subscription; one stored
// before sealing existed is read as it is and sealed at start (resealSigningSecrets).
const secretContext = (subscriptionId: string) => `webhook:${subscriptionId}`;
export const sealSigningSecret = (deps: Deps, subscriptionId: string, secret: string): string => deps.secrets.seal(secret, secretContext(subscriptionId));
const openSigningSecret = (deps: Deps, subscriptionId: string, stored: string): string => deps.secrets.open(stored, secretContext(subscriptionId));

/** At start: signing secrets in the clear or sealed with an old key are sealed with the current one. */
export const resealSigningSecrets = (deps: Deps): Promise<number> =>
  deps.secrets.resealColumns('webhook_subscriptions', ['signing_secret', 'previous_secret'], secretContext);

/**
 * The secrets to sign with, or, when one cannot be opened (sealed with a key this process does not
 * hold: ENCRYPTION_KEY differs between processes, or the value is damaged), a failed attempt that
 * sends nothing: it is recorded and retried on the schedule like any failure, and the rest of its
 * batch is recorded as sent (a throw here lost the batch's outcomes, and its sent attempts went out
 * again after the lease).
 */
function openOrFail(deps: Deps, d: ClaimedDelivery, now: Date): string[] | AttemptResult {
  try {
    return secretsOf(deps, d, now);
  } catch (err) {
    deps.log.error({ err, webhook_delivery_id: d.id, subscription_id: d.subscription_id }, 'webhook signing secret cannot be opened');
    return { ok: false, responseStatus: null, durationMs: 0, error: 'the signing secret cannot be opened (see the service log)' };
  }
}

/** Sends one claimed attempt (signed fresh) and reports what happened; never throws. */
export async function attemptDelivery(deps: Deps, d: ClaimedDelivery, token: string): Promise<Outcome> {
  if (d.type === null || d.data === null || d.event_created_at === null) return { delivery: d, token, result: null, skipped: 'the event is no longer kept' };
  // A disabled subscription gets nothing new; test calls and manual redeliveries still go out.
  if (d.sub_status === 'disabled' && d.kind === 'event') return { delivery: d, token, result: null, skipped: 'the subscription is disabled' };
  const body = renderEnvelope(
    { id: d.event_id, type: d.type, application_id: d.application_id, test_mode: d.test_mode, data: d.data, created_at: d.event_created_at },
    d.api_version,
  );
  const now = deps.clock.now();
  const secrets = openOrFail(deps, d, now);
  if (!Array.isArray(secrets)) return { delivery: d, token, result: secrets };
  const headers = {
    'content-type': 'application/json',
    'user-agent': 'Platform-Webhooks/1.0',
    'platform-event-id': d.event_id,
    'platform-event-type': d.type,
    'platform-delivery-id': d.id,
    'platform-delivery-attempt': String(d.attempt),
    [SIGNATURE_HEADER.toLowerCase()]: signatureHeader(secrets, toUnixSeconds(now), body),
  };
  const result = await postAttempt(deps, { url: d.url, headers, body });
  const line = {
    webhook_delivery_id: d.id,
    subscription_id: d.subscription_id,
    event_id: d.event_id,
    event_type: d.type,
    kind: d.kind,
    attempt: d.attempt,
    ok: result.ok,
    response_status: result.responseStatus,
    duration_ms: result.durationMs,
    ...(result.error ? { error: result.error } : {}),
  };
  if (result.ok) deps.log.info(line, 'webhook attempt succeeded');
  else deps.log.warn(line, 'webhook attempt failed');
  return { delivery: d, token, result };
}
