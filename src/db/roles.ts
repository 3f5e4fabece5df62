/** The role request connections run as; row-level security policies apply to it, not to the owner. */
export const APP_ROLE = 'platform_app';
