// The pages the mailed links open (src/mail/templates.ts): `<PUBLIC_URL><path>?token=…`, and the
// /forgot-password page (linked from the sign-in page) that mails the reset link.

export const LINK_PAGE_PATHS: readonly string[] = ['/verify-email', '/reset-password', '/accept-invitation', '/forgot-password'];

/**
 * A URL as the request log may show it: every `token=` query value replaced by `[redacted]` (as the
 * outbox does to sent mail), so a mailed link's token never reaches the logs.
 */
export const redactTokenQuery = (url: string): string => url.replace(/([?&]token=)[^&#]*/gi, '$1[redacted]');
