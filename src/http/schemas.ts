import { Type, type ObjectOptions, type Static, type TSchema } from '@sinclair/typebox';

export const ErrorEnvelope = Type.Object(
  {
    error: Type.Object({
      code: Type.String(),
      message: Type.String(),
      details: Type.Object({}, { additionalProperties: true }),
    }),
  },
  { $id: 'ErrorEnvelope', title: 'ErrorEnvelope' },
);

export const Timestamp = Type.String({ format: 'date-time' });
export const NullableTimestamp = Type.Union([Timestamp, Type.Null()]);
export const Nullable = <T extends TSchema>(schema: T) => Type.Union([schema, Type.Null()]);

/**
 * The `pattern` of a name: at least one visible character (fieldErrors says "must not be blank"). Not
 * visible: white space, format characters (Cf: zero-width space and joiners, soft hyphen, direction
 * marks) and the fillers that render as nothing (Hangul U+115F, U+1160, U+3164, U+FFA0; braille blank
 * U+2800). Ajv compiles patterns with the `u` flag, so `\p{Cf}` is a Unicode property class.
 */
export const NOT_BLANK = '[^\\s\\p{Cf}\\u115F\\u1160\\u3164\\uFFA0\\u2800]';

/**
 * A name shown as a label (an Organization's, an Application's, a display_name…): 1 to `maxLength`
 * characters, not all of them white space. Stored as sent: spaces around other characters stay.
 */
export const Name = (maxLength: number) => Type.String({ minLength: 1, maxLength, pattern: NOT_BLANK });

/**
 * A JSON object whose keys are any text (AppProfile custom, AppSettings overrides, counts by settings
 * key). Not Type.Record(Type.String(), …): that is `patternProperties: {"^(.*)$": …}`, and `.` matches
 * no line terminator, so the response serializer left out, without a word, every key holding \n, \r,
 * U+2028 or U+2029, which the request had stored (a value written and never read back).
 */
export const FreeMap = <T extends TSchema>(value: T, options: ObjectOptions = {}) =>
  Type.Unsafe<Record<string, Static<T>>>({ ...options, type: 'object', additionalProperties: value });

/**
 * An enumeration in a response. Enumerations may gain values (Part A convention 13), so responses
 * serialize any string and mark the list as extensible; request enums stay strict.
 */
export const OpenEnum = <const T extends readonly string[]>(values: T) =>
  Type.String({ description: `One of ${values.join(', ')}; new values may be added.`, 'x-extensible-enum': values });

/**
 * A closed enumeration in a request: `{type: 'string', enum}`, typed as the union of its values. Not a
 * Type.Union of Type.Literal (an anyOf of consts): with allErrors a wrong value fails every branch, so a
 * wrong item of an array of them made two errors per value (OWASP API4); an enum makes one or two.
 */
export const StringEnum = <const T extends readonly string[]>(values: T) => Type.Unsafe<T[number]>({ type: 'string', enum: [...values] });

export const Page = Type.Object({
  next_cursor: Type.Union([Type.String(), Type.Null()]),
  has_more: Type.Boolean(),
});

export const ListOf = <T extends TSchema>(item: T) => Type.Object({ data: Type.Array(item), page: Page });

/** Shared list parameters. `limit` 1-100 (default 20) and an opaque `cursor` from page.next_cursor. */
export const PageQuery = {
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 20 })),
  cursor: Type.Optional(Type.String({ minLength: 1, maxLength: 512 })),
};

/** Part A convention 12: soft-deleted and terminal records are listed only with include_inactive. */
export const IncludeInactiveQuery = {
  include_inactive: Type.Optional(Type.Boolean({ default: false })),
};

export const UserIdParam = Type.Object({
  id: Type.String({ minLength: 1, maxLength: 64, description: 'A usr_ id or the literal me.' }),
});

/** The body of an operation that takes none: nothing, or an empty object (any field is 422). */
export const EmptyBody = Type.Object({}, { additionalProperties: false });

/**
 * Body properties for the fields a PATCH may not write: the schema accepts them so that the service
 * answers 422 read_only_field naming them (after its authorization), not 422 validation_failed.
 */
export const readOnlyProperties = (fields: readonly string[]) =>
  Object.fromEntries(fields.map((f) => [f, Type.Optional(Type.Unknown({ description: 'Read-only: sending it is 422 read_only_field.' }))]));
