/** Percentiles, medians and the small fixed-width tables the benchmarks print. */

/** Nearest-rank percentile (p in 0..100) of unsorted values; NaN when empty. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.min(sorted.length, Math.max(1, Math.ceil((p / 100) * sorted.length)));
  return sorted[rank - 1]!;
}

export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/** Median with the smallest and largest value: what a repeated ratio is reported as. */
export interface Spread {
  median: number;
  min: number;
  max: number;
  n: number;
}

export function spread(values: readonly number[]): Spread {
  const finite = values.filter(Number.isFinite);
  return {
    median: median(finite),
    min: finite.length ? Math.min(...finite) : Number.NaN,
    max: finite.length ? Math.max(...finite) : Number.NaN,
    n: finite.length,
  };
}

export function fmt(value: number, digits = 1): string {
  if (!Number.isFinite(value)) return "-";
  return value.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

export function fmtSpread(s: Spread, digits = 2, suffix = ""): string {
  if (s.n === 0) return "-";
  if (s.n === 1) return `${fmt(s.median, digits)}${suffix}`;
  return `${fmt(s.median, digits)}${suffix} (${fmt(s.min, digits)}-${fmt(s.max, digits)})`;
}

/** Left-aligned first column, right-aligned others. */
export function table(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: readonly string[]) =>
    cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join("  ");
  return [line(header), widths.map((w) => "-".repeat(w)).join("  "), ...rows.map(line)].join("\n");
}

/** "PASS"/"MISS" against a target, or "-" when the figure is missing. */
export function verdict(ok: boolean | undefined): string {
  return ok === undefined ? "-" : ok ? "met" : "MISSED";
}
