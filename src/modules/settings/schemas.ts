import { Type, type Static } from '@sinclair/typebox';
import { FreeMap, NullableTimestamp, OpenEnum, Timestamp, readOnlyProperties } from '../../http/schemas.js';

export const THEMES = ['system', 'light', 'dark'] as const;

const Notifications = Type.Object({ email: Type.Boolean(), sms: Type.Boolean() });

export const Settings = Type.Object(
  {
    user_id: Type.String(),
    // A response enumeration: new themes may come (Part A convention 13); PATCH stays strict.
    theme: OpenEnum(THEMES),
    timezone: Type.String({ description: 'IANA time zone name.' }),
    locale: Type.String({ description: 'BCP 47 tag; the Profile shows the same value.' }),
    notifications: Notifications,
    updated_at: Timestamp,
  },
  { $id: 'Settings', title: 'Settings' },
);
export type Settings = Static<typeof Settings>;

/** Settings fields a PATCH cannot write. */
export const SETTINGS_READ_ONLY = ['user_id', 'updated_at'] as const;

export const PatchSettingsBody = Type.Object(
  {
    theme: Type.Optional(Type.Union(THEMES.map((t) => Type.Literal(t)))),
    timezone: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
    locale: Type.Optional(Type.String({ minLength: 2, maxLength: 35 })),
    notifications: Type.Optional(Type.Object({ email: Type.Optional(Type.Boolean()), sms: Type.Optional(Type.Boolean()) }, { additionalProperties: false })),
    ...readOnlyProperties(SETTINGS_READ_ONLY),
  },
  { additionalProperties: false },
);
export type PatchSettingsBody = Static<typeof PatchSettingsBody>;

export const AppSettings = Type.Object(
  {
    user_id: Type.String(),
    application_id: Type.String(),
    overrides: FreeMap(Type.Unknown(), { description: "The user's values for keys of the Application's settings_schema." }),
    updated_at: NullableTimestamp,
  },
  { $id: 'AppSettings', title: 'AppSettings' },
);
export type AppSettings = Static<typeof AppSettings>;

/** AppSettings fields a PATCH cannot write. */
export const APP_SETTINGS_READ_ONLY = ['user_id', 'application_id', 'updated_at'] as const;

export const PatchAppSettingsBody = Type.Object(
  {
    overrides: FreeMap(Type.Unknown(), {
      description:
        'Merged into the stored overrides one level deep; null removes a key. Each value must validate against its property in settings_schema. The merged overrides are at most 16 KB (16,384 bytes of their UTF-8 JSON serialization), else 422 validation_failed naming overrides.',
    }),
    ...readOnlyProperties(APP_SETTINGS_READ_ONLY),
  },
  { additionalProperties: false },
);
export type PatchAppSettingsBody = Static<typeof PatchAppSettingsBody>;
