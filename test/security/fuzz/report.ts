// Collects findings across the run, deduplicated by (operation, kind, status, code), keeping the
// shortest reproducing request of each, plus the totals the catalog figure needs.
import type { InjectResponse } from '../../helpers/http.js';
import { SCHEMA_KINDS, type Finding } from './oracle.js';
import type { Planned, Sent } from './requests.js';

interface Entry {
  op: string;
  finding: Finding;
  count: number;
  repro: string;
}

interface OpStats {
  requests: number;
  statuses: Map<number, number>;
  pastValidation: number;
  ms?: number;
}

// Answers that come before the operation's own logic: routing, credentials, schema validation.
const GATE_CODES = new Set(['not_found', 'method_not_allowed', 'bad_request', 'unauthenticated', 'validation_failed', 'malformed_json', 'unsupported_media_type', 'idempotency_key_required', 'user_token_required']);

export class Report {
  private readonly entries = new Map<string, Entry>();
  readonly ops = new Map<string, OpStats>();
  requests = 0;
  fivexx = 0;
  documented5xx = 0;
  schemaViolations = 0;
  undocumented = 0;
  acceptedInvalid = 0;
  invalidSent = 0;
  readonly variants = { valid: 0, boundary: 0, invalid: 0 };

  record(op: string, plan: Planned, sent: Sent | null, res: InjectResponse | null, findings: Finding[], flags: { documented5xx?: boolean; violation?: string | null } = {}): void {
    this.requests++;
    this.variants[plan.variant]++;
    if (flags.violation) this.invalidSent++;
    if (flags.documented5xx) this.documented5xx++;
    const stats = this.ops.get(op) ?? { requests: 0, statuses: new Map(), pastValidation: 0 };
    this.ops.set(op, stats);
    stats.requests++;
    if (res) {
      stats.statuses.set(res.statusCode, (stats.statuses.get(res.statusCode) ?? 0) + 1);
      let code: string | undefined;
      try {
        code = JSON.parse(res.body)?.error?.code;
      } catch {
        code = undefined;
      }
      if (!code || !GATE_CODES.has(code)) stats.pastValidation++;
    }
    if (findings.some((f) => f.kind === '5xx')) this.fivexx++;
    if (findings.some((f) => SCHEMA_KINDS.includes(f.kind))) this.schemaViolations++;
    if (findings.some((f) => f.kind === 'undocumented-status' || (f.kind === '5xx' && f.detail.endsWith('(undocumented status)')))) this.undocumented++;
    if (findings.some((f) => f.kind === 'accepted-invalid')) this.acceptedInvalid++;
    for (const finding of findings) {
      const key = `${op}|${finding.kind}|${finding.status}|${finding.code}`;
      const repro = reproOf(plan, sent, res, finding);
      const entry = this.entries.get(key);
      if (!entry) this.entries.set(key, { op, finding, count: 1, repro });
      else {
        entry.count++;
        if (repro.length < entry.repro.length) entry.repro = repro;
      }
    }
  }

  get failures(): Entry[] {
    return [...this.entries.values()].sort((a, b) => a.op.localeCompare(b.op) || a.finding.kind.localeCompare(b.finding.kind));
  }

  /** One message for the whole run, grouped by operation, every distinct failure with its repro. */
  message(): string {
    const byOp = new Map<string, Entry[]>();
    for (const e of this.failures) byOp.set(e.op, [...(byOp.get(e.op) ?? []), e]);
    const lines = [`IV-1: ${this.entries.size} distinct failures in ${byOp.size} operations (seed and runs above; FUZZ_ONLY=<regex> reruns a subset)`, '', 'By cause (kind, status, code → operations):'];
    const causes = new Map<string, Set<string>>();
    for (const e of this.failures) {
      const cause = `[${e.finding.kind}] ${e.finding.status} ${e.finding.code}`;
      causes.set(cause, (causes.get(cause) ?? new Set()).add(e.op));
    }
    for (const [cause, ops] of [...causes].sort((a, b) => b[1].size - a[1].size)) lines.push(`- ${cause} → ${ops.size}: ${[...ops].join(', ')}`);
    for (const [op, entries] of byOp) {
      lines.push(`\n## ${op}`);
      for (const e of entries) lines.push(`- [${e.finding.kind}] ${e.finding.status} ${e.finding.code} ×${e.count}: ${e.finding.detail}\n${indent(e.repro)}`);
    }
    return lines.join('\n');
  }

  opsCovered(): number {
    return [...this.ops.values()].filter((s) => s.requests > 0).length;
  }

  opsWith(pred: (s: OpStats) => boolean): number {
    return [...this.ops.values()].filter(pred).length;
  }
}

const indent = (s: string) => s.split('\n').map((l) => `    ${l}`).join('\n');
const clip = (s: string, n: number) => (s.length > n ? `${s.slice(0, n)}…(${s.length} chars)` : s);

function reproOf(plan: Planned, sent: Sent | null, res: InjectResponse | null, finding: Finding): string {
  if (!sent) return `plan ${clip(JSON.stringify(plan), 400)}\n${finding.detail}`;
  const headers = Object.entries(sent.headers)
    .filter(([k]) => k !== 'authorization')
    .map(([k, v]) => `${k}: ${clip(v, 60)}`);
  const lines = [`${sent.method} ${clip(sent.url, 300)}   (caller: ${sent.caller}; ${plan.variant} ${plan.where}: ${clip(plan.note, 80)})`];
  if (headers.length) lines.push(headers.join('; '));
  if (sent.payload !== undefined) lines.push(`body: ${clip(sent.payload, 300)}`);
  if (res) lines.push(`→ ${res.statusCode} ${res.headers['content-type'] ?? ''} ${clip(res.body, 240)}`);
  return lines.join('\n');
}
