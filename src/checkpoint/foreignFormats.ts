/**
 * What a checkpoint path holds when it is not a TorchScript archive but a model in a form
 * people have at hand: a Hugging Face model directory, a GGUF or safetensors file, or a
 * torch.save() checkpoint. Each is served after a one-time conversion (README, "Models"), and
 * the load fails naming it and the command that converts it, before the addon reads a byte
 * (which would call the file corrupt, or a directory not found).
 *
 * Only formats recognised for certain are named: anything else goes on to the addon, whose
 * errors stay the authority on a damaged archive.
 */
import { existsSync, statSync } from "node:fs";
import { join } from "node:path";

import { ServingError } from "../errors.js";
import { readArchiveEntryNames, readFileHead } from "./archiveFiles.js";

const EXPORT_HF = "/usr/bin/python3 scripts/model/export_hf.py";

/** True for a safetensors file: an 8-byte little-endian header length, then that much JSON. */
function isSafetensors(bytes: Buffer, size: number): boolean {
  if (bytes.length < 9 || bytes[8] !== 0x7b /* { */) return false;
  const headerLength = bytes.readBigUInt64LE(0);
  return headerLength >= 2n && headerLength <= BigInt(size - 8);
}

/** What a recognised foreign file is, and for a language model, what converts it. */
interface Foreign {
  what: string;
  convert: string;
}

function recognise(path: string): Foreign | undefined {
  let stats;
  try {
    stats = statSync(path);
  } catch {
    return undefined;
  }
  if (stats.isDirectory()) {
    if (existsSync(join(path, "config.json"))) {
      return {
        what: "a directory with a config.json (a Hugging Face model?), not a checkpoint file",
        convert: `Export it once, then serve the file written: ${EXPORT_HF} ${path} OUT.pt [--dtype bfloat16|q8_0|q4_k_m|q5_k_m]`,
      };
    }
    return { what: "a directory, not a checkpoint file", convert: "A checkpoint is a TorchScript archive written by the scripts in scripts/model/." };
  }
  if (!stats.isFile()) return undefined;
  const bytes = readFileHead(path, 16);
  if (!bytes) return undefined;
  if (bytes.subarray(0, 4).toString("latin1") === "GGUF") {
    return {
      what: "a GGUF file",
      convert:
        "Import it once (its tokenizer and chat template come along), then serve the file written: " +
        `/usr/bin/python3 scripts/model/import_gguf.py ${path} OUT.pt`,
    };
  }
  if (isSafetensors(bytes, stats.size)) {
    return {
      what: "a safetensors file (the weights of a Hugging Face model)",
      convert: `Export the directory that holds it, with its config.json and tokenizer, then serve the file written: ${EXPORT_HF} DIR OUT.pt`,
    };
  }
  const exportIt =
    "Export it to a TorchScript checkpoint first: nanoGPT and GPT-2 weights with scripts/model/export_gpt.py, " +
    "a Hugging Face model's directory with scripts/model/export_hf.py (docs/checkpoint.md, section 5).";
  // torch.save's legacy format: a pickle (protocol 2 and up) of its magic number first.
  if (bytes[0] === 0x80 && bytes[1] !== undefined && bytes[1] >= 2 && bytes[1] <= 5) {
    return { what: "a Python pickle (a torch.save() checkpoint?), not a TorchScript archive", convert: exportIt };
  }
  if (bytes.length >= 4 && bytes.readUInt32LE(0) === 0x04034b50) {
    const names = readArchiveEntryNames(path);
    if (!names || names.length === 0) return undefined; // damaged: the addon says how
    const folder = names[0]!.split("/")[0];
    const has = (inner: string) => names.some((name) => name === `${folder}/${inner}` || name.startsWith(`${folder}/${inner}/`));
    if (has("code") || has("constants.pkl")) return undefined;
    if (has("data.pkl")) {
      return { what: "a torch.save() checkpoint (weights, with no TorchScript code), not a TorchScript archive", convert: exportIt };
    }
    return {
      what: `a zip archive but not a TorchScript checkpoint (no code/ or constants.pkl under ${folder}/)`,
      convert: "A checkpoint is a TorchScript archive written by the scripts in scripts/model/.",
    };
  }
  return undefined;
}

/**
 * Why `path` cannot be served as it is and, for a language model, what converts it; undefined
 * when it is none of the formats named above (a missing path included: that is
 * ERR_CHECKPOINT_NOT_FOUND's).
 */
export function foreignCheckpointReason(path: string, purpose: "language-model" | "recommender"): string | undefined {
  const foreign = recognise(path);
  if (!foreign) return undefined;
  if (purpose === "recommender") {
    return `${path} is ${foreign.what}: a recommender checkpoint is written by scripts/recsys/train.py (models/recommender.md).`;
  }
  return `${path} is ${foreign.what}. ${foreign.convert}`;
}

/** Throws ERR_CHECKPOINT_INVALID naming the format and its conversion (foreignCheckpointReason). */
export function rejectForeignCheckpoint(path: string, purpose: "language-model" | "recommender"): void {
  const reason = foreignCheckpointReason(path, purpose);
  if (reason) throw new ServingError("ERR_CHECKPOINT_INVALID", `Checkpoint ${reason}`);
}
