import { createHash } from "node:crypto";
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect } from "chai";

import { readAhead, verifyChecksum } from "../../src/checkpoint/verify.js";

async function rejection(promise: Promise<unknown>): Promise<{ code?: string; message: string }> {
  try {
    await promise;
  } catch (err) {
    return err as { code?: string; message: string };
  }
  throw new Error("expected a rejection");
}

describe("verifyChecksum: a match remembered by the file's identity", () => {
  let dir: string;
  let file: string;
  let memos: string;

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), "checksum-"));
    file = join(dir, "model.pt");
    memos = join(dir, "load-checks");
    const bytes = Buffer.alloc(1 << 20, 7);
    writeFileSync(file, bytes);
    writeFileSync(`${file}.sha256`, `${createHash("sha256").update(bytes).digest("hex")}  model.pt\n`);
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  const remembered = () => readdirSync(memos).filter((name) => name.startsWith("sha256-"));

  it("remembers a match, and finds it for the same unchanged file", async () => {
    expect(await verifyChecksum(file, { rememberIn: memos })).to.equal(true);
    expect(remembered()).to.have.length(1);
    const memo = readFileSync(join(memos, remembered()[0]!), "utf8");
    expect(memo).to.contain(`"size":"${1 << 20}"`);
    expect(await verifyChecksum(file, { rememberIn: memos })).to.equal(true);
    expect(remembered()).to.have.length(1);
  });

  it("hashes a file changed since the match again, even with its size and modification time kept", async () => {
    expect(await verifyChecksum(file, { rememberIn: memos })).to.equal(true);
    const { atime, mtime } = statSync(file);
    const bytes = readFileSync(file);
    bytes[12345] ^= 1;
    writeFileSync(file, bytes);
    utimesSync(file, atime, mtime); // the change time still moves
    const err = await rejection(verifyChecksum(file, { rememberIn: memos }));
    expect(err.code).to.equal("ERR_CHECKPOINT_INVALID");
    expect(err.message).to.match(/does not match its sha256/);
  });

  it("does not remember a mismatch", async () => {
    writeFileSync(`${file}.sha256`, `${"0".repeat(64)}  model.pt\n`);
    expect((await rejection(verifyChecksum(file, { rememberIn: memos }))).code).to.equal("ERR_CHECKPOINT_INVALID");
    expect((await rejection(verifyChecksum(file, { rememberIn: memos }))).code).to.equal("ERR_CHECKPOINT_INVALID");
  });

  it("keys the match by the digest expected: a new .sha256 is checked against the file", async () => {
    expect(await verifyChecksum(file, { rememberIn: memos })).to.equal(true);
    writeFileSync(`${file}.sha256`, `${"1".repeat(64)}  model.pt\n`);
    expect((await rejection(verifyChecksum(file, { rememberIn: memos }))).code).to.equal("ERR_CHECKPOINT_INVALID");
  });

  it("verifies where the directory cannot be written, and with `always`", async () => {
    const blocked = join(file, "not-a-directory");
    expect(await verifyChecksum(file, { rememberIn: blocked })).to.equal(true);
    expect(await verifyChecksum(file, { rememberIn: memos, always: true })).to.equal(true);
    expect(remembered()).to.have.length(1);
  });
});

describe("readAhead: a checkpoint read into the page cache beside the addon's load", () => {
  it("leaves a file it cannot read to the caller's own read: nothing thrown, no error escapes its thread", async () => {
    const dir = mkdtempSync(join(tmpdir(), "read-ahead-"));
    try {
      const file = join(dir, "model.pt");
      writeFileSync(file, Buffer.alloc(3 << 20, 1));
      // No .sha256: not hashed, so read ahead; the answer is the same as without.
      expect(await verifyChecksum(file, { readAhead: true })).to.equal(false);
      readAhead(join(dir, "missing.pt"));
      readAhead(dir); // a directory: read() fails with EISDIR on the thread
      // A thread's error would surface as an uncaught exception within this wait (mocha fails the test).
      await new Promise((resolve) => setTimeout(resolve, 500));
      expect(readFileSync(file).length).to.equal(3 << 20);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
