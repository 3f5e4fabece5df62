import { createHmac, timingSafeEqual } from 'node:crypto';

export const SIGNATURE_HEADER = 'Platform-Signature';
export const REPLAY_TOLERANCE_SECONDS = 300;

/** Hex HMAC-SHA256 of `<t>.<raw body>`, keyed with the UTF-8 bytes of the secret string. */
export function signPayload(secret: string, timestamp: number, rawBody: string | Buffer): string {
  return createHmac('sha256', secret).update(`${timestamp}.`).update(rawBody).digest('hex');
}

/** `t=<unix>,v1=<hex>[,v1=<hex>]`: one v1 per secret (two during a rotation overlap). */
export function signatureHeader(secrets: string[], timestamp: number, rawBody: string | Buffer): string {
  return [`t=${timestamp}`, ...secrets.map((s) => `v1=${signPayload(s, timestamp, rawBody)}`)].join(',');
}

/**
 * The receiver's check: any v1 entry matches (constant-time compare) and t is at most 5 minutes
 * away from `nowSeconds`. Exported for tests and for anyone verifying deliveries in Node.
 */
export function verifySignature(header: string, secret: string, rawBody: string | Buffer, nowSeconds: number, toleranceSeconds = REPLAY_TOLERANCE_SECONDS): boolean {
  let timestamp: number | null = null;
  const candidates: string[] = [];
  for (const part of header.split(',')) {
    const eq = part.indexOf('=');
    if (eq < 0) continue;
    const key = part.slice(0, eq).trim();
    const value = part.slice(eq + 1).trim();
    if (key === 't' && /^\d+$/.test(value)) timestamp = Number(value);
    else if (key === 'v1' && /^[0-9a-f]{64}$/.test(value)) candidates.push(value);
  }
  if (timestamp === null || candidates.length === 0) return false;
  if (Math.abs(nowSeconds - timestamp) > toleranceSeconds) return false;
  const expected = Buffer.from(signPayload(secret, timestamp, rawBody), 'hex');
  return candidates.some((c) => timingSafeEqual(Buffer.from(c, 'hex'), expected));
}
