/**
 * The `.sha256` beside a checkpoint (sha256sum format: `<hex>  <name>`). Corrupted tensor
 * bytes load silently in libtorch and then score garbage, so the hash is checked before
 * the file reaches the addon.
 */
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { readFile } from "node:fs/promises";
import { pipeline } from "node:stream/promises";
import { ServingError } from "../errors.js";

/** Streams the file through sha256 (a checkpoint may be large; never read whole). */
export async function sha256File(path: string): Promise<string> {
  const hash = createHash("sha256");
  await pipeline(createReadStream(path), hash);
  return hash.digest("hex");
}

/**
 * Verifies `<path>.sha256` when it exists. Returns whether a checksum was checked; throws
 * ERR_CHECKPOINT_INVALID on a mismatch or a malformed checksum file.
 */
export async function verifyChecksumBeside(path: string): Promise<boolean> {
  let text: string;
  try {
    text = await readFile(`${path}.sha256`, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return false;
    throw new ServingError("ERR_CHECKPOINT_INVALID", `cannot read ${path}.sha256: ${(err as Error).message}`, {
      cause: err,
    });
  }
  const expected = text.trim().split(/\s+/, 1)[0]?.toLowerCase() ?? "";
  if (!/^[0-9a-f]{64}$/.test(expected)) {
    throw new ServingError("ERR_CHECKPOINT_INVALID", `${path}.sha256 does not hold a sha256 hex digest`);
  }
  const actual = await sha256File(path);
  if (actual !== expected) {
    throw new ServingError(
      "ERR_CHECKPOINT_INVALID",
      `checksum mismatch for ${path}: expected ${expected}, file has ${actual} (corrupted or replaced; ` +
        "re-export it or restore the matching .sha256)",
      { detail: { expected, actual } },
    );
  }
  return true;
}
