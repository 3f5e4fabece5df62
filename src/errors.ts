// One error type and the one table of error codes (code -> status, default message).
// The error handler is the only code that turns an ApiError into HTTP.

export const ERROR_CODES = {
  // Foundation (documented in docs/conventions.md)
  malformed_json: [400, 'The request body is not valid JSON.'],
  bad_request: [400, 'The request is malformed.'],
  unsupported_media_type: [415, 'Request bodies must be application/json.'],
  validation_failed: [422, 'The request has invalid fields.'],
  not_found: [404, 'No such route.'],
  method_not_allowed: [405, 'This route does not support that method.'],
  payload_too_large: [413, 'The request body is too large.'],
  headers_too_large: [431, 'The request headers are too large.'],
  request_timeout: [408, 'The request was not received in time.'],
  expectation_failed: [417, 'The only expectation this service meets is 100-continue.'],
  unauthenticated: [401, 'A valid credential is required.'],
  rate_limited: [429, 'Too many requests; retry later.'],
  idempotency_key_reused: [422, 'This Idempotency-Key was used with a different request.'],
  job_not_found: [404, 'No such job.'],
  internal_error: [500, 'An unexpected error occurred.'],
  // Part A
  email_taken: [409, 'That email address is already in use.'],
  weak_password: [422, 'The password does not meet the password policy.'],
  invalid_credentials: [401, 'Email or password is incorrect.'],
  account_suspended: [403, 'This account is suspended.'],
  too_many_attempts: [429, 'Too many attempts; try again later.'],
  entitlement_required: [403, 'No active access to this application.'],
  application_not_available: [409, 'The application is not available.'],
  tenant_suspended: [403, "The application's tenant is suspended."],
  not_implemented: [501, 'Not implemented.'],
  user_token_required: [400, 'This operation needs a User token.'],
  idempotency_key_required: [400, 'This operation requires an Idempotency-Key header.'],
  idempotency_key_in_flight: [409, 'A request with this Idempotency-Key is still being processed.'],
  destructive_operation_restricted: [403, 'This key may not perform destructive operations.'],
  role_escalation_forbidden: [403, 'You cannot grant a permission you do not hold.'],
  forbidden: [403, 'You do not have permission to do this.'],
  user_not_found: [404, 'User not found.'],
  application_not_found: [404, 'Application not found.'],
  status_change_forbidden: [403, 'You cannot change your own status.'],
  invalid_status_transition: [409, 'That status change is not allowed.'],
  erasure_scheduled: [409, 'An erasure is scheduled for this user.'],
  erasure_not_scheduled: [404, 'No erasure is scheduled for this user.'],
  session_not_found: [404, 'Session not found.'],
  api_key_not_found: [404, 'API key not found.'],
  api_key_revoked: [409, 'The API key is revoked.'],
  invalid_token: [400, 'The token is invalid, expired or already used.'],
  invalid_refresh_token: [401, 'The refresh token is invalid, expired or already used.'],
  invalid_mfa_code: [422, 'The code is not valid.'],
  invalid_current_password: [403, 'The current password is not correct.'],
  mfa_already_enabled: [409, 'Two-factor authentication is already on.'],
  mfa_not_enabled: [409, 'Two-factor authentication is not on.'],
  password_identity_required: [409, 'This account has no password sign-in.'],
  // Part B
  slug_taken: [409, 'That slug is taken.'],
  app_role_in_use: [409, 'That app role has assignments.'],
  permission_in_use: [409, 'That permission is referenced by a role.'],
  invalid_settings_schema: [422, 'The settings schema is invalid.'],
  reserved_settings_key: [422, 'The settings schema uses a reserved key.'],
  moderation_field_forbidden: [403, 'Only applications.manage may change moderation fields.'],
  read_only_field: [422, 'That field is read-only.'],
  review_notes_required: [422, 'review_notes is required for this move.'],
  invalid_review_transition: [409, 'That review_status change is not allowed.'],
  ownership_change_requires_migration: [409, 'Ownership change across non-shared tenants requires a migration.'],
  plan_limit_reached: [409, 'A plan limit would be exceeded.'],
  subscription_required: [402, 'The tenant is restricted; a subscription is required.'],
  entitlement_not_found: [404, 'Entitlement not found.'],
  entitlement_already_exists: [409, 'A live entitlement already exists.'],
  invalid_source: [422, 'That source is not allowed here.'],
  ends_at_required: [422, 'ends_at is required for a trial.'],
  disabled_reason_required: [422, 'disabled_reason is required.'],
  immutable_field: [422, 'That field cannot be changed.'],
  not_an_org_grant: [422, 'Only organization grants have a member scope.'],
  member_override_not_a_member: [422, 'A member override is not a current member.'],
  entitlement_order_linked: [409, 'An order-linked entitlement cannot be deleted.'],
  entitlement_too_old: [409, 'The entitlement is too old to delete.'],
  precondition_failed: [412, 'The resource changed since the given ETag.'],
  organization_not_found: [404, 'Organization not found.'],
  organization_suspended: [403, 'The organization is suspended.'],
  already_member: [409, 'Already a member.'],
  member_not_found: [404, 'Member not found.'],
  last_org_admin: [409, 'An organization needs at least one org_admin.'],
  role_not_found: [404, 'Role not found.'],
  unknown_permission: [422, "A permission is not valid for the role's scope."],
  app_role_not_declared: [422, 'The role name is not in available_app_roles.'],
  role_name_taken: [409, 'A role with that name exists.'],
  seed_role_immutable: [403, 'Seed roles cannot be changed.'],
  role_in_use: [409, 'The role has assignments.'],
  role_scope_mismatch: [403, "That role belongs to another application."],
  member_role_required: [409, 'The last platform member role cannot be removed.'],
  tenant_not_found: [404, 'Tenant not found.'],
  tier_change_request_not_found: [404, 'Tier-change request not found.'],
  tier_change_already_pending: [409, 'An open tier-change request exists.'],
  invalid_tier_transition: [409, 'Not an upgrade on the tier ladder.'],
  plan_does_not_allow_tier: [409, 'The plan does not allow that tier.'],
  unsupported_region: [422, 'Unsupported region.'],
  invalid_request_transition: [409, 'That request status change is not allowed.'],
  plan_requires_sales: [422, 'That plan is sold by sales.'],
  subscription_exists: [409, 'A live subscription exists.'],
  no_billing_account: [409, 'The tenant has no billing account.'],
  billing_unavailable: [503, 'The payment processor is unavailable.'],
  service_unavailable: [503, 'The service is temporarily unavailable.'],
  invalid_signature: [400, 'The Stripe-Signature header is missing, malformed, does not match the body, or is outside the 5-minute tolerance.'],
  audit_event_not_found: [404, 'Audit event not found.'],
  invalid_webhook_url: [422, 'The webhook URL is not allowed.'],
  webhook_not_found: [404, 'Webhook subscription not found.'],
  delivery_not_found: [404, 'Webhook delivery not found.'],
} as const satisfies Record<string, readonly [number, string]>;

