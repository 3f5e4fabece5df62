import { Type, type Static } from '@sinclair/typebox';
import { FreeMap, Name, Nullable, OpenEnum, PageQuery, readOnlyProperties, Timestamp } from '../../http/schemas.js';

export const VISIBILITIES = ['public', 'invite_only', 'internal'] as const;
export const REVIEW_STATUSES = ['pending_review', 'approved', 'rejected', 'suspended'] as const;

const PermissionDef = Type.Object({ key: Type.String(), description: Type.String() });

export const Application = Type.Object(
  {
    id: Type.String(),
    slug: Type.String(),
    name: Type.String(),
    description: Nullable(Type.String()),
    icon_url: Nullable(Type.String()),
    launch_url: Type.String(),
    redirect_uris: Type.Array(Type.String()),
    support_url: Nullable(Type.String()),
    email_from_name: Nullable(Type.String()),
    settings_schema: Type.Object({}, { additionalProperties: true }),
    settings_schema_stats: Type.Object({ stale_override_counts: FreeMap(Type.Integer()) }),
    permissions: Type.Array(PermissionDef),
    available_app_roles: Type.Array(Type.String()),
    default_app_role: Nullable(Type.String()),
    visibility: OpenEnum(VISIBILITIES),
    owner_user_id: Nullable(Type.String()),
    owner_organization_id: Nullable(Type.String()),
    review_status: OpenEnum(REVIEW_STATUSES),
    review_notes: Nullable(Type.String()),
    tenant_id: Type.String(),
    test_mode: Type.Boolean(),
    created_at: Timestamp,
    updated_at: Timestamp,
  },
  { $id: 'Application', title: 'Application' },
);
export type Application = Static<typeof Application>;

export const ApplicationListItem = Type.Object(
  {
    id: Type.String(),
    slug: Type.String(),
    name: Type.String(),
    description: Nullable(Type.String()),
    icon_url: Nullable(Type.String()),
    visibility: OpenEnum(VISIBILITIES),
    review_status: OpenEnum(REVIEW_STATUSES),
  },
  { $id: 'ApplicationListItem', title: 'ApplicationListItem' },
);

const Url = Type.String({ minLength: 1, maxLength: 2048 });
const ConfigFields = {
  name: Name(100),
  description: Nullable(Type.String({ maxLength: 2000 })),
  icon_url: Nullable(Url),
  launch_url: Url,
  redirect_uris: Type.Array(Type.String({ minLength: 1, maxLength: 2048 }), { maxItems: 10 }),
  support_url: Nullable(Url),
  email_from_name: Nullable(Name(50)),
  settings_schema: Type.Object(
    {},
    {
      additionalProperties: true,
      description: 'At most 64 KB (65,536 bytes of its UTF-8 JSON serialization), none of its arrays longer than 1,000 entries, no anyOf, oneOf or allOf of more than 100 subschemas, else 422 invalid_settings_schema.',
    },
  ),
  permissions: Type.Array(
    Type.Object(
      {
        // app. + a slug of at most 64 + . + at most 64 characters of [a-z0-9_.].
        key: Type.String({ minLength: 1, maxLength: 133, description: 'app.<slug>. followed by 1–64 characters of [a-z0-9_.].' }),
        description: Type.Optional(Type.String({ maxLength: 255 })),
      },
      { additionalProperties: false },
    ),
    { maxItems: 100 },
  ),
  available_app_roles: Type.Array(Type.String({ pattern: '^[a-z][a-z0-9_]{1,40}$' }), { maxItems: 20, uniqueItems: true }),
  default_app_role: Nullable(Type.String()),
};
const Visibility = Type.Union(VISIBILITIES.map((v) => Type.Literal(v)));

export const CreateApplicationBody = Type.Object(
  {
    slug: Type.String({ minLength: 2, maxLength: 64, pattern: '^[a-z][a-z0-9-]{1,63}$' }),
    name: ConfigFields.name,
    launch_url: ConfigFields.launch_url,
    owner_user_id: Type.Optional(Type.String({ maxLength: 64 })),
    owner_organization_id: Type.Optional(Type.String({ maxLength: 64 })),
    description: Type.Optional(ConfigFields.description),
    icon_url: Type.Optional(ConfigFields.icon_url),
    redirect_uris: Type.Optional(ConfigFields.redirect_uris),
    support_url: Type.Optional(ConfigFields.support_url),
    email_from_name: Type.Optional(ConfigFields.email_from_name),
    settings_schema: Type.Optional(ConfigFields.settings_schema),
    permissions: Type.Optional(ConfigFields.permissions),
    available_app_roles: Type.Optional(ConfigFields.available_app_roles),
    default_app_role: Type.Optional(ConfigFields.default_app_role),
    visibility: Type.Optional(Visibility),
  },
  { additionalProperties: false },
);
export type CreateApplicationBody = Static<typeof CreateApplicationBody>;

/** Read-only and moderation fields are accepted by the schema so the service can answer with their own codes. */
/** Application fields a PATCH cannot write (422 read_only_field). */
export const APPLICATION_READ_ONLY = ['id', 'slug', 'tenant_id', 'created_at', 'updated_at', 'test_mode', 'settings_schema_stats'] as const;

export const PatchApplicationBody = Type.Object(
  {
    ...Object.fromEntries(Object.entries(ConfigFields).map(([k, v]) => [k, Type.Optional(v)])),
    visibility: Type.Optional(Visibility),
    review_status: Type.Optional(Type.Union(REVIEW_STATUSES.map((v) => Type.Literal(v)))),
    review_notes: Type.Optional(Nullable(Type.String({ maxLength: 2000 }))),
    owner_user_id: Type.Optional(Nullable(Type.String({ maxLength: 64 }))),
    owner_organization_id: Type.Optional(Nullable(Type.String({ maxLength: 64 }))),
    ...readOnlyProperties(APPLICATION_READ_ONLY),
  },
  { additionalProperties: false },
) as unknown as ReturnType<typeof Type.Object<any>>;
export type PatchApplicationBody = Partial<Omit<CreateApplicationBody, 'slug' | 'owner_user_id' | 'owner_organization_id'>> & {
  review_status?: (typeof REVIEW_STATUSES)[number];
  review_notes?: string | null;
  owner_user_id?: string | null;
  owner_organization_id?: string | null;
  [readOnly: string]: unknown;
};

export const ApplicationListQuery = Type.Object(
  {
    visibility: Type.Optional(Visibility),
    review_status: Type.Optional(Type.Union(REVIEW_STATUSES.map((v) => Type.Literal(v)))),
    owned: Type.Optional(Type.Boolean()),
    tenant_id: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
    owner_user_id: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
    owner_organization_id: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
    ...PageQuery,
  },
  { additionalProperties: false },
);
export type ApplicationListQuery = Static<typeof ApplicationListQuery>;

export const AppIdParam = Type.Object({ id: Type.String({ minLength: 1, maxLength: 100 }) });
