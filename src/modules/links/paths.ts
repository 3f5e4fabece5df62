// The pages the mailed links open (src/mail/templates.ts): `<PUBLIC_URL><path>?token=…`, and the
// /forgot-password page (linked from the sign-in page) that mails the reset link.

export const LINK_PAGE_PATHS: readonly string[] = ['/verify-email', '/reset-password', '/accept-invitation', '/forgot-password'];

