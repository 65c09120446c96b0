// One generation job as the inference thread sees it: its rows, their cancel flags, the
// tokens produced but not yet delivered to JavaScript, and the outcome. No Napi values live
// here, so the job may be released on any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "Errors.h"

namespace tsn {

struct GenerateRow {
  std::vector<int64_t> prompt;
  int64_t maxNewTokens = 1;
  double temperature = 1.0;
  int64_t topK = 0;
  int64_t seed = -1;
};

class Generation {
 public:
  explicit Generation(std::vector<GenerateRow> rows);

  const std::vector<GenerateRow>& rows() const { return rows_; }
  size_t size() const { return rows_.size(); }

  // Any thread. row < 0 cancels every row.
  void Cancel(int64_t row);
  bool Cancelled(size_t row) const;

  // Inference thread: records a token; true when JS must be told (no notice is pending).
  bool Push(size_t row, int32_t token);
  // JS thread: takes the (row, token) pairs produced since the last call.
  std::vector<int32_t> Drain();

  // Written by the inference thread before the completion letter is posted; read by JS
  // after it is delivered (the mailbox orders the two).
  std::vector<std::vector<int32_t>> outputs;
  bool failed = false;
  ErrorInfo error;

 private:
  std::vector<GenerateRow> rows_;
  std::unique_ptr<std::atomic<bool>[]> cancelled_;
  std::mutex pendingMutex_;  // guards pending_ and noticePending_
  std::vector<int32_t> pending_;
  bool noticePending_ = false;
};

}  // namespace tsn
