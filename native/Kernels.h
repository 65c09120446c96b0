// CPU kernels of the native GPT runtime (GptStepper). Plain C++ with GCC vector types,
// compiled for AVX-512, AVX2+FMA and baseline x86-64 and picked at run time, so one binary
// runs on any x86-64 host at its best width.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace tsn {

// 64-byte aligned float storage.
struct AlignedFloats {
  struct Free {
    void operator()(float* p) const;
  };
  std::unique_ptr<float[], Free> data;
  size_t size = 0;
  void Resize(size_t count);  // contents are not preserved or initialised
  float* get() const { return data.get(); }
};

// A Linear layer's weight [N, K] and bias [N], packed in panels of 16 output columns
// (panel p holds W[16p .. 16p+15][k] for every k, column-interleaved), N padded to 16.
class PackedLinear {
 public:
  PackedLinear() = default;
  // weight: row-major [n, k]; bias: n values or null.
  PackedLinear(const float* weight, const float* bias, int n, int k);
  int n() const { return n_; }
  int k() const { return k_; }
  int panels() const { return panels_; }
  const float* panel(int p) const { return packed_.get() + static_cast<size_t>(p) * k_ * 16; }
  const float* bias() const { return bias_.get(); }

 private:
  int n_ = 0, k_ = 0, panels_ = 0;
  AlignedFloats packed_;
  AlignedFloats bias_;
};

enum class Epilogue {
  Store,      // Y = X W^T + b
  Accumulate, // Y += X W^T + b   (residual connections)
  GeluTanh,   // Y = gelu_tanh(X W^T + b)
  GeluErf,    // Y = gelu_erf(X W^T + b)
};

// Y[m, 16*p0 .. 16*p1) for m < rows. Only the first `n` columns of Y are written.
void LinearPanels(const float* x, int rows, int ldx, const PackedLinear& w, float* y, int ldy,
                  int p0, int p1, Epilogue epilogue);

// out[m] = LayerNorm(x[m]) * gamma + beta over `width` features, for m < rows.
void LayerNormRows(const float* x, int rows, int ld, int width, const float* gamma, const float* beta,
                   float eps, float* out, int ldo);

// Causal attention of one head for `queries` new tokens at positions first..first+queries-1:
// q[t] (hd floats, stride ldq), keys transposed kt[d * ldk + j], values v[j * hd + d],
// positions 0..first+t visible to query t. scratch holds at least first+queries floats.
void AttendHead(const float* q, int ldq, int queries, int first, const float* kt, int ldk,
                const float* v, int hd, float scale, float* out, int ldo, float* scratch);

// The instruction set the kernels run with here: "avx512", "avx2" or "baseline".
const char* KernelIsa();

}  // namespace tsn
