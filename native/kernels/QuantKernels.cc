// Matrix products with quantized weights (Q8_0, Q4_0, Q5_0, Q4_K, Q6_K), one copy per kernel family, each
// in the family's namespace (the QuantLinearPanels that KernelsBody.inc's LinearPanels calls).
// The arithmetic is llama.cpp's (ggml_vec_dot_q8_0_q8_0, _q4_0_q8_0, _q5_0_q8_0, _q4_K_q8_K,
// _q6_K_q8_K): the activations are quantized to 8 bits (Q8_0 per block of 32 for the 32-value
// weight types, whose blocks are unpacked to 32 signed bytes and multiplied as Q8_0's, Q8_K per 256 for
// the K-quants), each block's product is an exact int32 sum, scaled by the product of the
// scales and accumulated in float32. A call quantizes its rows once and reuses them for every
// output column of its panels; a weight block is read once for up to four rows (Q8_0; eight on
// the AVX-512 families, two rows to a zmm register) or sixteen (a K-quant super-block, unpacked
// a sub-block at a time for each tile of eight rows, or sixteen on the AVX-512 families).
#include "kernels/QuantKernels.h"
#include "kernels/ThreadTeam.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#define TSN_Q_INLINE inline __attribute__((always_inline))
#define TSN_Q_NOINLINE __attribute__((noinline))
#define TSN_Q_UNROLL _Pragma("GCC unroll 4")
#define TSN_Q_UNROLL_ALL _Pragma("GCC unroll 8")

namespace tsn {

namespace {

float HalfAt(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return HalfToFloat(h);
}

// ggml's nearest_int: round to nearest, ties to even, through the float adder (|value| < 2^22).
inline int NearestInt(float value) {
  float shifted = value + 12582912.f;
  int bits;
  std::memcpy(&bits, &shifted, 4);
  return (bits & 0x007fffff) - 0x00400000;
}

// Scalar epilogue of one output value (the float kernels' Finish, one lane).
inline void EmitOne(float value, float* out, Epilogue epilogue) {
  switch (epilogue) {
    case Epilogue::Store: *out = value; return;
    case Epilogue::Accumulate: *out += value; return;
    case Epilogue::GeluTanh:
      *out = 0.5f * value * (1.0f + std::tanh(0.7978845608028654f * (value + 0.044715f * value * value * value)));
      return;
    case Epilogue::GeluErf: *out = 0.5f * value * (1.0f + std::erf(value * 0.7071067811865476f)); return;
  }
}

}  // namespace

void QuantizeRowQ8(const float* x, int k, BlockQ8* out) {
  for (int b = 0; b < k / 32; ++b) {
    const float* v = x + b * 32;
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[j]));
    const float id = amax != 0 ? 127.f / amax : 0.0f;
    out[b].d = HalfToFloat(FloatToHalf(amax / 127.f));
    for (int j = 0; j < 32; ++j) out[b].q[j] = static_cast<int8_t>(NearestInt(v[j] * id));
  }
}

void QuantizeRowQ8K(const float* x, int k, BlockQ8K* out) {
  for (int b = 0; b < k / 256; ++b) {
    const float* v = x + b * 256;
    BlockQ8K& y = out[b];
    float max = 0, amax = 0;
    for (int j = 0; j < 256; ++j) {
      const float a = std::fabs(v[j]);
      if (a > amax) {
        amax = a;
        max = v[j];
      }
    }
    if (amax == 0) {
      std::memset(&y, 0, sizeof y);
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < 256; ++j) y.q[j] = static_cast<int8_t>(std::min(127, NearestInt(iscale * v[j])));
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += y.q[16 * g + j];
      y.bsums[g] = static_cast<int16_t>(sum);
    }
    for (int j = 0; j < 8; ++j) y.sums32[j] = static_cast<int16_t>(y.bsums[2 * j] + y.bsums[2 * j + 1]);
    y.d = 1 / iscale;
  }
}

