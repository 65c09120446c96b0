#include "runtime/Sampler.h"

#include <emmintrin.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "common/ErrorCodes.h"
#include "common/Errors.h"

namespace tsn {

RowRandom::RowRandom(int64_t seed)
    : engine_(seed >= 0 ? static_cast<uint64_t>(seed) : std::random_device{}()) {}

double RowRandom::UniformOpenClosed() {
  // 53 random bits in [0, 1), mirrored into (0, 1].
  return 1.0 - static_cast<double>(engine_() >> 11) * (1.0 / 9007199254740992.0);
}

namespace {

void Penalise(float* logits, int64_t vocab, const SamplingSettings& s, const PenaltyState& state) {
  if (s.repetitionPenalty != 1.0) {
    const float r = static_cast<float>(s.repetitionPenalty);
    auto apply = [&](int64_t v) {
      if (v >= 0 && v < vocab) logits[v] = logits[v] > 0 ? logits[v] / r : logits[v] * r;
    };
    for (int64_t v : state.prompt) apply(v);
    for (const auto& [v, count] : state.generated) {
      if (state.prompt.count(v) == 0) apply(v);
    }
  }
  for (const auto& [v, count] : state.generated) {
    if (v < 0 || v >= vocab) continue;
    logits[v] -= static_cast<float>(s.frequencyPenalty * static_cast<double>(count) + (count > 0 ? s.presencePenalty : 0.0));
  }
}

// Disallowed tokens get -inf: no later step (penalties, temperature, filters) can bring them back.
void ApplyMask(float* logits, int64_t vocab, const int32_t* mask, int64_t words) {
  const float none = -std::numeric_limits<float>::infinity();
  for (int64_t v = 0; v < vocab; ++v) {
    const int64_t word = v >> 5;
    if (word >= words || ((static_cast<uint32_t>(mask[word]) >> (v & 31)) & 1u) == 0) logits[v] = none;
  }
}

// The raw distribution's log-probability of `token` and its `n` most likely tokens.
void RawLogprobs(const float* raw, int64_t vocab, int64_t n, SampledToken& out) {
  float peak = -std::numeric_limits<float>::infinity();
  for (int64_t v = 0; v < vocab; ++v) peak = std::max(peak, raw[v]);
  double sum = 0;
  for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(raw[v] - peak));
  const double logZ = static_cast<double>(peak) + std::log(sum);
  out.logprob = static_cast<float>(raw[out.token] - logZ);
  n = std::min(n, vocab);
  if (n <= 0) return;
  std::vector<int32_t> ids(vocab);
  for (int64_t v = 0; v < vocab; ++v) ids[v] = static_cast<int32_t>(v);
  std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), [raw](int32_t a, int32_t b) {
    return raw[a] > raw[b] || (raw[a] == raw[b] && a < b);
  });
  out.topIds.assign(ids.begin(), ids.begin() + n);
  for (int32_t id : out.topIds) out.topLogprobs.push_back(static_cast<float>(raw[id] - logZ));
}

// Keeps the most likely tokens whose weights first reach `topP` of the total (at least one).
double KeepNucleus(std::vector<float>& weights, double total, double topP, std::vector<int32_t>& order) {
  order.clear();
  for (size_t v = 0; v < weights.size(); ++v) {
    if (weights[v] > 0) order.push_back(static_cast<int32_t>(v));
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return weights[a] > weights[b] || (weights[a] == weights[b] && a < b);
  });
  const double target = topP * total;
  double cumulative = 0;
  size_t kept = 0;
  while (kept < order.size() && (kept == 0 || cumulative < target)) cumulative += weights[order[kept++]];
  for (size_t i = kept; i < order.size(); ++i) weights[order[i]] = 0.0f;
  return cumulative;
}

// Whether any of v[0 .. n) is NaN, sixteen values an iteration (SSE2, every x86-64 CPU): the
// logits of a step come back from memory (the head's weights streamed past them), and a
// scalar test and branch per logit cost about 1% of a small model's step.
bool AnyNan(const float* v, int64_t n) {
  __m128 nan = _mm_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128 a = _mm_loadu_ps(v + i), b = _mm_loadu_ps(v + i + 4), c = _mm_loadu_ps(v + i + 8), d = _mm_loadu_ps(v + i + 12);
    nan = _mm_or_ps(nan, _mm_or_ps(_mm_or_ps(_mm_cmpunord_ps(a, a), _mm_cmpunord_ps(b, b)),
                                   _mm_or_ps(_mm_cmpunord_ps(c, c), _mm_cmpunord_ps(d, d))));
  }
  bool any = _mm_movemask_ps(nan) != 0;
  for (; i < n; ++i) any |= v[i] != v[i];
  return any;
}

// The first index of the largest of v[0 .. n) (NaN never counts as largest) and its value, in
// two passes of SSE2: the peak (maxps keeps the running peak where a value is NaN), then the
// first index that holds it.
std::pair<int64_t, float> ArgMax(const float* v, int64_t n) {
  const float none = -std::numeric_limits<float>::infinity();
  __m128 p0 = _mm_set1_ps(none), p1 = p0, p2 = p0, p3 = p0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    p0 = _mm_max_ps(_mm_loadu_ps(v + i), p0);
    p1 = _mm_max_ps(_mm_loadu_ps(v + i + 4), p1);
    p2 = _mm_max_ps(_mm_loadu_ps(v + i + 8), p2);
    p3 = _mm_max_ps(_mm_loadu_ps(v + i + 12), p3);
  }
  alignas(16) float lanes[4];
  _mm_store_ps(lanes, _mm_max_ps(_mm_max_ps(p0, p1), _mm_max_ps(p2, p3)));
  float peak = none;
  for (float lane : lanes) peak = lane > peak ? lane : peak;
  for (; i < n; ++i) peak = v[i] > peak ? v[i] : peak;
  const __m128 target = _mm_set1_ps(peak);
  int64_t best = 0;
  for (; best + 4 <= n; best += 4) {
    if (_mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(v + best), target)) != 0) break;
  }
  while (best < n && !(v[best] == peak)) ++best;
  return {best < n ? best : 0, peak};
}

