/**
 * bf16 weights read where they lie (the rows of a bf16 checkpoint, not packed) on every kernel
 * family: against double-precision products and the packed panels of the same values, a row
 * alone against the row in a batch, every epilogue (test/native/cpp/bf16-rows.cc, built and run
 * by test/helpers/kernelHarness.ts). Every family this CPU can run is checked; the others are
 * reported as skipped.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { buildKernelHarness, expectEveryFamilyClean } from "../helpers/kernelHarness.js";

describe("bf16 rows in place on every kernel family", function () {
  this.timeout(300000);
  let dir = "";
  before(() => {
    dir = mkdtempSync(join(tmpdir(), "bf16-rows-"));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it("give the products of the packed panels, a row's alike whatever its batch, with every epilogue", async () => {
    expectEveryFamilyClean(await buildKernelHarness("bf16-rows.cc", dir));
  });
});
