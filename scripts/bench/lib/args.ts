import type { KernelFamily } from "../../../src/native/types.js";

/** A tiny flag parser for the benchmark scripts: `--name value`, `--name=value`, `--flag`. */
export type Flags = Map<string, string | true>;

export function parseFlags(argv: readonly string[], usage: string, known: readonly string[]): Flags {
  const flags: Flags = new Map();
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === "--help" || arg === "-h") {
      console.log(usage);
      process.exit(0);
    }
    if (!arg.startsWith("--")) fail(usage, `unexpected argument ${arg}`);
    const eq = arg.indexOf("=");
    const name = arg.slice(2, eq < 0 ? undefined : eq);
    if (!known.includes(name)) fail(usage, `unknown flag --${name}`);
    if (eq >= 0) flags.set(name, arg.slice(eq + 1));
    else if (i + 1 < argv.length && !argv[i + 1]!.startsWith("--")) flags.set(name, argv[++i]!);
    else flags.set(name, true);
  }
  return flags;
}

export function numberFlag(flags: Flags, name: string, fallback: number): number {
  const raw = flags.get(name);
  if (raw === undefined) return fallback;
  const value = Number(raw);
  if (raw === true || !Number.isFinite(value) || value < 0) {
    console.error(`--${name} needs a non-negative number, got ${String(raw)}`);
    process.exit(2);
  }
  return value;
}

export function stringFlag(flags: Flags, name: string, fallback: string): string {
  const raw = flags.get(name);
  if (raw === undefined) return fallback;
  if (raw === true) {
    console.error(`--${name} needs a value`);
    process.exit(2);
  }
  return raw;
}

function fail(usage: string, message: string): never {
  console.error(`${message}\n\n${usage}`);
  process.exit(2);
}

/**
 * The native kernel families a benchmark times: those --kernels names (comma-separated), or
 * every family this CPU runs; exits naming the families it has when one is not among them.
 */
export function kernelFamiliesToTime(flag: string | undefined, supported: readonly KernelFamily[]): KernelFamily[] {
  const families = (flag ? flag.split(",") : [...supported]) as KernelFamily[];
  for (const family of families) {
    if (!supported.includes(family)) {
      console.error(`kernel family ${family} is not one this CPU runs (it has: ${supported.join(", ")})`);
      process.exit(2);
    }
  }
  return families;
}
