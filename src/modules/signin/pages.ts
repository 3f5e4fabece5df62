import { createHash } from 'node:crypto';
import type { ApiError } from '../../errors.js';
import type { FieldError } from '../../http/validation.js';
import type { AuthorizationCodeBody } from '../oauth/schemas.js';
import type { SigninSite } from './browser.js';
import { html, raw, type Html } from './html.js';
import { requestQuery } from './params.js';
import type { Outcome } from './service.js';
import type { SigninApp } from './store.js';
import type { FormName } from './schemas.js';

// Server-rendered pages: semantic HTML that works without JavaScript, no external resources, one
// inline style allowed by its hash in the CSP. Errors are role=alert and tied to the fields.

export const STYLE = [
  '*{box-sizing:border-box}',
  'body{margin:0;min-height:100vh;display:flex;align-items:center;justify-content:center;background:#f3f4f6;color:#1b1f24;font:16px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif}',
  // min-width and overflow-wrap: a long email or Application name wraps inside the card at 320 px.
  'main{width:100%;min-width:0;max-width:26rem;margin:1.5rem;padding:2rem;background:#fff;border:1px solid #d5d9df;border-radius:12px;overflow-wrap:anywhere}',
  '.app{display:flex;align-items:center;gap:.75rem;margin:0 0 1.5rem}',
  '.app img,.mono{width:48px;height:48px;border-radius:10px;flex:none;object-fit:cover}',
  '.mono{display:flex;align-items:center;justify-content:center;background:#2f5bd3;color:#fff;font-weight:700;font-size:1.4rem}',
  '.app p{margin:0;color:#47505c}.app strong{display:block;color:#1b1f24;font-size:1.1rem}',
  'h1{font-size:1.5rem;line-height:1.25;margin:0 0 1rem}h2{font-size:1.05rem;margin:1.75rem 0 .25rem}',
  'label{display:block;font-weight:600;margin:1rem 0 .35rem}',
  'input{width:100%;padding:.65rem .75rem;font:inherit;color:inherit;border:1px solid #79828f;border-radius:8px}',
  'input[aria-invalid=true]{border-color:#b3261e}',
  'button,.button{display:block;width:100%;margin-top:1.25rem;padding:.7rem;font:inherit;font-weight:600;text-align:center;text-decoration:none;color:#fff;background:#2f5bd3;border:0;border-radius:8px;cursor:pointer}',
  'button:hover,.button:hover{background:#2449ad}',
  // The focus ring keeps 3:1 against the card and the page (WCAG 1.4.11).
  'input:focus,button:focus,a:focus,summary:focus{outline:3px solid #2f5bd3;outline-offset:2px}',
  '.alert{margin:0 0 1rem;padding:.75rem 1rem;border:1px solid #b3261e;border-left-width:4px;border-radius:8px;background:#fdecea;color:#6d1410}',
  '.alert p{margin:0}.alert ul{margin:.5rem 0 0;padding-left:1.25rem}',
  '.note{color:#47505c;font-size:.9rem}.badge{display:inline-block;margin:0 0 1rem;padding:.1rem .5rem;border-radius:999px;background:#fff4d6;color:#6b4a00;font-size:.8rem;font-weight:600}',
  'details{margin-top:1.5rem}summary{cursor:pointer;color:#2449ad}a{color:#2449ad}',
].join('');
export const STYLE_HASH = `sha256-${createHash('sha256').update(STYLE).digest('base64')}`;

export interface View {
  app: Pick<SigninApp, 'name' | 'icon_url' | 'test_mode'>;
  request: AuthorizationCodeBody;
  site: SigninSite;
  csrf: (form: FormName) => string;
}

export const ERROR_ID = 'signin-error';

/** The title of a step showing an error says so first (screen readers announce the title on load). */
export const stepTitle = (title: string, message: string | undefined): string => (message ? `Error: ${title}` : title);