void Block32Values(WeightType type, const uint8_t* block, int8_t* out) {
  if (type == WeightType::Q8_0) {
    std::memcpy(out, block + 2, 32);
  } else if (type == WeightType::Q4_0) {
    for (int j = 0; j < 16; ++j) {
      out[j] = static_cast<int8_t>((block[2 + j] & 0x0F) - 8);
      out[16 + j] = static_cast<int8_t>((block[2 + j] >> 4) - 8);
    }
  } else {
    uint32_t qh;
    std::memcpy(&qh, block + 2, 4);
    for (int j = 0; j < 16; ++j) {
      out[j] = static_cast<int8_t>(((block[6 + j] & 0x0F) | ((qh >> j) & 1) << 4) - 16);
      out[16 + j] = static_cast<int8_t>(((block[6 + j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - 16);
    }
  }
}

void DequantizeRow(WeightType type, const uint8_t* row, int k, float* out) {
  if (IsBlock32(type)) {
    const int bytes = BlockBytes(type);
    int8_t q[32];
    for (int b = 0; b < k / 32; ++b) {
      const uint8_t* block = row + b * bytes;
      const float d = HalfAt(block);
      Block32Values(type, block, q);
      for (int j = 0; j < 32; ++j) out[b * 32 + j] = d * static_cast<float>(q[j]);
    }
  } else if (type == WeightType::Q4_K || type == WeightType::Q5_K) {
    const bool five = type == WeightType::Q5_K;
    const int bytes = BlockBytes(type);
    for (int b = 0; b < k / 256; ++b) {
      const uint8_t* block = row + b * bytes;
      const float d = HalfAt(block), dmin = HalfAt(block + 2);
      uint8_t scalesMins[16];
      UnpackQ4KScales(block + 4, scalesMins);
      const uint8_t* qh = block + 16;  // Q5_K
      const uint8_t* q = block + (five ? 48 : 16);
      float* y = out + b * 256;
      for (int j = 0; j < 8; ++j) {
        const float d1 = d * scalesMins[j], m1 = dmin * scalesMins[8 + j];
        for (int l = 0; l < 32; ++l) {
          int v = j % 2 == 0 ? q[32 * (j / 2) + l] & 0xF : q[32 * (j / 2) + l] >> 4;
          if (five) v += ((qh[l] >> j) & 1) << 4;
          y[32 * j + l] = d1 * v - m1;
        }
      }
    }
  } else if (type == WeightType::Q6_K) {
    for (int b = 0; b < k / 256; ++b) {
      const uint8_t* block = row + b * 210;
      const uint8_t* ql = block;
      const uint8_t* qh = block + 128;
      const int8_t* sc = reinterpret_cast<const int8_t*>(block + 192);
      const float d = HalfAt(block + 208);
      float* y = out + b * 256;
      for (int half = 0; half < 2; ++half) {
        for (int l = 0; l < 32; ++l) {
          const int h = qh[32 * half + l];
          const uint8_t lo = ql[64 * half + l], lo2 = ql[64 * half + 32 + l];
          const int q1 = ((lo & 0xF) | ((h & 3) << 4)) - 32;
          const int q2 = ((lo2 & 0xF) | (((h >> 2) & 3) << 4)) - 32;
          const int q3 = ((lo >> 4) | (((h >> 4) & 3) << 4)) - 32;
          const int q4 = ((lo2 >> 4) | (((h >> 6) & 3) << 4)) - 32;
          const int8_t* s = sc + 8 * half + l / 16;
          y[128 * half + l] = d * s[0] * q1;
          y[128 * half + 32 + l] = d * s[2] * q2;
          y[128 * half + 64 + l] = d * s[4] * q3;
          y[128 * half + 96 + l] = d * s[6] * q4;
        }
      }
    }
  }
}

namespace {

// The rows a rewrite reads: `from` itself, or a copy of it where the rewrite writes over it.
const uint8_t* SourceRows(const uint8_t* from, const uint8_t* to, size_t bytes, std::vector<uint8_t>& copy) {
  if (from != to) return from;
  copy.assign(from, from + bytes);
  return copy.data();
}

// The rewrites below move 2- and 4-byte pieces from eight or sixteen rows into lines across
// them: a matrix transpose, done in SSE2 registers (every x86-64 CPU has them) so that each line
// is written whole, in order. One piece at a time, the step of a 3B Q8_0 load on avx2 where they
// are interleaved took 0.59-0.69 s on two threads; 0.45-0.52 s this way.
inline __m128i Load16(const uint8_t* at) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(at)); }
inline void Store16(uint8_t* at, __m128i v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(at), v); }

// Rows a, b, c, d of four 32-bit values -> its columns, in a, b, c, d.
inline void Transpose4x4Epi32(__m128i& a, __m128i& b, __m128i& c, __m128i& d) {
  const __m128i ab0 = _mm_unpacklo_epi32(a, b), cd0 = _mm_unpacklo_epi32(c, d);
  const __m128i ab2 = _mm_unpackhi_epi32(a, b), cd2 = _mm_unpackhi_epi32(c, d);
  a = _mm_unpacklo_epi64(ab0, cd0);
  b = _mm_unpackhi_epi64(ab0, cd0);
  c = _mm_unpacklo_epi64(ab2, cd2);
  d = _mm_unpackhi_epi64(ab2, cd2);
}

// Eight rows of eight 16-bit values -> its columns: v[j] holds value j of each row (row r at 2r).
inline void Transpose8x8Epi16(__m128i v[8]) {
  __m128i t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm_unpacklo_epi16(v[2 * i], v[2 * i + 1]);      // values 0-3 of rows 2i, 2i+1
    t[2 * i + 1] = _mm_unpackhi_epi16(v[2 * i], v[2 * i + 1]);  // values 4-7
  }
  for (int h = 0; h < 2; ++h) {  // values 4h..4h+3; rows 0-3 in u[4h..], rows 4-7 in u[4h+2..]
    for (int q = 0; q < 2; ++q) {
      u[4 * h + 2 * q] = _mm_unpacklo_epi32(t[4 * q + h], t[4 * q + 2 + h]);
      u[4 * h + 2 * q + 1] = _mm_unpackhi_epi32(t[4 * q + h], t[4 * q + 2 + h]);
    }
  }
  for (int h = 0; h < 2; ++h) {
    for (int m = 0; m < 2; ++m) {
      v[4 * h + 2 * m] = _mm_unpacklo_epi64(u[4 * h + m], u[4 * h + 2 + m]);
      v[4 * h + 2 * m + 1] = _mm_unpackhi_epi64(u[4 * h + m], u[4 * h + 2 + m]);
    }
  }
}

}  // namespace