export type ErrorCode = keyof typeof ERROR_CODES;

export interface ApiErrorOptions {
  message?: string;
  details?: Record<string, unknown>;
  headers?: Record<string, string>;
}

export class ApiError extends Error {
  readonly status: number;
  readonly details: Record<string, unknown>;
  readonly headers: Record<string, string>;

  constructor(readonly code: ErrorCode, options: ApiErrorOptions = {}) {
    const [status, message] = ERROR_CODES[code];
    super(options.message ?? message);
    this.status = status;
    this.details = options.details ?? {};
    this.headers = options.headers ?? {};
  }

  toBody() {
    return { error: { code: this.code, message: this.message, details: this.details } };
  }
}

/**
 * How many fields `details.fields` names at most (docs/conventions.md): the first found. A 1 MB body
 * can hold 100,000 unknown fields, and an answer naming each was about five times its size.
 */
export const MAX_FIELD_ERRORS = 100;

/** 422 validation_failed naming fields (`details.fields`, as schema violations name them), at most MAX_FIELD_ERRORS. */
export function validationFailed(...fields: { path: string; message: string }[]): ApiError {
  return new ApiError('validation_failed', { details: { fields: fields.slice(0, MAX_FIELD_ERRORS) } });
}

/** 422 validation_failed naming one field. */
export const invalidField = (path: string, message: string): ApiError => validationFailed({ path, message });

export function statusOf(code: ErrorCode): number {
  return ERROR_CODES[code][0];
}

/** Database constraint violations that callers may hit, mapped in one place (constraint name -> code). */
const CONSTRAINT_CODES: Record<string, ErrorCode> = {
  users_email_live_key: 'email_taken',
  entitlements_live_personal_key: 'entitlement_already_exists',
  entitlements_live_org_key: 'entitlement_already_exists',
  applications_slug_key: 'slug_taken',
  applications_pkey: 'slug_taken',
};

export function fromDatabaseError(err: unknown): ApiError | null {
  const e = err as { code?: string; constraint?: string };
  if (e?.code === '23505' && e.constraint && CONSTRAINT_CODES[e.constraint]) {
    return new ApiError(CONSTRAINT_CODES[e.constraint]);
  }
  // A date-time the schemas let through but the database cannot hold (the format check is meant to
  // stop these first): bad input, not a server error.
  if (e?.code === '22007' || e?.code === '22008' || e?.code === '22009') {
    return new ApiError('validation_failed', { message: 'A date-time value is out of the range the service stores.' });
  }
  return null;
}
