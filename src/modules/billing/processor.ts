import Stripe from 'stripe';
import type { FastifyBaseLogger } from 'fastify';
import type { Config } from '../../config.js';
import { ApiError } from '../../errors.js';

type StripeConfig = NonNullable<ConstructorParameters<typeof Stripe>[1]>;

/** Bounded processor calls: a down processor answers 503 billing_unavailable within about 2 × timeout. */
const TIMEOUT_MS = 5000;
const RETRY_AFTER_SECONDS = 30;

const clients = new WeakMap<object, Stripe>();

/** The Stripe client for this configuration, or null when STRIPE_SECRET_KEY is unset (the local simulator runs instead). */
export function processorClient(config: Readonly<Config>): Stripe | null {
  if (!config.stripeSecretKey) return null;
  let client = clients.get(config);
  if (!client) {
    const options: StripeConfig = { maxNetworkRetries: 1, timeout: TIMEOUT_MS, telemetry: false };
    if (config.stripeApiBase) {
      // STRIPE_API_BASE points the client at another host (a test double of the processor).
      const base = new URL(config.stripeApiBase);
      const protocol = base.protocol === 'http:' ? 'http' : 'https';
      options.host = base.hostname;
      options.protocol = protocol;
      options.port = base.port || (protocol === 'http' ? 80 : 443);
    }
    client = new Stripe(config.stripeSecretKey, options);
    clients.set(config, client);
  }
  return client;
}

/**
 * Runs a processor call; any processor failure (unreachable, timeout, or an error answer) becomes
 * 503 billing_unavailable with Retry-After. Errors other than connection failures are logged.
 */
export async function callProcessor<T>(log: FastifyBaseLogger, operation: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (!(err instanceof Stripe.errors.StripeError)) throw err;
    const connection = err instanceof Stripe.errors.StripeConnectionError;
    if (connection) log.warn({ operation, message: err.message }, 'payment processor unreachable');
    else log.error({ operation, type: err.type, code: err.code, status: err.statusCode, message: err.message }, 'payment processor refused a request');
    throw new ApiError('billing_unavailable', {
      details: { operation, reason: connection ? 'unreachable' : 'processor_error' },
      headers: { 'retry-after': String(RETRY_AFTER_SECONDS) },
    });
  }
}

export { Stripe };