void InterleaveQ4KRows(const uint8_t* from, uint8_t* rows, int blocks) {
  const size_t rowBytes = static_cast<size_t>(blocks) * 144;
  std::vector<uint8_t> copy;
  const uint8_t* source = SourceRows(from, rows, rowBytes * kQ4KGroupRows, copy);
  for (int b = 0; b < blocks; ++b) {
    uint8_t* g = rows + static_cast<size_t>(b) * kQ4KGroupBlockBytes;
    uint8_t scales[kQ4KGroupRows][16];  // each row's eight scales, then its eight mins
    for (int c = 0; c < kQ4KGroupRows; ++c) {
      const uint8_t* block = source + rowBytes * c + static_cast<size_t>(b) * 144;
      std::memcpy(g + 2 * c, block, 2);
      std::memcpy(g + 16 + 2 * c, block + 2, 2);
      UnpackQ4KScales(block + 4, scales[c]);
    }
    // The 4-bit values: dword j of each row's 32 bytes i -> line (i, j), four rows by four dwords.
    for (int i = 0; i < 4; ++i) {
      for (int h = 0; h < 2; ++h) {
        for (int q = 0; q < 2; ++q) {
          __m128i v[4];
          for (int r = 0; r < 4; ++r) {
            v[r] = Load16(source + rowBytes * (4 * q + r) + static_cast<size_t>(b) * 144 + 16 + 32 * i + 16 * h);
          }
          Transpose4x4Epi32(v[0], v[1], v[2], v[3]);
          for (int m = 0; m < 4; ++m) Store16(g + 128 + 256 * i + 32 * (4 * h + m) + 16 * q, v[m]);
        }
      }
    }
    for (int c = 0; c < kQ4KGroupRows; ++c) {
      for (int q = 0; q < 4; ++q) {
        g[32 + 8 * q + c] = static_cast<uint8_t>((scales[c][q] & 15) | (scales[c][q + 4] & 15) << 4);
        g[64 + 8 * q + c] = static_cast<uint8_t>((scales[c][8 + q] & 15) | (scales[c][8 + q + 4] & 15) << 4);
      }
      for (int h = 0; h < 2; ++h) {
        int high = 0, highMins = 0;
        for (int t = 0; t < 4; ++t) {
          high |= (scales[c][h + 2 * t] >> 4) << (2 * t);
          highMins |= (scales[c][8 + h + 2 * t] >> 4) << (2 * t);
        }
        g[96 + 8 * h + c] = static_cast<uint8_t>(high);
        g[112 + 8 * h + c] = static_cast<uint8_t>(highMins);
      }
    }
  }
}