// The CPU path: plain loops over each row, no tensor ops (a decode step of a small model
// takes a fraction of a millisecond; dispatching a dozen ATen ops would cost a tenth of it).
// `logits`: [logitRows][vocab] in host memory.
std::vector<SampledToken> SampleOnCpu(const float* logits, int64_t logitRows, int64_t vocab,
                                      const std::vector<SampleRow>& rows) {
  const int64_t count = static_cast<int64_t>(rows.size());
  std::vector<SampledToken> out(count);
  // Kept between calls (a vocabulary's worth, every step): written before read.
  thread_local std::vector<float> weights;
  weights.resize(vocab);
  std::vector<float> sorted;
  std::vector<float> adjusted;
  std::vector<int32_t> order;
  for (int64_t r = 0; r < count; ++r) {
    const int64_t source = rows[r].logitRow;
    if (source < 0 || source >= logitRows) throw CodedError(ErrorCode::kInference, "sampled row outside the logits");
    const float* raw = logits + source * vocab;
    const SamplingSettings& p = *rows[r].settings;
    if (AnyNan(raw, vocab)) throw CodedError(ErrorCode::kInference, "the model produced NaN logits");
    const float* row = raw;
    const bool penalised = rows[r].penalties != nullptr && p.Penalised();
    if (penalised || rows[r].mask != nullptr) {
      adjusted.assign(raw, raw + vocab);
      if (rows[r].mask != nullptr) ApplyMask(adjusted.data(), vocab, rows[r].mask, rows[r].maskWords);
      if (penalised) Penalise(adjusted.data(), vocab, p, *rows[r].penalties);
      row = adjusted.data();
    }
    const auto [best, peak] = ArgMax(row, vocab);
    if (!std::isfinite(peak)) {
      throw CodedError(ErrorCode::kInference, rows[r].mask != nullptr ? "the constraint allows no token the model can produce" : "the model produced no finite logit");
    }
    SampledToken& chosen = out[r];
    chosen.token = best;
    if (p.temperature > kGreedyTemperature) {
      float floor = -std::numeric_limits<float>::infinity();
      if (p.topK > 0 && p.topK < vocab) {
        sorted.assign(row, row + vocab);
        std::nth_element(sorted.begin(), sorted.begin() + (p.topK - 1), sorted.end(), std::greater<float>());
        floor = sorted[p.topK - 1];  // ties at the k-th value are kept
      }
      const float inverse = static_cast<float>(1.0 / p.temperature);
      double total = 0;
      for (int64_t v = 0; v < vocab; ++v) {
        weights[v] = row[v] >= floor ? std::exp((row[v] - peak) * inverse) : 0.0f;
        total += weights[v];
      }
      if (p.topP < 1.0) total = KeepNucleus(weights, total, p.topP, order);
      if (p.minP > 0.0) {
        // The most likely token weighs exp(0) = 1 and survives every filter above.
        const float threshold = static_cast<float>(p.minP);
        total = 0;
        for (int64_t v = 0; v < vocab; ++v) {
          if (weights[v] < threshold) weights[v] = 0.0f;
          total += weights[v];
        }
      }
      const double target = rows[r].random->UniformOpenClosed() * total;
      double cumulative = 0;
      for (int64_t v = 0; v < vocab; ++v) {
        if (weights[v] <= 0) continue;
        cumulative += weights[v];
        chosen.token = v;
        if (cumulative >= target) break;
      }
    }
    if (p.logprobs >= 0) RawLogprobs(raw, vocab, p.logprobs, chosen);
  }
  return out;
}

}  // namespace

std::vector<SampledToken> SampleTokens(const Logits& logits, std::vector<SampleRow> rows) {
  // On the CPU the rows are read where they are: an index_select per step copied them into a
  // fresh tensor (a parallel copy and new pages every step, for one row of a batch-1 decode).
  if (const float* host = logits.host()) return SampleOnCpu(host, logits.rows(), logits.vocab(), rows);
  bool cpu = false;
  for (const SampleRow& row : rows) cpu = cpu || row.settings->NeedsCpu() || row.mask != nullptr;
  if (cpu) {
    // The rows come over in one copy, and are sampled there.
    std::vector<int64_t> sources;
    for (size_t r = 0; r < rows.size(); ++r) {
      sources.push_back(rows[r].logitRow);
      rows[r].logitRow = static_cast<int64_t>(r);
    }
    const std::vector<float> gathered = logits.HostRows(sources);
    return SampleOnCpu(gathered.data(), static_cast<int64_t>(rows.size()), logits.vocab(), rows);
  }
  // Greedy rows take the argmax there; sampled rows draw their uniform here, in row order.
  std::vector<Logits::Draw> draws;
  for (const SampleRow& row : rows) {
    const SamplingSettings& p = *row.settings;
    const bool sampled = p.temperature > kGreedyTemperature;
    draws.push_back({row.logitRow, sampled ? p.temperature : 0.0, p.topK, sampled ? row.random->UniformOpenClosed() : 0.0});
  }
  const std::vector<int64_t> ids = logits.DrawOnDevice(draws);
  std::vector<SampledToken> out(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) out[r].token = ids[r];
  return out;
}

}  // namespace tsn
