/**
 * Checksums beside checkpoints. Corrupted tensor bytes inside a TorchScript archive load
 * silently and generate garbage, so a `<file>.sha256` (sha256sum format) is checked when
 * present.
 */
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { access, readFile } from "node:fs/promises";
import { basename } from "node:path";

import { ServingError } from "../errors.js";

export async function sha256File(path: string): Promise<string> {
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  return hash.digest("hex");
}

/**
 * Resolves to true when `<path>.sha256` exists and matches, false when there is none.
 * Throws ERR_CHECKPOINT_NOT_FOUND for a missing file and ERR_CHECKPOINT_INVALID on mismatch.
 */
export async function verifyChecksum(path: string): Promise<boolean> {
  try {
    await access(path);
  } catch {
    throw new ServingError("ERR_CHECKPOINT_NOT_FOUND", `Checkpoint not found: ${path}`);
  }
  let expected: string;
  try {
    expected = (await readFile(`${path}.sha256`, "utf8")).trim().split(/\s+/)[0]?.toLowerCase() ?? "";
  } catch {
    return false;
  }
  if (!/^[0-9a-f]{64}$/.test(expected)) {
    throw new ServingError("ERR_CHECKPOINT_INVALID", `${path}.sha256 does not hold a sha256 digest`);
  }
  const actual = await sha256File(path);
  if (actual !== expected) {
    throw new ServingError(
      "ERR_CHECKPOINT_INVALID",
      `Checkpoint ${basename(path)} does not match its sha256 (expected ${expected}, got ${actual}): ` +
        "the file is corrupt or was replaced without updating the .sha256 beside it.",
    );
  }
  return true;
}
