import assert from 'node:assert/strict';
import type { TestApp } from './app.js';
import { sql } from './http.js';

export interface MailRow {
  id: string;
  template: string;
  to_address: string;
  from_name: string | null;
  subject: string;
  text_body: string;
}

/** Mails queued to an address (any mode), oldest first, optionally of one template. */
export async function mailsTo(t: TestApp, email: string, template?: string): Promise<MailRow[]> {
  return sql<MailRow>(
    t,
    `SELECT id, template, to_address, from_name, subject, text_body FROM emails
      WHERE lower(to_address) = lower($1) ${template ? 'AND template = $2' : ''} ORDER BY created_at, id`,
    template ? [email, template] : [email],
  );
}

/** The token of the `token=` link in a mail body. */
export function linkToken(mail: MailRow): string {
  const match = /[?&]token=([^\s&]+)/.exec(mail.text_body);
  assert.ok(match, `no token= link in ${mail.template} mail: ${mail.text_body}`);
  return decodeURIComponent(match[1]);
}

/** The token of the newest mail of this template to this address. */
export async function latestToken(t: TestApp, email: string, template: string): Promise<string> {
  const mails = await mailsTo(t, email, template);
  assert.ok(mails.length > 0, `no ${template} mail to ${email}`);
  return linkToken(mails[mails.length - 1]);
}
