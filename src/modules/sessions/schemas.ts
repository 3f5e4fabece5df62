import { Type, type Static } from '@sinclair/typebox';
import { Nullable, PageQuery, Timestamp, ListOf } from '../../http/schemas.js';

export const Session = Type.Object(
  {
    id: Type.String(),
    created_at: Timestamp,
    expires_at: Timestamp,
    ip_address: Nullable(Type.String()),
    user_agent: Nullable(Type.String()),
    current: Type.Boolean({ description: 'True for the session of the calling token.' }),
  },
  { $id: 'Session', title: 'Session' },
);
export type Session = Static<typeof Session>;
export const SessionList = ListOf(Session);
export const SessionListQuery = Type.Object(PageQuery, { additionalProperties: false });
export type SessionListQuery = Static<typeof SessionListQuery>;

export const LogoutBody = Type.Object(
  { all_sessions: Type.Optional(Type.Boolean({ default: false })) },
  { additionalProperties: false },
);
export type LogoutBody = Static<typeof LogoutBody>;