void InterleaveBlock32Rows(WeightType type, const uint8_t* from, uint8_t* rows, int blocks) {
  const bool q5 = type == WeightType::Q5_0, q8 = type == WeightType::Q8_0;
  const int bytes = BlockBytes(type);
  const int groupBytes = q8 ? kQ8_0GroupBlockBytes : q5 ? kQ5_0GroupBlockBytes : kQ4_0GroupBlockBytes;
  const int values = q5 ? 6 : 2, groupValues = q5 ? 48 : 16;  // where a block's nibbles start
  const size_t rowBytes = static_cast<size_t>(blocks) * bytes;
  std::vector<uint8_t> copy;
  const uint8_t* source = SourceRows(from, rows, rowBytes * kQ4KGroupRows, copy);
  for (int b = 0; b < blocks; ++b) {
    uint8_t* g = rows + static_cast<size_t>(b) * groupBytes;
    const uint8_t* block8[kQ4KGroupRows];
    for (int c = 0; c < kQ4KGroupRows; ++c) {
      block8[c] = source + rowBytes * c + static_cast<size_t>(b) * bytes;
      std::memcpy(g + 2 * c, block8[c], 2);
    }
    if (q8) {
      // Pair p of each row -> line p: two 8 x 8 transposes of 16-bit pairs.
      for (int h = 0; h < 2; ++h) {
        __m128i v[8];
        for (int c = 0; c < kQ4KGroupRows; ++c) v[c] = Load16(block8[c] + 2 + 16 * h);
        Transpose8x8Epi16(v);
        for (int p = 0; p < 8; ++p) Store16(g + 16 + 16 * (8 * h + p), v[p]);
      }
      continue;
    }
    // Dword j of each row's 16 bytes of nibbles -> line j, four rows at a time.
    for (int q = 0; q < 2; ++q) {
      __m128i v[4];
      for (int r = 0; r < 4; ++r) v[r] = Load16(block8[4 * q + r] + values);
      Transpose4x4Epi32(v[0], v[1], v[2], v[3]);
      for (int j = 0; j < 4; ++j) Store16(g + groupValues + 32 * j + 16 * q, v[j]);
    }
    for (int c = 0; q5 && c < kQ4KGroupRows; ++c) {
      const uint8_t* block = block8[c];
      uint32_t qh;
      std::memcpy(&qh, block + 2, 4);
      for (int k = 0; k < 4; ++k) {
        int byte = 0;
        for (int j = 0; j < 4; ++j) byte |= ((qh >> (4 * j + k)) & 1) << j | ((qh >> (16 + 4 * j + k)) & 1) << (4 + j);
        g[16 + 4 * c + k] = static_cast<uint8_t>(byte);
      }
    }
  }
}

