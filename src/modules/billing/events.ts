import { requestLog, type Deps } from '../../context.js';
import { ApiError } from '../../errors.js';
import { toUnixSeconds } from '../../clock.js';
import { Stripe } from './processor.js';
import { applyProcessorEvent, instantOfSeconds, malformedEvent, PROCESSOR_ID_MAX_LENGTH, type EventOutcome, type ProcessorEvent } from './apply.js';

/** Stripe's replay window: a signature timestamp further than this from the service clock is refused. */
export const SIGNATURE_TOLERANCE_SECONDS = 300;

const refuse = (reason: string) => new ApiError('invalid_signature', { details: { reason } });

/**
 * Verifies Stripe-Signature over the exact raw body with STRIPE_WEBHOOK_SECRET and parses the event.
 * The timestamp is judged against the service clock in both directions (Stripe's library only
 * checks age, against the wall clock), so a skewed or replayed header is refused.
 */
export function verifyProcessorEvent(secret: string, raw: Uint8Array | string | undefined, header: unknown, now: Date): ProcessorEvent {
  if (typeof header !== 'string' || header.trim() === '') throw refuse('missing_signature');
  // Items read as the processor's library reads them (keys as written, the last t= wins there), so the
  // timestamp judged below is the one that was signed; a header naming two is refused, not guessed at.
  const items = header.split(',').map((item) => item.split('='));
  const timestamps = items.filter(([key]) => key === 't').map(([, value]) => value);
  const timestamp = timestamps.length === 1 && /^\d{1,12}$/.test(timestamps[0] ?? '') ? timestamps[0] : null;
  if (!timestamp || !items.some(([key, value]) => key === 'v1' && /^[0-9a-fA-F]+$/.test(value ?? ''))) throw refuse('malformed_signature');
  if (!raw || raw.length === 0) throw refuse('missing_body');
  let event: unknown;
  try {
    event = Stripe.webhooks.constructEvent(raw, header, secret, SIGNATURE_TOLERANCE_SECONDS, undefined, now.getTime());
  } catch (err) {
    if (err instanceof SyntaxError) throw new ApiError('malformed_json');
    if (err instanceof Stripe.errors.StripeSignatureVerificationError) {
      throw refuse(/tolerance/i.test(err.message) ? 'timestamp_outside_tolerance' : 'signature_mismatch');
    }
    throw err;
  }
  if (Math.abs(toUnixSeconds(now) - Number(timestamp)) > SIGNATURE_TOLERANCE_SECONDS) throw refuse('timestamp_outside_tolerance');
  const e = event as Partial<ProcessorEvent> | null;
  if (!e || typeof e.id !== 'string' || typeof e.type !== 'string' || typeof e.created !== 'number' || typeof e.data?.object !== 'object' || e.data.object === null) {
    throw new ApiError('bad_request', { message: 'The event lacks id, type, created or data.object.' });
  }
  // The id is the event's key and created its order: both are stored, so they must be storable.
  if (e.id.length === 0 || e.id.length > PROCESSOR_ID_MAX_LENGTH) throw malformedEvent(`its id must be 1–${PROCESSOR_ID_MAX_LENGTH} characters`);
  if (!instantOfSeconds(e.created)) throw malformedEvent('created is not a date the service stores');
  return e as ProcessorEvent;
}

/**
 * POST /v1/billing/processor-events, and the local simulator's deliveries: verify, then apply once
 * per event id. Nothing changes unless the signature holds.
 */
export async function receiveProcessorEvent(deps: Deps, raw: Uint8Array | string | undefined, header: unknown, requestId: string | null): Promise<EventOutcome> {
  // With a real processor, the simulator's public secret would let anyone forge a payment.
  if (deps.config.stripeWebhookSecret === null) throw refuse('webhook_secret_not_configured');
  const event = verifyProcessorEvent(deps.config.stripeWebhookSecret, raw, header, deps.clock.now());
  const outcome = await applyProcessorEvent(deps, event, requestId);
  requestLog(deps, requestId).info({ event_id: event.id, event_type: event.type, outcome }, 'processor event received');
  return outcome;
}
