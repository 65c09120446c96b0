// Quantized weights: the layouts (as GGUF stores them, ggml's blocks) and the activation
// blocks their products use. The products themselves are each family's LinearPanels
// (QuantKernels.cc). A weight row of K values is K / 32 (Q8_0, Q4_0, Q5_0) or K / 256 (K-quants) blocks:
//
//   Q8_0 (34 bytes / 32 values): float16 d, int8 q[32]; value j = d * q[j].
//   Q4_0 (18 bytes / 32): float16 d, 16 bytes qs; value j = d * ((qs[j] & 15) - 8) and value
//        j + 16 = d * ((qs[j] >> 4) - 8), j < 16.
//   Q5_0 (22 bytes / 32): float16 d, a little-endian uint32 qh, 16 bytes qs; Q4_0's nibbles
//        with bit j of qh as the fifth bit of value j, less 16 rather than 8.
//   Q4_K (144 bytes / 256): float16 d, float16 dmin, 12 bytes of 6-bit scales and mins of 8
//        sub-blocks of 32 (ggml's get_scale_min_k4), 128 bytes of 4-bit q (sub-blocks 2i and
//        2i+1 in the low and high nibbles of bytes 32i .. 32i+31); value = d * scale * q - dmin * min.
//   Q5_K (176 bytes / 256): Q4_K's d, dmin and scales, then qh[32] (bit s of qh[l]: the fifth
//        bit of value l of sub-block s), then Q4_K's 128 bytes of nibbles; q in 0..31.
//   Q6_K (210 bytes / 256): 128 bytes of low 4 bits, 64 of high 2 bits, int8 scales[16] (one
//        per 16 values), float16 d; value = d * scale * (q - 32).
// All little-endian, as ggml writes them on every host it supports.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/Kernels.h"

