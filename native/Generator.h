// The decode loop of one generation job: prefill of prompts of different lengths, then
// incremental decode, per-row limits, end-of-sequence and cancellation, the long-sequence
// policy of docs/checkpoint.md, and compaction of finished rows out of the cache.
#pragma once

#include <cstdint>
#include <functional>

#include "Generation.h"
#include "Stepper.h"

namespace tsn {

struct GeneratorSettings {
  int64_t contextLength = 0;
  int64_t eosTokenId = -1;  // -1: the model has none
};

// Called on the inference thread for every produced token; may be empty.
using TokenSink = std::function<void(size_t row, int32_t token)>;

// Fills job.outputs. Throws on model errors (the caller records them).
void RunGeneration(Generation& job, Stepper& stepper, const GeneratorSettings& settings,
                   const TokenSink& sink);

}  // namespace tsn
