/**
 * The addon's error codes and the TypeScript catalogue are one list: every code the native
 * side can raise maps to an HTTP status in src/errors.ts (an unknown one would be a silent
 * 500), and native sources name codes only through native/common/ErrorCodes.h.
 */
import { expect } from "chai";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

import { ErrorCodes } from "../../src/errors.js";
import { loadAddon } from "../../src/native/binding.js";
import { repoRoot } from "../helpers/fixtures.js";

describe("native error codes", () => {
  const header = readFileSync(join(repoRoot, "native", "common", "ErrorCodes.h"), "utf8");
  const declared = [...header.matchAll(/inline constexpr const char k\w+\[\] = "(ERR_[A-Z_]+)";/g)].map((m) => m[1]!);

  it("every code the addon exports is in the TypeScript catalogue", () => {
    const exported = loadAddon().errorCodes;
    expect(exported).to.not.be.empty;
    for (const code of exported) expect(ErrorCodes, code).to.have.property(code);
  });

  it("the addon exports every code its header declares", () => {
    expect(declared).to.not.be.empty;
    expect([...loadAddon().errorCodes].sort()).to.deep.equal([...declared].sort());
  });

  it("native sources spell no code outside native/common/ErrorCodes.h", () => {
    const dir = join(repoRoot, "native");
    // Every layer's folder, however deep: a source missed here could spell codes unchecked.
    const sources = readdirSync(dir, { recursive: true, encoding: "utf8" }).filter((name) => /\.(cc|h|inc)$/.test(name));
    expect(sources).to.include.members([join("binding", "addon.cc"), join("kernels", "KernelsBody.inc")]);
    const offenders: string[] = [];
    for (const name of sources) {
      if (name === join("common", "ErrorCodes.h")) continue;
      for (const match of readFileSync(join(dir, name), "utf8").matchAll(/"ERR_[A-Z_]*"/g)) offenders.push(`${name}: ${match[0]}`);
    }
    expect(offenders).to.deep.equal([]);
  });
});
