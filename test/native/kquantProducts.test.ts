/**
 * The kernel families' K-quant products (test/native/cpp/kquant-products.cc, built and run by
 * test/helpers/kernelHarness.ts): Q5_K rows, alone and mixed with Q4_K and Q6_K rows in one
 * matrix, against ggml's integer sums written out in the harness, and every row of a batch equal
 * to the row alone. Every family this CPU can run is checked; the others are reported as skipped.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { buildKernelHarness, expectEveryFamilyClean } from "../helpers/kernelHarness.js";

describe("K-quant products on every kernel family", function () {
  this.timeout(300000);
  let dir = "";
  before(() => {
    dir = mkdtempSync(join(tmpdir(), "kquant-products-"));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it("give ggml's sums for Q5_K rows (alone, and mixed with Q4_K and Q6_K), each row of a batch as alone", async () => {
    expectEveryFamilyClean(await buildKernelHarness("kquant-products.cc", dir));
  });
});
