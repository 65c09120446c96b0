import { createHash } from "node:crypto";
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect } from "chai";

import { verifyChecksum } from "../../src/checkpoint/verify.js";

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
