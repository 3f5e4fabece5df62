// WH-4 commands: what a generated sequence is made of, and its fast-check arbitrary. What each
// command sends and expects is in wh-4-plan.ts.
import fc from 'fast-check';
import type { MemberScope } from './access-model.js';

export type Term = 'plain' | 'ends' | 'starts' | 'window' | 'past';
/** A row: the latest of a user's (or an Organization's) rows for an Application, or with back 1 the one before. */
export type Target = ({ user: number; app: number } | { org: number; app: number }) & { back: number };

export type Cmd =
  | { k: 'grant'; user: number; app: number; term: Term; slot: number; slot2: number }
  | { k: 'status'; target: Target; to: 'disabled' | 'active' | 'revoked' }
  | { k: 'renew'; target: Target; ends: 'null' | 'future'; slot: number }
  | { k: 'endsAt'; target: Target; when: 'past' | 'future' | 'null'; slot: number }
  | { k: 'delete'; target: Target }
  | { k: 'orgGrant'; org: number; app: number; scope: MemberScope; pick: boolean[]; strict: boolean; term: Term; slot: number; slot2: number }
  | { k: 'scope'; org: number; app: number; scope: MemberScope; pick: boolean[]; strict: boolean }
  | { k: 'addMember'; org: number; user: number }
  | { k: 'invite'; org: number; user: number }
  | { k: 'accept'; org: number; user: number }
  | { k: 'removeMember'; org: number; user: number }
  | { k: 'suspend'; user: number }
  | { k: 'reactivate'; user: number }
  | { k: 'deleteUser'; user: number }
  | { k: 'orgStatus'; org: number; to: 'suspended' | 'active' }
  | { k: 'advance'; minutes: number }
  | { k: 'sweep' };

export interface Sequence {
  users: ('active' | 'invited')[];
  orgs: number;
  cmds: Cmd[];
}

const user = fc.integer({ min: 0, max: 2 });
const app = fc.integer({ min: 0, max: 1 });
const org = fc.integer({ min: 0, max: 1 });
const slot = fc.integer({ min: 1, max: 6 });
const pick = fc.array(fc.boolean(), { minLength: 3, maxLength: 3 });
const scope = fc.constantFrom<MemberScope>('all_members', 'allowlist', 'denylist');
const strict = fc.oneof({ weight: 4, arbitrary: fc.constant(true) }, { weight: 1, arbitrary: fc.constant(false) });
const back = fc.oneof({ weight: 4, arbitrary: fc.constant(0) }, { weight: 1, arbitrary: fc.constant(1) });
const target: fc.Arbitrary<Target> = fc.oneof({ weight: 3, arbitrary: fc.record({ user, app, back }) }, { weight: 2, arbitrary: fc.record({ org, app, back }) });
const k = <K extends Cmd['k']>(name: K) => fc.constant(name);

const term = fc.constantFrom<Term>('plain', 'plain', 'ends', 'starts', 'window', 'past');
const orgTerm = fc.constantFrom<Term>('plain', 'plain', 'ends', 'starts');

export const commandArb: fc.Arbitrary<Cmd> = fc.oneof(
  { weight: 6, arbitrary: fc.record({ k: k('grant'), user, app, term, slot, slot2: slot }) },
  { weight: 6, arbitrary: fc.record({ k: k('status'), target, to: fc.constantFrom('disabled' as const, 'active' as const, 'revoked' as const) }) },
  { weight: 1, arbitrary: fc.record({ k: k('renew'), target, ends: fc.constantFrom('null' as const, 'future' as const), slot }) },
  { weight: 2, arbitrary: fc.record({ k: k('endsAt'), target, when: fc.constantFrom('past' as const, 'future' as const, 'null' as const), slot }) },
  { weight: 1, arbitrary: fc.record({ k: k('delete'), target }) },
  { weight: 4, arbitrary: fc.record({ k: k('orgGrant'), org, app, scope, pick, strict, term: orgTerm, slot, slot2: slot }) },
  { weight: 4, arbitrary: fc.record({ k: k('scope'), org, app, scope, pick, strict }) },
  { weight: 5, arbitrary: fc.record({ k: k('addMember'), org, user }) },
  { weight: 1, arbitrary: fc.record({ k: k('invite'), org, user }) },
  { weight: 1, arbitrary: fc.record({ k: k('accept'), org, user }) },
  { weight: 3, arbitrary: fc.record({ k: k('removeMember'), org, user }) },
  { weight: 2, arbitrary: fc.record({ k: k('suspend'), user }) },
  { weight: 3, arbitrary: fc.record({ k: k('reactivate'), user }) },
  { weight: 1, arbitrary: fc.record({ k: k('deleteUser'), user }) },
  { weight: 1, arbitrary: fc.record({ k: k('orgStatus'), org, to: fc.constantFrom('suspended' as const, 'active' as const) }) },
  { weight: 3, arbitrary: fc.record({ k: k('advance'), minutes: fc.integer({ min: 5, max: 70 }) }) },
  { weight: 1, arbitrary: fc.record({ k: k('sweep') }) },
);

/** Sequences open with a few grants and memberships so that later commands have something to change. */
const setupArb: fc.Arbitrary<Cmd[]> = fc.array(
  fc.oneof(
    { weight: 3, arbitrary: fc.record({ k: k('grant'), user, app, term: fc.constant<Term>('plain'), slot, slot2: slot }) },
    { weight: 3, arbitrary: fc.record({ k: k('addMember'), org, user }) },
    { weight: 2, arbitrary: fc.record({ k: k('orgGrant'), org, app, scope, pick, strict: fc.constant(true), term: fc.constant<Term>('plain'), slot, slot2: slot }) },
  ),
  { minLength: 3, maxLength: 6, size: 'max' },
);

/** cmds first: fast-check shrinks record fields in order, and dropping commands matters most. */
export const sequenceArb = (maxCommands: number): fc.Arbitrary<Sequence> =>
  fc.record({
    cmds: fc.tuple(setupArb, fc.array(commandArb, { minLength: 4, maxLength: maxCommands, size: 'max' })).map(([setup, rest]) => [...setup, ...rest]),
    users: fc.array(fc.constantFrom<'active' | 'invited'>('active', 'active', 'active', 'invited'), { minLength: 3, maxLength: 3 }),
    orgs: fc.integer({ min: 1, max: 2 }),
  });
