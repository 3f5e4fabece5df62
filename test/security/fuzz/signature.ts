import { createHmac } from 'node:crypto';

/** Stripe's scheme: t=<unix>,v1=HMAC-SHA256(secret, "<t>.<body>"), the key being the secret's UTF-8 bytes. */
export function stripeSignature(secret: string, body: string, at = Math.floor(Date.now() / 1000)): string {
  return `t=${at},v1=${createHmac('sha256', secret).update(`${at}.${body}`).digest('hex')}`;
}
