// One generation job as the inference thread sees it: its rows, their cancel flags, the
// tokens produced but not yet delivered to JavaScript, and the outcome. No Napi values live
// here, so the job may be released on any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "common/Errors.h"
#include "runtime/Sampler.h"

namespace tsn {

struct GenerateRow {
  std::vector<int64_t> prompt;
  int64_t maxNewTokens = 1;
  SamplingSettings sampling;
  // An earlier row of the same job with the same prompt whose prefill this row shares (n
  // samples of one prompt): its cache rows are copied instead of computed. -1: none.
  int64_t sharesPrefillWith = -1;
  // A constrained row (structured output): every token it samples is drawn from the tokens a
  // mask allows, which JavaScript sends after each token (Generation::SetMask). `mask` is
  // the first one (XGrammar's bitmask: bit v of word v / 32 allows token v).
  bool constrained = false;
  std::vector<int32_t> mask;
};

// Tokens produced since JavaScript last looked: (row, token) pairs and, when the job asked
// for log-probabilities, one raw log-probability per pair and each row's top alternatives
// (as many per token as that row asked for, in pair order).
struct TokenBatch {
  std::vector<int32_t> pairs;
  std::vector<float> logprobs;
  std::vector<int32_t> topIds;
  std::vector<float> topLogprobs;
};

class Generation {
 public:
  explicit Generation(std::vector<GenerateRow> rows);

  const std::vector<GenerateRow>& rows() const { return rows_; }
  size_t size() const { return rows_.size(); }

  // Any thread. row < 0 cancels every row.
  void Cancel(int64_t row);
  bool Cancelled(size_t row) const;

  // Constrained rows. JS thread: the mask for the row's next token (one per sampled token).
  void SetMask(size_t row, std::vector<int32_t> mask);
  // Inference thread: takes the row's next mask into `out`; false while it has not come.
  bool TakeMask(size_t row, std::vector<int32_t>& out);
  // Counts the masks and cancels any generation received. Inference thread: WaitForSignal
  // sleeps until the count passes `seen` (read before looking at the rows) or `timeout`, so
  // a loop whose every row waits for its mask sleeps instead of polling.
  static uint64_t SignalCount();
  static void WaitForSignal(uint64_t seen, std::chrono::microseconds timeout);

  // True when some row asked for log-probabilities.
  bool WantsLogprobs() const { return wantsLogprobs_; }

  // Inference thread: records a token; true when JS must be told (no notice is pending).
  bool Push(size_t row, const SampledToken& token);
  // JS thread: takes what was produced since the last call.
  TokenBatch Drain();

  // Written by the inference thread before the completion letter is posted; read by JS
  // after it is delivered (the mailbox orders the two).
  std::vector<std::vector<int32_t>> outputs;
  // Per row: prompt positions whose keys and values came from the prefix cache.
  std::vector<int64_t> cachedTokens;
  bool failed = false;
  ErrorInfo error;

 private:
  std::vector<GenerateRow> rows_;
  std::unique_ptr<std::atomic<bool>[]> cancelled_;
  std::mutex pendingMutex_;  // guards pending_ and noticePending_
  TokenBatch pending_;
  bool noticePending_ = false;
  bool wantsLogprobs_ = false;
  std::mutex maskMutex_;  // guards masks_ and maskReady_
  std::vector<std::vector<int32_t>> masks_;
  std::vector<char> maskReady_;
};

}  // namespace tsn
