import { createHash } from "node:crypto";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { basename, dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { expect } from "chai";

// dist/test/model/ -> repository root
const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const SEARCHED = ["models", join("test", "fixtures")];
// Deliberately damaged: its .sha256 holds the digest of the intact tiny-gpt.pt.
const CORRUPT = join("test", "fixtures", "broken", "corrupt.pt");

function checkpoints(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return checkpoints(path);
    return name.endsWith(".pt") ? [path] : [];
  });
}

function sha256(path: string): string {
  return createHash("sha256").update(readFileSync(path)).digest("hex");
}

/** `sha256sum` format: `<64 hex>  <file name>` (two spaces; `*` marks binary mode). */
function readDigestFile(path: string): { digest: string; name: string } {
  const line = readFileSync(path, "utf8").trim();
  const match = /^([0-9a-f]{64}) [ *](.+)$/.exec(line);
  if (!match) throw new Error(`${path}: not a sha256sum line: ${JSON.stringify(line)}`);
  return { digest: match[1]!, name: match[2]! };
}

describe("committed checkpoints", () => {
  const all = SEARCHED.flatMap((dir) => checkpoints(join(ROOT, dir)));

  it("exist: the tiny fixtures are committed", () => {
    const names = all.map((p) => relative(ROOT, p));
    expect(names).to.include.members([
      join("test", "fixtures", "tiny-gpt.pt"),
      join("test", "fixtures", "tiny-gpt-eos.pt"),
      join("test", "fixtures", "tiny-gpt-hf.pt"),
      CORRUPT,
    ]);
  });

  for (const path of all) {
    const rel = relative(ROOT, path);
    it(`${rel} has a .sha256 naming it`, () => {
      expect(existsSync(`${path}.sha256`), `${rel}.sha256 missing`).to.equal(true);
      expect(readDigestFile(`${path}.sha256`).name).to.equal(basename(path));
    });

    if (rel === CORRUPT) {
      it(`${rel} fails verification (flipped bytes)`, () => {
        const { digest } = readDigestFile(`${path}.sha256`);
        expect(sha256(path)).to.not.equal(digest);
        const intact = join(ROOT, "test", "fixtures", "tiny-gpt.pt");
        expect(sha256(intact)).to.equal(digest);
        expect(statSync(path).size).to.equal(statSync(intact).size);
      });
    } else {
      it(`${rel} matches its .sha256`, () => {
        expect(sha256(path)).to.equal(readDigestFile(`${path}.sha256`).digest);
      });
    }
  }

  it("golden file names the current fixture digests", () => {
    const golden = JSON.parse(
      readFileSync(join(ROOT, "test", "fixtures", "tiny-gpt.golden.json"), "utf8"),
    ) as { checkpoints: Record<string, { sha256: string }> };
    for (const [file, entry] of Object.entries(golden.checkpoints)) {
      expect(sha256(join(ROOT, "test", "fixtures", file)), file).to.equal(entry.sha256);
    }
  });
});
