/** Facts about the machine a run happened on, and the load average sampled during it. */
import { readFileSync } from "node:fs";
import { cpus, loadavg, totalmem } from "node:os";

export interface MachineFacts {
  cpu: string;
  cores: number;
  memoryGiB: number;
  node: string;
  /** 1-minute load average at the start of the run. */
  loadAtStart: number;
}

export function machineFacts(): MachineFacts {
  let cpu = cpus()[0]?.model ?? "unknown";
  try {
    // The VM may hide the model name; the family says which generation it is (25 = Zen 3/4).
    const info = readFileSync("/proc/cpuinfo", "utf8");
    const family = /cpu family\s*:\s*(\d+)/.exec(info)?.[1];
    const model = /^model\s*:\s*(\d+)/m.exec(info)?.[1];
    const avx512 = /\bavx512f\b/.test(info);
    const amx = /\bamx_tile\b/.test(info);
    if (family) cpu += ` (family ${family} model ${model ?? "?"}${avx512 ? ", AVX-512" : ""}${amx ? ", AMX" : ""})`;
  } catch {
    // not Linux: the model name is all there is
  }
  return {
    cpu,
    cores: cpus().length,
    memoryGiB: Math.round((totalmem() / 2 ** 30) * 10) / 10,
    node: process.version,
    loadAtStart: loadavg()[0]!,
  };
}

/** Samples the 1-minute load average every few seconds until stopped. */
export class LoadSampler {
  readonly samples: number[] = [];
  readonly #timer: NodeJS.Timeout;

  constructor(everyMs = 5000) {
    this.samples.push(loadavg()[0]!);
    this.#timer = setInterval(() => this.samples.push(loadavg()[0]!), everyMs);
    this.#timer.unref();
  }

  stop(): { min: number; max: number; mean: number } {
    clearInterval(this.#timer);
    this.samples.push(loadavg()[0]!);
    const sum = this.samples.reduce((a, b) => a + b, 0);
    return {
      min: Math.min(...this.samples),
      max: Math.max(...this.samples),
      mean: Math.round((sum / this.samples.length) * 100) / 100,
    };
  }
}
