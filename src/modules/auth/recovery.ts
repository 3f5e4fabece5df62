import type { Ctx } from '../../context.js';
import { inTx } from '../../context.js';
import { modeOf, type Tx } from '../../db/types.js';
import { ApiError } from '../../errors.js';
import { assertStrongPassword, hashPassword, withPasswordWork } from '../../auth/passwords.js';
import { consumeOneTimeToken, issueOneTimeToken, peekOneTimeToken, voidAddressTokens, voidInvitations, voidPasswordTokens, type OneTimeTokenKind, type OneTimeTokenRow } from '../../auth/one-time-tokens.js';
import { enqueueMail } from '../../mail/outbox.js';
import { recordAudit } from '../../audit/record.js';
import { takeSlidingQuota } from '../../http/counters.js';
import { findLiveUserByEmail, findUserById, holdUserBeforeLinks, lockUser, toUser, type UserRow } from '../users/store.js';
import { lockUnchanged, sendInvitation, sendVerification, takeResendQuota } from '../users/invitations.js';
import { assignEmail } from '../users/status.js';
import { revokeSessions } from '../sessions/store.js';
import { setPassword } from './identities.js';
import { updateEmailConfirmed, updateEmailVerified, updateUserActivated } from './store.js';
import { issueSession } from './sessions.js';
import type { AuthSession, EmailBody, TokenBody, TokenPasswordBody } from './schemas.js';
import { withAccessFlips } from '../../access/flips.js';

/** Password reset mails: 3 per email per hour, like the re-send family. */
const RESET_LIMIT_PER_HOUR = 3;
const badToken = () => new ApiError('invalid_token');

/** Token endpoints need no test_mode: the token's own mode scopes the work. */
async function tokenCtx(base: Ctx, kinds: OneTimeTokenKind[], token: string): Promise<{ ctx: Ctx; pending: OneTimeTokenRow; user: UserRow }> {
  const pending = await peekOneTimeToken(base.deps.database.scoped('system'), kinds, token, base.now);
  if (!pending) throw badToken();
  const mode = modeOf(pending.test_mode);
  const ctx: Ctx = { ...base, mode, db: base.deps.database.scoped(mode) };
  const user = await findUserById(ctx.db, pending.user_id);
  if (!user || user.status === 'deleted') throw badToken();
  return { ctx, pending, user };
}

async function consume(tx: Tx, pending: OneTimeTokenRow, now: Date): Promise<void> {
  if (!(await consumeOneTimeToken(tx, pending.id, now))) throw badToken();
}

/** POST /v1/auth/email/verify: completes signup verification or a self-service email change. */
export async function verifyEmail(base: Ctx, input: TokenBody): Promise<void> {
  const { ctx, pending, user } = await tokenCtx(base, ['email_verification', 'email_change'], input.token);
  await ctx.db.transaction(async (tx) => {
    if (pending.kind === 'email_verification') {
      // The user before the link, as an email change takes them (the user, then its links); a delete
      // or purge that committed meanwhile is seen, as one before the link was followed (tokenCtx).
      const status = await holdUserBeforeLinks(tx, user.id);
      if (status === null || status === 'deleted') throw badToken();
      await consume(tx, pending, ctx.now);
      await updateEmailVerified(tx, user.id, ctx.now);
      return;
    }
    // Decided on the user as it is now, locked before the token as a status or email change locks
    // them (the user, then its links): only the change still pending (an admin may have set another
    // address since), and only for an active user (a suspended or deleted one changes no address).
    const current = await lockUser(tx, user.id);
    await consume(tx, pending, ctx.now);
    const email = String(pending.data.email);
    if (current?.status !== 'active' || current.pending_email?.toLowerCase() !== email.toLowerCase()) throw badToken();
    await assignEmail(tx, user.id, email, () => updateEmailConfirmed(tx, user.id, email, ctx.now));
    // Links mailed to the old address (verification, reset) die with it.
    await voidAddressTokens(tx, user.id, ctx.now);
    await recordAudit(tx, inTx(ctx, tx), {
      action: 'user.email_changed',
      target: { type: 'user', id: user.id },
      targetUserId: user.id,
      before: { email: current.email },
      after: { email },
      actor: { type: 'user', id: user.id },
    });
  });
}

/** POST /v1/auth/email/verify/resend: always 202; never reveals whether the address is known. */
export async function resendVerification(ctx: Ctx, input: EmailBody): Promise<void> {
  const user = await findLiveUserByEmail(ctx.db, input.email);
  if (!user || (user.status !== 'invited' && (user.status !== 'active' || user.email_verified))) return;
  await ctx.db.transaction(async (tx) => {
    // Decided on the user as it is now (lockUnchanged): nothing is mailed to an address they left meanwhile.
    const current = await lockUnchanged(tx, user);
    if (!current || (current.status === 'active' && current.email_verified)) return;
    if (!(await takeResendQuota(tx, ctx, current.email)).allowed) return;
    if (current.status === 'invited') await sendInvitation(tx, ctx, current);
    else await sendVerification(tx, ctx, current);
  });
}

