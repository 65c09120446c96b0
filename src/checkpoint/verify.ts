/**
 * Checksums beside checkpoints. Corrupted tensor bytes inside a TorchScript archive load
 * silently and generate garbage, so a `<file>.sha256` (sha256sum format) is checked when
 * present.
 */
import { existsSync, readFileSync } from "node:fs";
import { basename } from "node:path";
import { Worker } from "node:worker_threads";

import { ServingError } from "../errors.js";

// Runs in a worker thread: the file's sha256 in 4 MiB reads.
const HASH_WORKER = `
const { parentPort, workerData } = require("node:worker_threads");
const { createHash } = require("node:crypto");
const { openSync, readSync, closeSync } = require("node:fs");
const hash = createHash("sha256");
const buffer = Buffer.allocUnsafe(4 << 20);
const fd = openSync(workerData, "r");
try {
  for (let n; (n = readSync(fd, buffer, 0, buffer.length, null)) > 0; ) hash.update(buffer.subarray(0, n));
} finally {
  closeSync(fd);
}
parentPort.postMessage(hash.digest("hex"));
`;

/**
 * The file's sha256 (hex), hashed on a worker thread: the JS thread stays free meanwhile, and
 * a caller's synchronous work (TorchEngine.load loads libtorch, about a second) overlaps it.
 */
export function sha256File(path: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const worker = new Worker(HASH_WORKER, { eval: true, workerData: path });
    worker.once("message", (digest: string) => resolve(digest));
    worker.once("error", reject);
    worker.once("exit", (code) => reject(new Error(`the hashing thread exited with code ${code}`)));
  });
}

/**
 * Resolves to true when `<path>.sha256` exists and matches, false when there is none.
 * Throws ERR_CHECKPOINT_NOT_FOUND for a missing file and ERR_CHECKPOINT_INVALID on mismatch.
 * The file and its sidecar are looked up before this returns (a few small synchronous
 * reads), so the hashing thread is already running when the caller goes on.
 */
export function verifyChecksum(path: string): Promise<boolean> {
  if (!existsSync(path)) {
    return Promise.reject(new ServingError("ERR_CHECKPOINT_NOT_FOUND", `Checkpoint not found: ${path}`));
  }
  let expected: string;
  try {
    expected = readFileSync(`${path}.sha256`, "utf8").trim().split(/\s+/)[0]?.toLowerCase() ?? "";
  } catch {
    return Promise.resolve(false);
  }
  if (!/^[0-9a-f]{64}$/.test(expected)) {
    return Promise.reject(new ServingError("ERR_CHECKPOINT_INVALID", `${path}.sha256 does not hold a sha256 digest`));
  }
  return sha256File(path).then((actual) => {
    if (actual !== expected) {
      throw new ServingError(
        "ERR_CHECKPOINT_INVALID",
        `Checkpoint ${basename(path)} does not match its sha256 (expected ${expected}, got ${actual}): ` +
          "the file is corrupt or was replaced without updating the .sha256 beside it.",
      );
    }
    return true;
  });
}
