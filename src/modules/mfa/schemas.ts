import { Type, type Static } from '@sinclair/typebox';

export const TotpEnrollment = Type.Object(
  {
    secret: Type.String({ description: 'Base32 TOTP secret, for manual entry.' }),
    otpauth_uri: Type.String({ description: 'otpauth://totp/… URI for a QR code.' }),
    algorithm: Type.Literal('SHA1'),
    digits: Type.Literal(6),
    period: Type.Literal(30),
  },
  { $id: 'TotpEnrollment', title: 'TotpEnrollment' },
);
export type TotpEnrollment = Static<typeof TotpEnrollment>;

export const RecoveryCodes = Type.Object(
  { recovery_codes: Type.Array(Type.String(), { description: 'Single-use codes; shown once.' }) },
  { $id: 'RecoveryCodes', title: 'RecoveryCodes' },
);

export const ConfirmBody = Type.Object({ code: Type.String({ pattern: '^[0-9]{6}$' }) }, { additionalProperties: false });
export type ConfirmBody = Static<typeof ConfirmBody>;

export const DisableBody = Type.Object(
  { code: Type.Optional(Type.String({ pattern: '^[0-9]{6}$' })), recovery_code: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })) },
  { additionalProperties: false },
);
export type DisableBody = Static<typeof DisableBody>;
