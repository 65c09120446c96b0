/**
 * Checksums beside checkpoints. Corrupted tensor bytes inside a TorchScript archive load
 * silently and generate garbage, so a `<file>.sha256` (sha256sum format) is checked when
 * present.
 */
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, realpathSync, renameSync, statSync, writeFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { basename, join } from "node:path";
import { Worker } from "node:worker_threads";

import { ServingError } from "../errors.js";

// Runs in a worker thread: reads the file through in 4 MiB reads, and where asked
// (workerData.hash) posts back its sha256; otherwise the reads only fill the page cache.
const FILE_WORKER = `
const { parentPort, workerData } = require("node:worker_threads");
const { createHash } = require("node:crypto");
const { openSync, readSync, closeSync } = require("node:fs");
const hash = workerData.hash ? createHash("sha256") : null;
const buffer = Buffer.allocUnsafe(4 << 20);
const fd = openSync(workerData.path, "r");
try {
  for (let n; (n = readSync(fd, buffer, 0, buffer.length, null)) > 0; ) hash?.update(buffer.subarray(0, n));
} finally {
  closeSync(fd);
}
if (hash) parentPort.postMessage(hash.digest("hex"));
`;

/**
 * Reads the file on a worker thread, for nothing but the page cache: a checkpoint not yet
 * cached (the first start after a boot) is then read from the disk while the caller loads
 * libtorch (~0.6 s), not after. Errors are left to the caller's own read; the thread does not
 * keep the process alive. Not on a single core, where it would slow what it overlaps.
 */
export function readAhead(path: string): void {
  if (availableParallelism() < 2) return;
  try {
    const worker = new Worker(FILE_WORKER, { eval: true, workerData: { path, hash: false } });
    worker.on("error", () => undefined);
    worker.unref();
  } catch {
    // no thread to spare: the archive is read as it would have been
  }
}

/**
 * The file's sha256 (hex), hashed on a worker thread: the JS thread stays free meanwhile, and
 * a caller's synchronous work (TorchEngine.load loads libtorch, about a second) overlaps it.
 */
export function sha256File(path: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const worker = new Worker(FILE_WORKER, { eval: true, workerData: { path, hash: true } });
    worker.once("message", (digest: string) => resolve(digest));
    worker.once("error", reject);
    worker.once("exit", (code) => reject(new Error(`the hashing thread exited with code ${code}`)));
  });
}

export interface ChecksumOptions {
  /**
   * A directory where a match is remembered by the file's identity (its real path, device,
   * inode, size, and modification and change times, with the digest expected), so a later
   * check of the same unchanged file does not hash it again. Any write to the file, a
   * replacement or a new `.sha256` changes that identity. The engine passes the load-time
   * check's directory (SERVICE_LOAD_CHECK_CACHE). Absent: every check hashes.
   */
  rememberIn?: string;
  /** Hash even when a match is remembered (and remember it anew). */
  always?: boolean;
  /**
   * Where the file is not hashed (no `.sha256`, or a match remembered), read it ahead anyway
   * (readAhead), as hashing would have: the caller reads it next.
   */
  readAhead?: boolean;
}

/** The identity a remembered match is keyed by; undefined if the file cannot be stat'ed. */
function fileIdentity(path: string, expected: string): string | undefined {
  try {
    const s = statSync(path, { bigint: true });
    return JSON.stringify({ path: realpathSync(path), dev: `${s.dev}`, ino: `${s.ino}`, size: `${s.size}`, mtimeNs: `${s.mtimeNs}`, ctimeNs: `${s.ctimeNs}`, sha256: expected });
  } catch {
    return undefined;
  }
}

function memoFile(dir: string, identity: string): string {
  return join(dir, `sha256-${createHash("sha256").update(identity).digest("hex").slice(0, 32)}.json`);
}

function remembered(dir: string, identity: string): boolean {
  try {
    return readFileSync(memoFile(dir, identity), "utf8") === `${identity}\n`;
  } catch {
    return false;
  }
}

/** Best effort: a directory that cannot be written costs the saving, nothing else. */
function remember(dir: string, identity: string): void {
  const file = memoFile(dir, identity);
  const temporary = `${file}.${process.pid}.tmp`;
  try {
    mkdirSync(dir, { recursive: true });
    writeFileSync(temporary, `${identity}\n`);
    renameSync(temporary, file);
  } catch {
    // not remembered: the next load hashes again
  }
}

/**
 * Resolves to true when `<path>.sha256` exists and matches (hashed now, or a match remembered
 * for the same unchanged file, see ChecksumOptions), false when there is none.
 * Throws ERR_CHECKPOINT_NOT_FOUND for a missing file and ERR_CHECKPOINT_INVALID on mismatch.
 * The file and its sidecar are looked up before this returns (a few small synchronous
 * reads), so the hashing thread is already running when the caller goes on.
 */
export function verifyChecksum(path: string, options: ChecksumOptions = {}): Promise<boolean> {
  if (!existsSync(path)) {
    return Promise.reject(new ServingError("ERR_CHECKPOINT_NOT_FOUND", `Checkpoint not found: ${path}`));
  }
  let expected: string;
  try {
    expected = readFileSync(`${path}.sha256`, "utf8").trim().split(/\s+/)[0]?.toLowerCase() ?? "";
  } catch {
    if (options.readAhead) readAhead(path);
    return Promise.resolve(false);
  }
  if (!/^[0-9a-f]{64}$/.test(expected)) {
    return Promise.reject(new ServingError("ERR_CHECKPOINT_INVALID", `${path}.sha256 does not hold a sha256 digest`));
  }
  const dir = options.rememberIn;
  const before = dir ? fileIdentity(path, expected) : undefined;
  if (dir && before && !options.always && remembered(dir, before)) {
    if (options.readAhead) readAhead(path);
    return Promise.resolve(true);
  }
  return sha256File(path).then((actual) => {
    if (actual !== expected) {
      throw new ServingError(
        "ERR_CHECKPOINT_INVALID",
        `Checkpoint ${basename(path)} does not match its sha256 (expected ${expected}, got ${actual}): ` +
          "the file is corrupt or was replaced without updating the .sha256 beside it.",
      );
    }
    // Remembered only if the file did not change while it was hashed.
    if (dir && before && fileIdentity(path, expected) === before) remember(dir, before);
    return true;
  });
}