/** POST /v1/auth/password/forgot: always 202. Active users get a reset link; invited ones their invitation. */
export async function forgotPassword(ctx: Ctx, input: EmailBody): Promise<void> {
  const found = await findLiveUserByEmail(ctx.db, input.email);
  if (!found || (found.status !== 'active' && found.status !== 'invited')) return;
  await ctx.db.transaction(async (tx) => {
    // Decided on the user as it is now, locked before its links as a status or email change locks them:
    // a suspension or delete committed since the read above ended the reset links, and an email change
    // moved them to another address; no link is mailed after either.
    const user = await lockUnchanged(tx, found);
    if (!user) return;
    if (user.status === 'invited') {
      if ((await takeResendQuota(tx, ctx, user.email)).allowed) await sendInvitation(tx, ctx, user);
      return;
    }
    if (!(await takeSlidingQuota(tx, `mail:reset:${ctx.mode}:${user.email.toLowerCase()}`, RESET_LIMIT_PER_HOUR, 3600, ctx.now)).allowed) return;
    const token = await issueOneTimeToken(tx, ctx, { kind: 'password_reset', userId: user.id, replacePrevious: true });
    await enqueueMail(tx, ctx, { template: 'password_reset', to: user.email, vars: { token }, userId: user.id });
  });
}

/** POST /v1/auth/password/reset: single-use token; sets the password and ends every session. */
export const resetPassword = (base: Ctx, input: TokenPasswordBody): Promise<void> => withPasswordWork(() => resetPasswordAdmitted(base, input));

async function resetPasswordAdmitted(base: Ctx, input: TokenPasswordBody): Promise<void> {
  const { ctx, pending, user } = await tokenCtx(base, ['password_reset'], input.token);
  assertStrongPassword(input.password, user.email);
  const passwordHash = await hashPassword(input.password);
  await ctx.db.transaction(async (tx) => {
    // The user before the link, as password/forgot, a suspension or an email change takes them (the
    // user, then its links): in the other order a reset and one of those at once deadlocked.
    await holdUserBeforeLinks(tx, user.id);
    await consume(tx, pending, ctx.now);
    // The challenges before the identity, in the order an MFA sign-in takes them (it uses its challenge,
    // then takes the identity): in the other order the two at once deadlocked.
    await voidPasswordTokens(tx, user.id, ctx.now);
    await setPassword(tx, user.id, passwordHash, ctx.now);
    // Following the mailed link proves control of the address.
    await updateEmailVerified(tx, user.id, ctx.now);
    await revokeSessions(tx, { userId: user.id }, ctx.now);
    await recordAudit(tx, inTx(ctx, tx), {
      action: 'user.password_reset',
      target: { type: 'user', id: user.id },
      targetUserId: user.id,
      actor: { type: 'user', id: user.id },
    });
  });
}

/** POST /v1/auth/invitations/accept: sets the password, activates the invited user, signs in. */
export const acceptInvitation = (base: Ctx, input: TokenPasswordBody): Promise<AuthSession> =>
  withPasswordWork(() =>
    acceptInvitationAdmitted(base, input, (tx, c, user) => issueSession(tx, c, { id: user.id, email_verified: true, test_mode: user.test_mode }, ['pwd'])),
  );

/**
 * The hosted /accept-invitation page's accept: the same verb, but it signs no one in, so it starts no
 * session (none to hand over, and last_login_at stays null: Part A sets it only when a session is issued).
 */
export const acceptInvitationWithoutSession = (base: Ctx, input: TokenPasswordBody): Promise<void> =>
  withPasswordWork(() => acceptInvitationAdmitted(base, input, async () => undefined));

/** Accepts the invitation, then runs `then` in the same transaction (a sign-in, or nothing). */
async function acceptInvitationAdmitted<T>(
  base: Ctx,
  input: TokenPasswordBody,
  then: (tx: Tx, c: Ctx, user: UserRow) => Promise<T>,
): Promise<T> {
  const { ctx, pending, user } = await tokenCtx(base, ['invitation'], input.token);
  if (user.status !== 'invited') throw badToken();
  assertStrongPassword(input.password, user.email);
  const passwordHash = await hashPassword(input.password);
  return ctx.db.transaction(async (tx) => {
    // Decided on the user as it is now, locked before its links as a status or email change locks them
    // (the user, then its links): a delete, an activation or an email change committed meanwhile voided
    // this link, and another invitation accepted meanwhile made the user active.
    if ((await lockUser(tx, user.id))?.status !== 'invited') throw badToken();
    await consume(tx, pending, ctx.now);
    // Accepting any invitation ends every other one (the account's, each Organization's link).
    await voidInvitations(tx, user.id, ctx.now);
    // An invited user may already hold grants: activation can flip access on.
    await withAccessFlips(tx, inTx(ctx, tx), { userIds: [user.id] }, 'user_reactivated', () => updateUserActivated(tx, user.id, ctx.now));
    await setPassword(tx, user.id, passwordHash, ctx.now);
    const c = inTx(ctx, tx);
    const after = toUser((await findUserById(tx, user.id))!, ctx.now);
    await recordAudit(tx, c, {
      action: 'user.invitation_accepted',
      target: { type: 'user', id: user.id },
      targetUserId: user.id,
      before: { status: 'invited' },
      after,
      actor: { type: 'user', id: user.id },
    });
    return then(tx, c, user);
  });
}
