// The caller classes of catalog AZ-1 (security-test-catalog.md §2.5): who calls each operation.
// Every class is live-mode unless it says test, and none of them owns or belongs to the fixtures
// they act on, so a success is always the permission (or the key's Application) at work.
import { PLATFORM_PERMISSIONS, type PlatformPermission } from '../../../src/http/meta.js';

/** The four platform permissions an app-scoped key may hold, confined to its Application (Part A Authentication 4). */
export const APP_CONFINED = ['entitlements.manage', 'users.list', 'roles.manage', 'audit.view'] as const;

export type CallerKind = 'anonymous' | 'user' | 'key' | 'inactive-user';

export interface Caller {
  id: string;
  kind: CallerKind;
  label: string;
  /** Platform permissions held platform-wide (users through a Role; platform keys by their list). */
  platform: readonly PlatformPermission[];
  /** Permissions an app-scoped key holds, confined to its Application. */
  confined?: readonly string[];
  /** The Application an app-scoped key belongs to: the fixtures' own Application, or another one. */
  app?: 'own' | 'other';
  test?: boolean;
  restrictDestructive?: boolean;
}

const all = PLATFORM_PERMISSIONS;

export const CALLERS: readonly Caller[] = [
  { id: 'anonymous', kind: 'anonymous', label: 'no credential', platform: [] },
  { id: 'member', kind: 'user', label: 'a plain user (seed Role member only)', platform: [] },
  ...PLATFORM_PERMISSIONS.map((p): Caller => ({ id: `perm:${p}`, kind: 'user', label: `a user whose only platform permission is ${p}`, platform: [p] })),
  { id: 'platformKey', kind: 'key', label: 'a platform key with all twelve permissions', platform: all },
  { id: 'ownAppKey', kind: 'key', label: "the fixtures' Application's own key (the four app-confined permissions)", platform: [], confined: APP_CONFINED, app: 'own' },
  { id: 'otherAppKey', kind: 'key', label: "another Application's key (the four app-confined permissions)", platform: [], confined: APP_CONFINED, app: 'other' },
  { id: 'testKey', kind: 'key', label: 'a test-mode platform key with all twelve permissions', platform: all, test: true },
  { id: 'restrictKey', kind: 'key', label: 'a restrict_destructive (agent) platform key with all twelve permissions', platform: all, restrictDestructive: true },
  { id: 'suspendedUser', kind: 'inactive-user', label: 'a superadmin whose account is suspended (session still live)', platform: [] },
  { id: 'deletedUser', kind: 'inactive-user', label: 'a superadmin whose account is soft-deleted (session still live)', platform: [] },
];

export type CallerId = string;
export const callerById = (id: CallerId): Caller => {
  const c = CALLERS.find((x) => x.id === id);
  if (!c) throw new Error(`unknown caller ${id}`);
  return c;
};

/** Every permission the gate sees on the credential (platform-wide or app-confined). */
export const heldByGate = (c: Caller, permission: string): boolean => c.platform.includes(permission as PlatformPermission) || !!c.confined?.includes(permission);
