// Every mail the service sends, in one table. Mails that carry a token put it in a link whose
// query has token=<token> (operations.md).

export interface RenderedMail {
  subject: string;
  text: string;
}

interface Links {
  publicUrl: string;
}

const link = (l: Links, path: string, token: string) => `${l.publicUrl}${path}?token=${encodeURIComponent(token)}`;
/**
 * A name someone else chose (an Organization's, an inviter's), on one line: line breaks, other control
 * and format characters become spaces, so a name cannot lay out text of its own in the mail (a second
 * paragraph with a link of its own above the real one).
 */
const oneLine = (name: string) => name.replace(/[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/gu, ' ').replace(/\s+/g, ' ').trim();
const signed = (fromName: string | null | undefined) => `\n\n— ${fromName ?? 'Platform'}\n`;

export const MAIL_TEMPLATES = {
  email_verification: (v: { token: string; fromName?: string | null }, l: Links): RenderedMail => ({
    subject: `Verify your email address${v.fromName ? ` for ${v.fromName}` : ''}`,
    text:
      `Confirm this address by opening the link below (valid for 24 hours):\n\n` +
      `${link(l, '/verify-email', v.token)}\n\nIf you did not sign up, ignore this message.` +
      signed(v.fromName),
  }),
  email_change_verification: (v: { token: string }, l: Links): RenderedMail => ({
    subject: 'Confirm your new email address',
    text:
      `Someone asked to use this address for their account. Confirm it by opening the link below ` +
      `(valid for 24 hours):\n\n${link(l, '/verify-email', v.token)}\n\nIf this was not you, ignore this message.` +
      signed(null),
  }),
  email_change_notice: (v: { newEmail: string }): RenderedMail => ({
    subject: 'Your email address is being changed',
    text:
      `A change of your account's email address to ${v.newEmail} was requested. It takes effect once the ` +
      `new address is confirmed. If this was not you, reset your password and contact support.` +
      signed(null),
  }),
  invitation: (v: { token: string; inviterName?: string | null }, l: Links): RenderedMail => ({
    subject: 'You have been invited',
    text:
      `${v.inviterName ? `${oneLine(v.inviterName)} invited you` : 'You have been invited'} to create an account. ` +
      `Choose a password by opening the link below (valid for 7 days):\n\n${link(l, '/accept-invitation', v.token)}` +
      signed(null),
  }),
  organization_invitation: (v: { organizationName: string; token?: string | null }, l: Links): RenderedMail => ({
    subject: `You have been invited to join ${oneLine(v.organizationName)}`,
    text:
      `You have been invited to join the organization “${oneLine(v.organizationName)}”.\n\n` +
      (v.token
        ? `Create your account by opening the link below, then accept the invitation:\n\n${link(l, '/accept-invitation', v.token)}`
        : `Sign in to accept the invitation.`) +
      signed(null),
  }),
  password_reset: (v: { token: string }, l: Links): RenderedMail => ({
    subject: 'Reset your password',
    text:
      `Choose a new password by opening the link below (valid for 1 hour):\n\n${link(l, '/reset-password', v.token)}\n\n` +
      `If you did not ask for this, ignore this message; your password stays the same.` +
      signed(null),
  }),
  password_changed: (_v: Record<string, never>): RenderedMail => ({
    subject: 'Your password was changed',
    text: `Your account's password was changed and your other sessions were signed out. If this was not you, reset your password now.` + signed(null),
  }),
  mfa_enabled: (_v: Record<string, never>): RenderedMail => ({
    subject: 'Two-step verification was turned on',
    text:
      `Two-step verification (TOTP) was turned on for your account: signing in now also needs a code from the authenticator app that was set up, or one of its recovery codes. ` +
      `If this was not you, someone else holds that authenticator: ask your administrator to reset two-step verification, then change your password.` +
      signed(null),
  }),
  mfa_disabled: (v: { bySupport: boolean }): RenderedMail => ({
    subject: 'Two-step verification was turned off',
    text:
      (v.bySupport
        ? `An administrator turned off two-step verification (TOTP) on your account and removed its recovery codes. `
        : `Two-step verification (TOTP) was turned off on your account and its recovery codes no longer work. `) +
      `Your password alone now signs you in. If this was not you, reset your password and turn it on again.` +
      signed(null),
  }),
  webhook_disabled: (v: { url: string; subscriptionId: string; reason?: 'unhealthy' | 'gone' }): RenderedMail => ({
    subject: 'A webhook subscription was disabled',
    text:
      (v.reason === 'gone'
        ? `The receiver at ${v.url} (${v.subscriptionId}) answered 410 Gone, so the subscription was disabled. `
        : `Deliveries to ${v.url} (${v.subscriptionId}) kept failing for 5 days, so the subscription was disabled. `) +
      `Fix the receiver, then set its status back to healthy (missed events are not sent again).` +
      signed(null),
  }),
  tier_change_scheduled: (v: { tenantId: string; tier: string; region: string; scheduledFor: string }): RenderedMail => ({
    subject: 'Your tenant migration is scheduled',
    text:
      `Tenant ${v.tenantId} will move to the ${v.tier} tier in ${v.region} starting ${v.scheduledFor}. ` +
      `Writes pause while the migration runs; reads keep working.` +
      signed(null),
  }),
} as const;

export type MailTemplate = keyof typeof MAIL_TEMPLATES;
export type MailVars<T extends MailTemplate> = Parameters<(typeof MAIL_TEMPLATES)[T]>[0];

export function renderMail<T extends MailTemplate>(template: T, vars: MailVars<T>, links: Links): RenderedMail {
  return (MAIL_TEMPLATES[template] as (v: MailVars<T>, l: Links) => RenderedMail)(vars, links);
}
