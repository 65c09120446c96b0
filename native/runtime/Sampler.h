// Next-token choice for the rows of one decode step, each row with its own SamplingSettings
// and random stream (a seeded row is reproducible whatever batch it shares). The order, as
// in Hugging Face transformers and vLLM: repetition penalty, then presence/frequency
// penalties, on the raw logits; greedy (argmax of the penalised logits) at or below
// kGreedyTemperature; else temperature, top-k, top-p over what top-k kept, min-p relative
// to the most likely token, and one inverse-CDF draw. Log-probabilities are those of the
// model's raw distribution (before penalties and temperature; docs/openai.md says why).
// Numerically safe: top_k beyond the vocabulary means the whole vocabulary, and NaN logits
// are an error, not a token.
#pragma once

#include <cstdint>
#include <random>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "steppers/Logits.h"

namespace tsn {

constexpr double kGreedyTemperature = 1e-5;

// How one row samples: the C++ face of src/engine/sampling.ts's SamplingSettings, parsed
// from JavaScript in one place (binding/JsArgs.cc ParseSamplingSettings).
struct SamplingSettings {
  double temperature = 1.0;
  int64_t topK = 0;  // 0: whole vocabulary
  double topP = 1.0;
  double minP = 0.0;
  double presencePenalty = 0.0;
  double frequencyPenalty = 0.0;
  double repetitionPenalty = 1.0;
  int64_t seed = -1;      // < 0 draws one
  int64_t logprobs = -1;  // < 0: none; N >= 0: the sampled token's and the N most likely

  bool Penalised() const {
    return presencePenalty != 0.0 || frequencyPenalty != 0.0 || repetitionPenalty != 1.0;
  }
  // Controls the device path does not implement: such rows are sampled on the CPU.
  bool NeedsCpu() const { return Penalised() || topP < 1.0 || minP > 0.0 || logprobs >= 0; }
};

// The tokens a row's penalties look at: the prompt (repetition penalty) and the generated
// tokens with their counts (all three penalties; presence and frequency, as in OpenAI's and
// vLLM's definition, count generated tokens only).
struct PenaltyState {
  std::unordered_set<int64_t> prompt;
  std::unordered_map<int64_t, int64_t> generated;
};

class RowRandom {
 public:
  explicit RowRandom(int64_t seed);  // seed < 0 draws one
  double UniformOpenClosed();        // in (0, 1]

 private:
  std::mt19937_64 engine_;
};

// One row of a step as the sampler sees it.
struct SampleRow {
  const SamplingSettings* settings;
  RowRandom* random;
  const PenaltyState* penalties;  // null when the row is not penalised
  int64_t logitRow;               // the row of the step's logits it samples from
  // A constrained row's allowed tokens (XGrammar's bitmask, 32 tokens per word; tokens past
  // its end are not allowed); null: every token. Applied to the logits before anything else.
  const int32_t* mask = nullptr;
  int64_t maskWords = 0;
};

struct SampledToken {
  int64_t token = 0;
  float logprob = 0;                // raw log-probability of `token` (when logprobs >= 0)
  std::vector<int32_t> topIds;      // the `logprobs` most likely tokens, most likely first
  std::vector<float> topLogprobs;
};

// logits: [slots, V] in host memory or on a device, read at each row's logitRow (in host
// memory in place, with no copy). Logits on a device are sampled there with tensor ops
// (Logits::DrawOnDevice: one device-to-host copy, the ids) unless a row's settings NeedsCpu()
// or it carries a mask: then the rows are copied over and sampled on the CPU. Returns one
// choice per row.
std::vector<SampledToken> SampleTokens(const Logits& logits, std::vector<SampleRow> rows);

}  // namespace tsn
