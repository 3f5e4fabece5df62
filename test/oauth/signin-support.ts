// Helpers of the hosted sign-in page tests (test/oauth/signin-*.test.ts): drive /signin like a browser
// without JavaScript would, through app.inject (the page's forms, their hidden fields, its cookie).
import assert from 'node:assert/strict';
import type { TestApp } from '../helpers/app.js';
import type { InjectResponse } from '../access/support.js';
import { pkce, REDIRECT, type Pkce } from './support.js';

export const COOKIE = 'platform_signin';

export interface Flow extends Pkce {
  params: Record<string, string>;
}

/** A fresh authorization request (PKCE pair and state) for the Application. */
export function flow(applicationId: string, extra: Record<string, string> = {}): Flow {
  const p = pkce();
  return {
    ...p,
    params: { application_id: applicationId, redirect_uri: REDIRECT, code_challenge: p.challenge, code_challenge_method: 'S256', state: 'st-1', ...extra },
  };
}

export const signinUrl = (params: Record<string, string>) => `/signin?${new URLSearchParams(params)}`;

const decode = (s: string) => s.replace(/&quot;/g, '"').replace(/&#39;/g, "'").replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&amp;/g, '&');

/** The secret of the page cookie set by this response, if any. */
export function setCookieSecret(res: InjectResponse): string | null {
  const header = [res.headers['set-cookie'] ?? []].flat().find((c) => String(c).startsWith(`${COOKIE}=`));
  return header ? String(header).slice(COOKIE.length + 1).split(';')[0] : null;
}

export const setCookieHeader = (res: InjectResponse): string | undefined =>
  [res.headers['set-cookie'] ?? []].flat().map(String).find((c) => c.startsWith(`${COOKIE}=`));

/** Every form of a page: its action and its hidden fields (what a browser would submit with it). */
export function forms(body: string): { action: string; hidden: Record<string, string> }[] {
  return [...body.matchAll(/<form method="post" action="([^"]+)">([\s\S]*?)<\/form>/g)].map((m) => ({
    action: decode(m[1]),
    hidden: Object.fromEntries([...m[2].matchAll(/<input type="hidden" name="([^"]+)" value="([^"]*)">/g)].map((h) => [h[1], decode(h[2])])),
  }));
}

export function formOf(res: InjectResponse, action: string, index = 0): Record<string, string> {
  const found = forms(res.body).filter((f) => f.action === action);
  assert.ok(found[index], `no form posting to ${action} on the page (${res.statusCode}): ${res.body}`);
  return found[index].hidden;
}

/** A browser-like session: remembers the page cookie between requests. */
export class Browser {
  cookie: string | null = null;

  constructor(private readonly t: TestApp) {}

  private remember(res: InjectResponse): InjectResponse {
    this.cookie = setCookieSecret(res) ?? this.cookie;
    return res;
  }

  async open(params: Record<string, string>): Promise<InjectResponse> {
    return this.remember(await this.t.app.inject({ method: 'GET', url: signinUrl(params), headers: this.headers() }));
  }

  async post(action: string, fields: Record<string, string>): Promise<InjectResponse> {
    return this.remember(
      await this.t.app.inject({
        method: 'POST',
        url: action,
        headers: { 'content-type': 'application/x-www-form-urlencoded', ...this.headers() },
        payload: new URLSearchParams(fields).toString(),
      }),
    );
  }

  /** Fills the password form of `page` and submits it. */
  signIn(page: InjectResponse, email: string, password: string): Promise<InjectResponse> {
    return this.post('/signin', { ...formOf(page, '/signin'), email, password });
  }

  /** Submits the code form (index 0) or the recovery form (index 1) of an MFA page. */
  mfa(page: InjectResponse, field: 'code' | 'recovery_code', value: string): Promise<InjectResponse> {
    return this.post('/signin/mfa', { ...formOf(page, '/signin/mfa', field === 'code' ? 0 : 1), [field]: value });
  }

  private headers(): Record<string, string> {
    return this.cookie ? { cookie: `${COOKIE}=${this.cookie}` } : {};
  }
}

/** An HTML page with this status whose alert says `message`. */
export function assertPage(res: InjectResponse, status: number, message?: string | RegExp): string {
  assert.equal(res.statusCode, status, `expected ${status}, got ${res.statusCode} ${res.body}`);
  assert.match(String(res.headers['content-type']), /^text\/html; charset=utf-8/);
  assert.equal(res.headers.location, undefined, 'a page never redirects');
  if (message !== undefined) {
    const alert = /<div class="alert" role="alert" id="signin-error">([\s\S]*?)<\/div>/.exec(res.body);
    assert.ok(alert, `no alert on the page: ${res.body}`);
    const text = decode(alert[1].replace(/<[^>]+>/g, ''));
    if (typeof message === 'string') assert.ok(text.includes(message), `alert "${text}" does not say "${message}"`);
    else assert.match(text, message);
  }
  return res.body;
}

/** The 303 to the redirect_uri: returns its code and state. */
export function assertRedirect(res: InjectResponse): { code: string; state: string | null; url: URL } {
  assert.equal(res.statusCode, 303, `expected 303, got ${res.statusCode} ${res.body}`);
  const url = new URL(String(res.headers.location));
  assert.equal(`${url.origin}${url.pathname}`, REDIRECT);
  const code = url.searchParams.get('code') ?? '';
  assert.ok(code.startsWith('oac_'), String(res.headers.location));
  return { code, state: url.searchParams.get('state'), url };
}
