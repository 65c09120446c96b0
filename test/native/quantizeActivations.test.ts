/**
 * The kernel families' vector quantization of activations gives the scalar form's bytes
 * (test/native/cpp/quantize-activations.cc, built and run by test/helpers/kernelHarness.ts).
 * Every family this CPU can run is checked; the others are reported as skipped.
 */
import { describeEveryFamily } from "../helpers/kernelHarness.js";

describeEveryFamily(
  "activation quantization on every kernel family",
  "gives the scalar quantization's bytes (Q8_0 and Q8_K blocks, ties, NaN, strides)",
  "quantize-activations.cc",
);
