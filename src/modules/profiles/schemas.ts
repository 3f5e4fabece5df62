import { Type, type Static } from '@sinclair/typebox';
import { Name, Nullable, Timestamp, readOnlyProperties } from '../../http/schemas.js';

export const Profile = Type.Object(
  {
    user_id: Type.String(),
    display_name: Type.String(),
    avatar_url: Nullable(Type.String()),
    contact_email: Nullable(Type.String()),
    contact_phone: Nullable(Type.String()),
    locale: Type.String(),
    updated_at: Timestamp,
  },
  { $id: 'Profile', title: 'Profile' },
);
export type Profile = Static<typeof Profile>;

/** Profile fields a PATCH cannot write. */
export const PROFILE_READ_ONLY = ['user_id', 'updated_at'] as const;

export const PatchProfileBody = Type.Object(
  {
    display_name: Type.Optional(Name(100)),
    // The scheme is case-insensitive (RFC 3986 §3.1): HTTPS://… is an https URL too, stored as sent.
    avatar_url: Type.Optional(Nullable(Type.String({ maxLength: 2048, pattern: '^[Hh][Tt][Tt][Pp][Ss]://' }))),
    contact_email: Type.Optional(Nullable(Type.String({ format: 'email', maxLength: 320 }))),
    contact_phone: Type.Optional(Nullable(Type.String({ pattern: '^\\+[0-9]{8,15}$' }))),
    locale: Type.Optional(Type.String({ minLength: 2, maxLength: 35 })),
    ...readOnlyProperties(PROFILE_READ_ONLY),
  },
  { additionalProperties: false },
);
export type PatchProfileBody = Static<typeof PatchProfileBody>;
