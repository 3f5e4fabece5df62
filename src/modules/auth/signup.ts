import type { Ctx } from '../../context.js';
import { inTx } from '../../context.js';
import { ApiError, invalidField } from '../../errors.js';
import { assertStrongPassword, hashPassword, withPasswordWork } from '../../auth/passwords.js';
import { createUserRecords } from '../users/service.js';
import { findLiveUserByEmail } from '../users/store.js';
import { lockUnchanged, RESEND_LIMIT_PER_HOUR, sendInvitation, sendVerification, takeResendQuota } from '../users/invitations.js';
import { requireSlidingQuota } from '../../http/counters.js';
import { issueSession } from './sessions.js';
import { countApplication } from './store.js';
import type { AuthSession, SignupBody } from './schemas.js';

/**
 * POST /v1/auth/signup: the User (active, unverified), password identity, Profile, Settings and
 * member Role in one transaction, the verification mail, and a session.
 */
export const signup = (ctx: Ctx, input: SignupBody): Promise<AuthSession> => withPasswordWork(() => signupAdmitted(ctx, input));

async function signupAdmitted(ctx: Ctx, input: SignupBody): Promise<AuthSession> {
  assertStrongPassword(input.password, input.email);
  if (input.application_id) await assertKnownApplication(ctx, input.application_id);
  const existing = await findLiveUserByEmail(ctx.db, input.email);
  if (existing?.status === 'invited') {
    // The invitation is re-sent (within the re-send limit); it completes only through invitations/accept.
    // Decided on the user as it is now (lockUnchanged): nothing is mailed to an address they left meanwhile.
    await ctx.db.transaction(async (tx) => {
      const invited = await lockUnchanged(tx, existing);
      if (invited && (await takeResendQuota(tx, ctx, invited.email)).allowed) await sendInvitation(tx, ctx, invited);
    });
    throw new ApiError('email_taken', { details: { reason: 'invitation_pending' } });
  }
  if (existing) throw new ApiError('email_taken');
  const passwordHash = await hashPassword(input.password);
  return ctx.db.transaction(async (tx) => {
    const user = await createUserRecords(tx, ctx, {
      email: input.email,
      status: 'active',
      emailVerified: false,
      displayName: input.display_name ?? null,
      signupApplicationId: input.application_id ?? null,
      passwordHash,
      selfService: true,
    });
    // A signed-up account can delete itself and sign up again at once, so a signup's verification mail
    // is a first only once: each counts, 3 per address per rolling hour, or signup-delete loops would
    // mail any address without end. Beyond it 429 with Retry-After and nothing is created.
    await requireSlidingQuota(tx, `mail:signup:${ctx.mode}:${user.email.toLowerCase()}`, RESEND_LIMIT_PER_HOUR, 3600, ctx.now,
      `At most ${RESEND_LIMIT_PER_HOUR} sign-ups of one address per hour.`);
    await sendVerification(tx, ctx, user);
    return issueSession(tx, inTx(ctx, tx), user, ['pwd']);
  });
}

/** application_id names an Application (its branding is read when the verification mail is made). */
async function assertKnownApplication(ctx: Ctx, applicationId: string): Promise<void> {
  if (!(await countApplication(ctx.db, applicationId))) {
    throw invalidField('application_id', 'is not a known application');
  }
}