export function layout(title: string, body: Html, app: View['app'] | null): string {
  const doc = html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex, nofollow">
<title>${app ? `${title} – ${app.name}` : title}</title>
<style>${raw(STYLE)}</style>
</head>
<body>
<main>
${app ? appHeader(app) : null}${body}
</main>
</body>
</html>
`;
  return doc.text;
}

/** The Application's icon (https only) or its initial, and its name. */
function appHeader(app: View['app']): Html {
  const icon = /^https:\/\//i.test(app.icon_url ?? '')
    ? html`<img src="${app.icon_url}" alt="" width="48" height="48" referrerpolicy="no-referrer">`
    : html`<span class="mono" aria-hidden="true">${[...app.name.trim()][0]?.toUpperCase() ?? '?'}</span>`;
  return html`<header class="app">${icon}<p>Continue to<strong>${app.name}</strong></p></header>
${app.test_mode ? html`<p class="badge">Test mode</p>` : null}`;
}

export const alert = (message: string | undefined, extra: Html | null = null): Html | null =>
  message ? html`<div class="alert" role="alert" id="${ERROR_ID}"><p>${message}</p>${extra}</div>` : null;

/** The authorization request (and the form's CSRF token) carried through every form. */
function hidden(v: View, form: FormName, extra: Record<string, string> = {}): Html {
  const fields: Record<string, string | undefined> = { ...v.request, csrf: v.csrf(form), ...extra };
  return html`${Object.entries(fields)
    .filter(([, value]) => value !== undefined)
    .map(([name, value]) => html`<input type="hidden" name="${name}" value="${value}">`)}`;
}

/** aria attributes tying a field to the page's error message. */
export const invalidAttrs = (message: string | undefined): Html => (message ? html` aria-invalid="true" aria-describedby="${ERROR_ID}"` : html``);

function passwordForm(v: View, o: Extract<Outcome, { view: 'password' }>): Html {
  const attrs = invalidAttrs(o.message);
  return html`<form method="post" action="${v.site.paths.signin}">
${hidden(v, 'password')}
<label for="email">Email</label>
<input id="email" name="email" type="email" autocomplete="username" autocapitalize="none" spellcheck="false" maxlength="320" required value="${o.email ?? ''}"${attrs}${o.email || o.signedInAs ? null : raw(' autofocus')}>
<label for="password">Password</label>
<input id="password" name="password" type="password" autocomplete="current-password" maxlength="1024" required${attrs}${o.email ? raw(' autofocus') : null}>
<button type="submit">Sign in</button>
</form>
<p><a href="${v.site.paths.forgot}?${requestQuery(v.request)}">Forgot password?</a></p>`;
}

export function passwordPage(v: View, o: Extract<Outcome, { view: 'password' }>): string {
  if (o.signedInAs && !o.message) {
    return layout('Sign in', html`<h1>Sign in</h1>
<p>You are signed in as <strong>${o.signedInAs}</strong>.</p>
<form method="post" action="${v.site.paths.continue}">
${hidden(v, 'continue')}
<button type="submit" autofocus>Continue as ${o.signedInAs}</button>
</form>
<h2>Use another account</h2>
${passwordForm(v, o)}`, v.app);
  }
  return layout(stepTitle('Sign in', o.message), html`<h1>Sign in</h1>
${alert(o.message)}${passwordForm(v, o)}`, v.app);
}

export function mfaPage(v: View, o: Extract<Outcome, { view: 'mfa' }>): string {
  const attrs = invalidAttrs(o.message);
  const extra = { mfa_token: o.mfaToken };
  return layout(stepTitle('Two-step verification', o.message), html`<h1>Two-step verification</h1>
${alert(o.message)}<p>Signing in as <strong>${o.email}</strong>.</p>
<form method="post" action="${v.site.paths.mfa}">
${hidden(v, 'mfa', extra)}
<label for="code">Authentication code</label>
<p class="note" id="code-hint">Enter the 6-digit code from your authenticator app.</p>
<input id="code" name="code" type="text" inputmode="numeric" autocomplete="one-time-code" maxlength="12" required aria-describedby="code-hint${o.message && !o.recovery ? ` ${ERROR_ID}` : ''}"${o.message && !o.recovery ? raw(' aria-invalid="true"') : null}${o.recovery ? null : raw(' autofocus')}>
<button type="submit">Verify</button>
</form>
<details${o.recovery ? raw(' open') : null}>
<summary>Use a recovery code instead</summary>
<form method="post" action="${v.site.paths.mfa}">
${hidden(v, 'mfa', extra)}
<label for="recovery_code">Recovery code</label>
<input id="recovery_code" name="recovery_code" type="text" autocomplete="off" autocapitalize="none" spellcheck="false" maxlength="64" required${o.recovery ? attrs : null}${o.recovery ? raw(' autofocus') : null}>
<button type="submit">Verify recovery code</button>
</form>
</details>
<p><a href="${v.site.paths.signin}?${requestQuery(v.request)}">Use another account</a></p>`, v.app);
}

export function deniedPage(v: View, o: Extract<Outcome, { view: 'denied' }>): string {
  return layout('No access', html`<h1>No access to ${v.app.name}</h1>
<div class="alert" role="alert" id="${ERROR_ID}"><p>You are signed in as <strong>${o.email}</strong>, but this account does not have access to ${v.app.name}.</p></div>
<a class="button" href="${o.returnTo}">Return to ${v.app.name}</a>
<p><a href="${v.site.paths.signin}?${requestQuery(v.request)}">Sign in with another account</a></p>`, v.app);
}

function errorTitle(error: ApiError): string {
  if (error.code === 'bad_request') return 'This sign-in link is not valid';
  if (error.code === 'forbidden' || error.code === 'method_not_allowed') return 'Please start again';
  if (error.code === 'rate_limited') return 'Too many requests';
  if (error.status >= 500) return 'Something went wrong';
  return 'Sign-in is not possible';
}

/** A dead end: never a form, never a link to the (possibly unregistered) redirect_uri. */
export function errorPage(error: ApiError, message: string): string {
  const fields = (error.details.fields ?? []) as FieldError[];
  const list = fields.length ? html`<ul>${fields.map((f) => html`<li><code>${f.path}</code> ${f.message}</li>`)}</ul>` : null;
  const advice = error.status >= 500
    ? 'Please try again in a moment.'
    : 'Go back to the application you came from and start signing in again. If this keeps happening, contact its support.';
  return layout(errorTitle(error), html`<h1>${errorTitle(error)}</h1>
${alert(message, list)}<p class="note">${advice}</p>`, null);
}
