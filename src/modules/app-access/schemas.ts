import { Type, type Static } from '@sinclair/typebox';
import { FreeMap, Name, Nullable, NullableTimestamp, readOnlyProperties } from '../../http/schemas.js';

export const AppTokenBody = Type.Object(
  { application_id: Type.String({ minLength: 1, maxLength: 100 }), organization_id: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })) },
  { additionalProperties: false },
);
export type AppTokenBody = Static<typeof AppTokenBody>;

export const AppToken = Type.Object(
  {
    token_type: Type.Literal('Bearer'),
    access_token: Type.String({ description: 'RS256 JWT; aud is the application id; verify against the JWKS.' }),
    expires_in: Type.Integer(),
    application_id: Type.String(),
    organization_id: Nullable(Type.String()),
  },
  { $id: 'AppToken', title: 'AppToken' },
);
export type AppToken = Static<typeof AppToken>;

export const AppProfile = Type.Object(
  {
    user_id: Type.String(),
    application_id: Type.String(),
    display_handle: Nullable(Type.String()),
    effective_display_name: Type.String(),
    custom: FreeMap(Type.Unknown()),
    updated_at: NullableTimestamp,
  },
  { $id: 'AppProfile', title: 'AppProfile' },
);
export type AppProfile = Static<typeof AppProfile>;

/** AppProfile fields a PATCH cannot write. */
export const APP_PROFILE_READ_ONLY = ['user_id', 'application_id', 'effective_display_name', 'updated_at'] as const;

export const PatchAppProfileBody = Type.Object(
  {
    display_handle: Type.Optional(Nullable(Name(64))),
    custom: Type.Optional(
      FreeMap(Type.Unknown(), {
        description: 'Merged into the stored map one level deep; null removes a key. The merged map is at most 16 KB (16,384 bytes of its UTF-8 JSON serialization), else 422 validation_failed naming custom.',
      }),
    ),
    ...readOnlyProperties(APP_PROFILE_READ_ONLY),
  },
  { additionalProperties: false },
);
export type PatchAppProfileBody = Static<typeof PatchAppProfileBody>;
