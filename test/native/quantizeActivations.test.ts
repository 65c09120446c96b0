/**
 * The kernel families' vector quantization of activations gives the scalar form's bytes
 * (test/native/cpp/quantize-activations.cc, built and run by test/helpers/kernelHarness.ts).
 * Every family this CPU can run is checked; the others are reported as skipped.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { buildKernelHarness, expectEveryFamilyClean } from "../helpers/kernelHarness.js";

describe("activation quantization on every kernel family", function () {
  this.timeout(300000);
  let dir = "";
  before(() => {
    dir = mkdtempSync(join(tmpdir(), "quantize-activations-"));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it("gives the scalar quantization's bytes (Q8_0 and Q8_K blocks, ties, NaN, strides)", async () => {
    expectEveryFamilyClean(await buildKernelHarness("quantize-activations.cc", dir));
  });
});
