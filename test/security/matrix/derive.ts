// Applies the steps in the header of expectations.ts to one matrix cell.
import type { Caller } from './callers.js';
import { heldByGate } from './callers.js';
import { FORBIDDEN, nf, RESTRICTED, RULES, UNAUTHENTICATED, USER_TOKEN_REQUIRED, type Grant, type Outcome } from './expectations.js';

export type Source = 'public' | 'gate:credential' | 'gate:user-token' | 'gate:destructive' | 'service:destructive' | 'gate:permission' | 'exception' | 'test-mode' | 'allow' | 'deny';

export interface DocOp {
  security?: unknown[];
  'x-platform-permission'?: string;
  'x-platform-destructive'?: 'always' | 'conditional';
  responses?: Record<string, { description?: string }>;
}

/** The expected outcome of one cell, and which step of the header produced it. */
export function expectedOutcome(key: string, doc: DocOp, caller: Caller, destructiveNow: boolean): { outcome: Outcome; source: Source; reason?: string } {
  const rule = RULES[key];
  if (!rule) throw new Error(`no rule for ${key}`);
  if (!doc.security?.length) {
    if (!rule.public) throw new Error(`${key}: the document says no credential, the table does not give a public outcome`);
    return { outcome: rule.public, source: 'public' };
  }
  if (rule.public) throw new Error(`${key}: the table says public, the document asks for a credential`);
  if (caller.kind === 'anonymous' || caller.kind === 'inactive-user') return { outcome: UNAUTHENTICATED, source: 'gate:credential' };
  if (rule.user && caller.kind === 'key') return { outcome: USER_TOKEN_REQUIRED, source: 'gate:user-token' };
  const destructive = doc['x-platform-destructive'] === 'always' || (doc['x-platform-destructive'] === 'conditional' && destructiveNow);
  if (caller.restrictDestructive && destructive) return { outcome: RESTRICTED, source: rule.destructiveInService ? 'service:destructive' : 'gate:destructive' };
  const permission = doc['x-platform-permission'];
  if (permission && !heldByGate(caller, permission)) return { outcome: FORBIDDEN, source: 'gate:permission' };
  const exception = rule.except?.[caller.id];
  if (exception) return { outcome: exception[0], source: 'exception', reason: exception[1] };
  if (caller.test && rule.live) return { outcome: nf(rule.live), source: 'test-mode' };
  if (rule.ok === undefined) throw new Error(`${key}: no ok status`);
  if (matches(rule.allow, caller)) return { outcome: { status: rule.ok }, source: 'allow' };
  if (!rule.deny) throw new Error(`${key}: ${caller.id} is neither allowed nor given a deny outcome`);
  return { outcome: rule.deny, source: 'deny' };
}

export function matches(grants: Grant[] | undefined, caller: Caller): boolean {
  return (grants ?? []).some((g) =>
    g === 'user' ? caller.kind === 'user' : g === 'key' ? caller.kind === 'key' : g === 'ownAppKey' || g === 'otherAppKey' ? caller.id === g : caller.platform.includes(g),
  );
}

/** On an allowed list call: whether the caller sees the fixture rows (null: the rule does not say). */
export function seesFixtures(key: string, caller: Caller): boolean | null {
  const rule = RULES[key];
  if (!rule.sees) return null;
  return matches(rule.sees, caller) && (!caller.test || !!rule.modeless);
}
