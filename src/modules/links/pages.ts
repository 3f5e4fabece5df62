import type { ApiError } from '../../errors.js';
import type { FieldError } from '../../http/validation.js';
import { html, type Html } from '../signin/html.js';
import { alert, invalidAttrs, layout, stepTitle, type View } from '../signin/pages.js';

// The pages the mailed links open, in the hosted sign-in page's layout, style and escaping: semantic
// HTML without JavaScript, errors in a role=alert region tied to the field. No Application header: a
// mailed link is not tied to one.

export type LinkKind = 'verify_email' | 'reset_password' | 'accept_invitation';

/** A form of a link page: where it posts, the mailed token and the CSRF token (hidden fields). */
export interface LinkForm {
  action: string;
  token: string;
  csrf: string;
}

const hidden = (f: LinkForm): Html =>
  html`<input type="hidden" name="token" value="${f.token}">
<input type="hidden" name="csrf" value="${f.csrf}">`;

export function verifyEmailPage(f: LinkForm): string {
  return layout('Verify your email address', html`<h1>Verify your email address</h1>
<p>Confirm that this email address is yours.</p>
<form method="post" action="${f.action}">
${hidden(f)}
<button type="submit" autofocus>Verify email address</button>
</form>`, null);
}

const PASSWORD_STEPS = {
  reset_password: { title: 'Choose a new password', button: 'Change password' },
  accept_invitation: { title: 'Accept your invitation', button: 'Create account' },
} as const;

/**
 * The new-password form of the reset and invitation pages; `message` is why the last try was refused.
 * No `maxlength`: browsers count it in UTF-16 code units and silently cut pasted text to it, so 128
 * would set a password other than the one typed (70 emoji became 64; 150 letters became 128, accepted)
 * where the policy counts code points and never truncates; the server's too_long says what is wrong.
 * `minlength` counts the same units, never more than the code points, so it refuses no valid password.
 */
export function passwordPage(kind: 'reset_password' | 'accept_invitation', f: LinkForm, email: string | null, message?: string): string {
  const step = PASSWORD_STEPS[kind];
  return layout(stepTitle(step.title, message), html`<h1>${step.title}</h1>
${alert(message)}${email ? html`<p>For <strong>${email}</strong>. Choose a password of 12 to 128 characters.</p>` : html`<p>Choose a password of 12 to 128 characters.</p>`}
<form method="post" action="${f.action}">
${hidden(f)}
${email ? html`<input type="hidden" name="username" value="${email}" autocomplete="username">
` : null}<label for="password">New password</label>
<input id="password" name="password" type="password" autocomplete="new-password" minlength="12" required${invalidAttrs(message)} autofocus>
<button type="submit">${step.button}</button>
</form>`, null);
}

const DONE = {
  verify_email: { title: 'Email address verified', text: 'Your email address is verified.' },
  reset_password: { title: 'Password changed', text: 'Your password is changed. Sign in with it.' },
  accept_invitation: { title: 'Account ready', text: 'Your account is ready. Sign in to the application that invited you with your email address and this password.' },
} as const;

export function donePage(kind: LinkKind): string {
  const done = DONE[kind];
  return layout(done.title, html`<h1>${done.title}</h1>
<p role="status">${done.text}</p>
<p class="note">You can close this page.</p>`, null);
}

function errorTitle(error: ApiError): string {
  if (error.code === 'invalid_token') return 'This link is invalid or has expired';
  if (error.code === 'bad_request') return 'This link is not valid';
  if (error.code === 'forbidden' || error.code === 'method_not_allowed') return 'Please open the link again';
  if (error.code === 'rate_limited') return 'Too many requests';
  if (error.status >= 500) return 'Something went wrong';
  return 'This link cannot be used';
}

/** A dead end: no form, no link. */
export function linkErrorPage(error: ApiError, message: string): string {
  const fields = (error.details.fields ?? []) as FieldError[];
  const list = fields.length ? html`<ul>${fields.map((f) => html`<li><code>${f.path}</code> ${f.message}</li>`)}</ul>` : null;
  const advice = error.status >= 500 || error.code === 'rate_limited'
    ? 'Please try again in a moment.'
    : error.code === 'invalid_token'
      ? 'Links in our emails work once and expire. Ask the application for a new email, then open its link.'
      : 'Open the link from the email again. If this keeps happening, contact the support of the application that sent it.';
  return layout(errorTitle(error), html`<h1>${errorTitle(error)}</h1>
${alert(message, list)}<p class="note">${advice}</p>`, null);
}

/** The /forgot-password page's form: the sign-in request (if any) rides along in hidden fields. */
export interface ForgotForm {
  action: string;
  csrf: string;
  /** The /signin parameters it was opened with (none when opened on its own). */
  request: Record<string, string> | null;
  /** The /signin URL to go back to (with those parameters), or null. */
  back: string | null;
  app: View['app'] | null;
}

const forgotHidden = (f: ForgotForm): Html =>
  html`${Object.entries({ ...(f.request ?? {}), csrf: f.csrf }).map(([name, value]) => html`<input type="hidden" name="${name}" value="${value}">
`)}`;

const backLink = (f: ForgotForm): Html | null => (f.back ? html`<p><a href="${f.back}">Back to sign in</a></p>` : null);

/** The email form; `message` is why the last try was refused (a blank address). */
export function forgotPasswordPage(f: ForgotForm, message?: string): string {
  return layout(stepTitle('Reset your password', message), html`<h1>Reset your password</h1>
${alert(message)}<p>Enter the email address of your account and we will email you a link to choose a new password.</p>
<form method="post" action="${f.action}">
${forgotHidden(f)}<label for="email">Email</label>
<input id="email" name="email" type="email" autocomplete="username" autocapitalize="none" spellcheck="false" maxlength="320" required${invalidAttrs(message)} autofocus>
<button type="submit">Email me a reset link</button>
</form>
${backLink(f)}`, f.app);
}

/** The one answer, whatever the address (nothing in it depends on the address). */
export function forgotSentPage(f: ForgotForm): string {
  return layout('Check your email', html`<h1>Check your email</h1>
<p role="status">If an account exists for that address, we sent a link to choose a new password. It expires in 1 hour.</p>
<p class="note">No email? Check your spam folder, or try again in a few minutes.</p>
${backLink(f)}`, f.app);
}
