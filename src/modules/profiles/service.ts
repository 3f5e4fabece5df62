import type { Ctx } from '../../context.js';
import { inTx } from '../../context.js';
import { ApiError, invalidField } from '../../errors.js';
import { recordAudit } from '../../audit/record.js';
import { applyPatch } from '../../http/patch.js';
import type { Queryable } from '../../db/types.js';
import { holdAccountRight, targetUser } from '../users/access.js';
import { PROFILE_READ_ONLY, type PatchProfileBody, type Profile } from './schemas.js';
import { assertNoReadOnlyFields } from '../../http/patch.js';
import { parseUrlAsSent } from '../../http/validation.js';
import { findProfile, lockProfile, updateProfile, updateSettingsLocale } from './store.js';

/**
 * The Profile; its locale is the Settings locale, and its updated_at its own: a Settings change of the
 * locale moves it (patchSettings), one of theme, timezone or notifications does not.
 */
async function loadProfile(db: Queryable, userId: string): Promise<Profile> {
  const r = await findProfile(db, userId);
  if (!r) throw new ApiError('user_not_found');
  return { ...r, updated_at: r.updated_at.toISOString() };
}

/** A BCP 47 tag the runtime's locale data recognizes, in canonical form; else 422. */
export function recognizedLocale(tag: string): string {
  let canonical: string;
  try {
    [canonical] = Intl.getCanonicalLocales(tag);
  } catch {
    throw invalidField('locale', 'is not a BCP 47 language tag');
  }
  if (!canonical || Intl.DateTimeFormat.supportedLocalesOf([canonical], { localeMatcher: 'lookup' }).length === 0 || !knownSubtags(canonical)) {
    throw invalidField('locale', 'is not a locale the service recognizes');
  }
  return canonical;
}

// The lookup above falls back from en-XY to en, so each subtag is checked on its own: a script and a
// region the ICU data names (it echoes an unknown code back), and no variant (de-1996) it cannot name.
const REGION_NAMES = new Intl.DisplayNames(['en'], { type: 'region', fallback: 'none' });
const SCRIPT_NAMES = new Intl.DisplayNames(['en'], { type: 'script', fallback: 'none' });
function knownSubtags(canonical: string): boolean {
  const locale = new Intl.Locale(canonical);
  if (locale.script && !SCRIPT_NAMES.of(locale.script)) return false;
  if (locale.region && !REGION_NAMES.of(locale.region)) return false;
  return locale.baseName === [locale.language, locale.script, locale.region].filter(Boolean).join('-');
}

/** GET /v1/users/{id}/profile: self, users.list or app-confined users.list. */
export async function getProfile(ctx: Ctx, idParam: string): Promise<Profile> {
  const { user } = await targetUser(ctx, idParam, 'read');
  return loadProfile(ctx.db, user.id);
}

/**
 * PATCH /v1/users/{id}/profile: self or users.manage. The locale is the Settings locale (the
 * Profile mirrors it). Self edits write no audit event; an admin's edit writes profile.updated.
 */
export async function patchProfile(ctx: Ctx, idParam: string, body: PatchProfileBody): Promise<Profile> {
  const { user, self, rightMayMove } = await targetUser(ctx, idParam, 'write');
  assertNoReadOnlyFields(body, PROFILE_READ_ONLY);
  if (body.avatar_url) {
    // Other users and Applications load it: no userinfo, not even an empty one (`https://@host/`, which
    // the URL parser drops, so the sent text is checked), as for every URL an Application registers
    // (RFC 9110 §4.2.4: userinfo in an https URI is an error; `https://cdn.example@evil.example/` hides its host).
    const url = parseUrlAsSent(body.avatar_url);
    if (url?.protocol !== 'https:') throw invalidField('avatar_url', 'must be an https URL');
    if (url.username || url.password || /^[^:/?#]+:\/\/[^/?#]*@/.test(body.avatar_url)) throw invalidField('avatar_url', 'must not carry credentials');
  }
  const locale = body.locale !== undefined ? recognizedLocale(body.locale) : undefined;
  return ctx.db.transaction(async (tx) => {
    // The user before the Profile, as the erasure cascade takes them.
    await holdAccountRight(tx, ctx, user.id, rightMayMove);
    // Locked before it is read: a concurrent PATCH's fields are kept (only fields sent change).
    await lockProfile(tx, user.id);
    const before = await loadProfile(tx, user.id);
    const { next, changed } = applyPatch(before, { ...body, locale }, ['display_name', 'avatar_url', 'contact_email', 'contact_phone', 'locale']);
    if (changed.length === 0) return before;
    await updateProfile(tx, user.id, next, ctx.now);
    if (changed.includes('locale')) await updateSettingsLocale(tx, user.id, next.locale, ctx.now);
    const after = await loadProfile(tx, user.id);
    if (!self) {
      await recordAudit(tx, inTx(ctx, tx), { action: 'profile.updated', target: { type: 'profile', id: user.id }, targetUserId: user.id, before, after });
    }
    return after;
  });
}