void TileQ8_0Rows(const uint8_t* from, uint8_t* rows, int blocks) {
  const size_t rowBytes = static_cast<size_t>(blocks) * BlockBytes(WeightType::Q8_0);
  std::vector<uint8_t> copy;
  const uint8_t* source = SourceRows(from, rows, rowBytes * kQ8_0TileRows, copy);
  uint8_t* scales = rows + static_cast<size_t>(blocks) * kQ8_0TileBytes;
  // Four values (a dword) at a time, written in order: tile row j is dword j of each column.
  for (int b = 0; b < blocks; ++b) {
    const uint8_t* blocks16[kQ8_0TileRows];
    for (int c = 0; c < kQ8_0TileRows; ++c) {
      blocks16[c] = source + rowBytes * c + static_cast<size_t>(b) * BlockBytes(WeightType::Q8_0);
      std::memcpy(scales + 32 * b + 2 * c, blocks16[c], 2);
    }
    uint8_t* tile = rows + static_cast<size_t>(b) * kQ8_0TileBytes;
    const __m128i flip = _mm_set1_epi8(static_cast<char>(0x80));  // int8 -> uint8 + 128
    for (int h = 0; h < 2; ++h) {
      for (int q = 0; q < kQ8_0TileRows / 4; ++q) {
        __m128i v[4];
        for (int r = 0; r < 4; ++r) v[r] = _mm_xor_si128(Load16(blocks16[4 * q + r] + 2 + 16 * h), flip);
        Transpose4x4Epi32(v[0], v[1], v[2], v[3]);
        for (int m = 0; m < 4; ++m) Store16(tile + 64 * (4 * h + m) + 16 * q, v[m]);
      }
    }
  }
}

}  // namespace tsn

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#define TSN_Q_AVX2
namespace tsn::avx2 {
#include "kernels/QuantKernelsBody.inc"
}  // namespace tsn::avx2
#pragma GCC pop_options

// GCC 12's 512-bit intrinsics (broadcasts, inserts, casts, conversions) start from an undefined
// vector, which -Wall reports at every use (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma,f16c,bmi2")
#define TSN_Q_AVX512
namespace tsn::avx512 {
#include "kernels/QuantKernelsBody.inc"
}  // namespace tsn::avx512
#pragma GCC pop_options

// The AVX512_BF16 family's CPUs (Cooper Lake, Sapphire Rapids, Zen 4) all have AVX512_VNNI:
// one vpdpbusd for the 32 byte products of a block.
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512bw,avx512vl,avx512vnni,avx512bf16,avx2,fma,f16c,bmi2")
#define TSN_Q_VNNI
namespace tsn::avx512_bf16 {
#include "kernels/QuantKernelsBody.inc"
}  // namespace tsn::avx512_bf16
#pragma GCC pop_options

// The amx family: avx512_bf16's kernels, and the Q8_0 tile panels (PackedLinear::TileQ8_0):
// AMX tiles against many rows, vpdpbusd against few (Sapphire Rapids and later; Kernels.cc asks
// Linux for the tile state before choosing it).
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512bw,avx512vl,avx512vnni,avx512bf16,avx2,fma,f16c,bmi2,amx-tile,amx-int8")
#define TSN_Q_AMX
namespace tsn::amx {
#include "kernels/QuantKernelsBody.inc"
}  // namespace tsn::amx
#pragma GCC pop_options
#undef TSN_Q_AMX
#pragma GCC diagnostic pop
#undef TSN_Q_VNNI
#undef TSN_Q_AVX512
#undef TSN_Q_AVX2

// The baseline family: SSE2's integer products (part of x86-64 itself: every such CPU has it).
#ifndef __SSE2__
#error "the baseline family's quantized products are written for SSE2 (x86-64)"
#endif
namespace tsn::baseline {
#include "kernels/QuantKernelsBody.inc"
}  // namespace tsn::baseline