namespace tsn {

// One block of 32 activations quantized as ggml's quantize_row_q8_0 does on x86 (its AVX2
// path): d = max|x| / 127 rounded to float16 (kept here as the float it rounds to),
// q = round-to-nearest-even(x * 127 / max|x|).
struct BlockQ8 {
  float d;
  int8_t q[32];
};

// 256 activations as ggml's quantize_row_q8_K_ref: d = -max / 127 for the x of largest
// magnitude, q = min(127, round(x / d)), bsums = sums of q per 16; sums32 the same per 32 (the
// Q4_K mins' sub-blocks: summed once here rather than for every weight column).
struct BlockQ8K {
  float d;
  int8_t q[256];
  int16_t bsums[16];
  int16_t sums32[8];
};

void QuantizeRowQ8(const float* x, int k, BlockQ8* out);    // k a multiple of 32
void QuantizeRowQ8K(const float* x, int k, BlockQ8K* out);  // k a multiple of 256

// Values per block and bytes per block of a quantized type (1 and 0 for a float type);
// constexpr, so that the kernels' templates take their block sizes from here too.
constexpr int BlockValues(WeightType type) {
  switch (type) {
    case WeightType::Q8_0:
    case WeightType::Q4_0:
    case WeightType::Q5_0: return 32;
    case WeightType::Q4_K:
    case WeightType::Q5_K:
    case WeightType::Q6_K: return 256;
    default: return 1;
  }
}
constexpr int BlockBytes(WeightType type) {
  switch (type) {
    case WeightType::Q8_0: return 34;
    case WeightType::Q4_0: return 18;
    case WeightType::Q5_0: return 22;
    case WeightType::Q4_K: return 144;
    case WeightType::Q5_K: return 176;
    case WeightType::Q6_K: return 210;
    default: return 0;
  }
}
inline size_t RowBytes(WeightType type, int k) { return static_cast<size_t>(k / BlockValues(type)) * BlockBytes(type); }

// The 6-bit scales and mins of a Q4_K super-block (its 12 bytes at offset 4; ggml's
// get_scale_min_k4), all eight of each at once with ggml's masks: out[0..7] the sub-blocks'
// scales, out[8..15] their mins.
inline void UnpackQ4KScales(const uint8_t* s, uint8_t out[16]) {
  uint32_t u[4];
  std::memcpy(u, s, 12);
  u[3] = ((u[2] >> 4) & 0x0f0f0f0f) | (((u[1] >> 6) & 0x03030303) << 4);
  const uint32_t mins03 = u[1] & 0x3f3f3f3f;
  u[1] = (u[2] & 0x0f0f0f0f) | (((u[0] >> 6) & 0x03030303) << 4);
  u[2] = mins03;
  u[0] &= 0x3f3f3f3f;
  std::memcpy(out, u, 16);
}

// A block of a 32-value type (IsBlock32) -> its 32 values as signed bytes (d not applied).
void Block32Values(WeightType type, const uint8_t* block, int8_t* out);

// One weight row of k values of `type` -> floats.
void DequantizeRow(WeightType type, const uint8_t* row, int k, float* out);

// Q4_K rows in groups of eight, interleaved (avx2's layout, and Intel's AVX-512; see
// PackedLinear::InterleaveQ4K): eight consecutive GGUF rows of the same width, rewritten in
// place, super-block by super-block, so that one 256-bit register holds the same four values
// of all eight rows and a product's lanes are the eight output columns (no horizontal sums,
// and each super-block's scales, mins and float epilogue done once for eight columns rather
// than once a column). The eight super-blocks b of the rows become the 1,152 bytes (8 x 144,
// so the rows' bytes are rewritten where they lie) at b * 1152:
//
//   [0, 16)      the eight rows' float16 d            [16, 32)   their float16 dmin
//   [32, 64)     scales, low 4 bits: byte 8q + c holds row c's scale of sub-block q (low
//                nibble) and of sub-block q + 4 (high nibble), q = 0..3
//   [64, 96)     the mins, likewise
//   [96, 112)    scales, high 2 bits: byte 8h + c holds, at bits 2t, row c's scale of
//                sub-block h + 2t (h = 0, 1; t = 0..3)
//   [112, 128)   the mins, likewise
//   [128, 1152)  the 4-bit values: the 32 bytes at 128 + 256i + 32j hold bytes 4j..4j+3 of
//                each row's 32i..32i+31 (row c at 4c): sub-block 2i in the low nibbles, 2i+1
//                in the high, values 4j..4j+3 of each.
constexpr int kQ4KGroupRows = 8;
constexpr int kQ4KGroupBlockBytes = kQ4KGroupRows * 144;
// `from`: eight contiguous Q4_K rows of `blocks` super-blocks, interleaved into `to` (the same
// bytes: `from` itself, rewritten in place, or memory of their size that they do not overlap).
void InterleaveQ4KRows(const uint8_t* from, uint8_t* to, int blocks);

// Q4_0 and Q5_0 rows in groups of eight, interleaved the same way (PackedLinear::
// InterleaveBlock32): a product's lanes are the eight columns, each block's 32 values summed in
// int16 and scaled once for the eight (see DotBlock32Group). The eight blocks b of the rows
// become the 8 x 18 (Q4_0) or 8 x 22 (Q5_0) bytes at b times that:
//
//   [0, 16)     the eight rows' float16 d
//   Q5_0 only, [16, 48): the fifth bits, byte 4c + k holding row c's for value 4j + k at bit j
//               and for value 16 + 4j + k at bit 4 + j (j = 0..3)
//   then 128 bytes of 4-bit values (at 16, Q4_0, or 48, Q5_0): the 32 bytes of chunk j hold
//               bytes 4j..4j+3 of each row's 16 (row c at 4c): values 4j..4j+3 in the low
//               nibbles, 16+4j..16+4j+3 in the high.
constexpr int kQ4_0GroupBlockBytes = kQ4KGroupRows * BlockBytes(WeightType::Q4_0);
constexpr int kQ5_0GroupBlockBytes = kQ4KGroupRows * BlockBytes(WeightType::Q5_0);
// Q8_0 rows in groups of eight on the avx2 and avx512 families (PackedLinear::InterleaveQ8_0): a product's
// lanes are the eight columns, each pair of values sign-extended to int16 and multiplied by one
// pmaddwd (see DotQ8_0Group). The eight blocks b of the rows become the 8 x 34 bytes at 272b:
//
//   [0, 16)     the eight rows' float16 d
//   [16, 272)   the 16 bytes of pair p (0..15) hold values 2p and 2p + 1 of each row (row c at 2c)
constexpr int kQ8_0GroupBlockBytes = kQ4KGroupRows * BlockBytes(WeightType::Q8_0);
// `from`: eight contiguous rows of `type` (Q4_0, Q5_0 or Q8_0) of `blocks` blocks, interleaved
// into `to` (`from` itself, or memory of their size that they do not overlap).
void InterleaveBlock32Rows(WeightType type, const uint8_t* from, uint8_t* to, int blocks);

// Q8_0 rows in panels of sixteen on the amx family (PackedLinear::TileQ8_0): each block of the
// sixteen columns is the B operand of an AMX tdpbsud as it lies (a tile of 8 x 64 bytes), and
// each 64-byte row of it the unsigned operand of one vpdpbusd for the sixteen columns (see
// TilePanelRun), so no product rearranges weights. The sixteen rows' bytes (16 x 34 a block)
// are rewritten where they lie:
//
//   [0, 512 * blocks)   block b's tile at 512b: its 64 bytes at 64j hold values 4j .. 4j + 3 of
//                       each column (column n at 4n), each plus 128 (unsigned: q ^ 0x80)
//   then 32 * blocks    block b's sixteen float16 d at 512 * blocks + 32b
//
// A product of unsigned w + 128 by signed activations x sums to dot(w, x) + 128 * sum(x): the
// activation block's sum, taken off once per row and block, leaves ggml's exact int32 sum.
constexpr int kQ8_0TileRows = 16;
constexpr int kQ8_0TileBytes = 512;
// `from`: sixteen contiguous Q8_0 rows of `blocks` blocks, laid out into `to` (`from` itself, or
// memory of their size that they do not overlap).
void TileQ8_0Rows(const uint8_t* from, uint8_t* to, int blocks);

}  // namespace tsn
