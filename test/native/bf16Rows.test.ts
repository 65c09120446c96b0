/**
 * bf16 weights read where they lie (the rows of a bf16 checkpoint, not packed) on every kernel
 * family: against double-precision products and the packed panels of the same values, a row
 * alone against the row in a batch, every epilogue (test/native/cpp/bf16-rows.cc, built and run
 * by test/helpers/kernelHarness.ts). Every family this CPU can run is checked; the others are
 * reported as skipped.
 */
import { describeEveryFamily } from "../helpers/kernelHarness.js";

describeEveryFamily(
  "bf16 rows in place on every kernel family",
  "give the products of the packed panels, a row's alike whatever its batch, with every epilogue",
  "bf16-rows.cc",
);
