/**
 * The kernel families' K-quant products (test/native/cpp/kquant-products.cc, built and run by
 * test/helpers/kernelHarness.ts): Q5_K rows, alone and mixed with Q4_K and Q6_K rows in one
 * matrix, against ggml's integer sums written out in the harness, and every row of a batch equal
 * to the row alone. Every family this CPU can run is checked; the others are reported as skipped.
 */
import { describeEveryFamily } from "../helpers/kernelHarness.js";

describeEveryFamily(
  "K-quant products on every kernel family",
  "give ggml's sums for Q5_K rows (alone, and mixed with Q4_K and Q6_K), each row of a batch as alone",
  "kquant-products.cc",
);
