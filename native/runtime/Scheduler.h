// The decode loop of a model: prefill of prompts of different lengths, then incremental
// decode, per-row limits, end-of-sequence and cancellation, and the long-sequence policy of
// docs/checkpoint.md. On a runtime whose cache slots are addressable (both built-in ones:
// the native steppers, through DecoderStepper, and ScriptStepper) it batches continuously:
// jobs that arrive while others decode join at the next step in free slots (low ones first
// where idle slots cost compute, so a TorchScript step can leave the idle top of the cache
// out), and each job completes as soon as its own rows are done. With a PrefixCache, a new
// row starts from the longest prefix of its prompt that an idle cached slot or a running row
// holds (PrefixCache.h; Admit's helpers TakeFreeSlot, PlaceWithPrefix, ReusePrefix).
// Prompts are fed in chunks under StepPolicy's per-step token budget, interleaved with the
// running rows' decode steps. A runtime with a batch-bound cache would run one job at a time
// and compact finished rows out of it.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "runtime/Generation.h"
#include "runtime/PrefixCache.h"
#include "runtime/Sampler.h"
#include "runtime/StepPolicy.h"
#include "steppers/Stepper.h"

namespace tsn {

struct DecodeSettings {
  int64_t contextLength = 0;
  std::vector<int64_t> eosTokenIds;  // a row ends on any of them; empty: the model has none
  // Tokens one step may feed (decodes first, then prompt chunks); <= 0: unchunked prefill.
  int64_t stepTokens = kDefaultStepTokens;
  // While rows decode, prompt tokens per decoding row in a step; <= 0: no such limit.
  int64_t prefillPerDecode = kDefaultPrefillPerDecode;
  // Automatic prefix caching (SERVICE_PREFIX_CACHE): rows start from the longest cached
  // prefix of their prompt window.
  bool prefixCache = true;

  static constexpr int64_t kDefaultStepTokens = 256;
  static constexpr int64_t kDefaultPrefillPerDecode = 2;

  bool IsEos(int64_t token) const {
    for (int64_t eos : eosTokenIds) {
      if (token == eos) return true;
    }
    return false;
  }
};

// Called on the inference thread for every produced token; may be empty.
using TokenSink = std::function<void(size_t row, const SampledToken& token)>;

// A job handed to the scheduler.
struct ScheduledJob {
  std::shared_ptr<Generation> generation;
  TokenSink sink;
  // Called once on the inference thread when every row is done, or the job failed (its
  // Generation then says why).
  std::function<void()> complete;
};

// Jobs waiting to join; returns null when none is waiting.
using MoreJobs = std::function<std::shared_ptr<ScheduledJob>()>;

class Scheduler {
 public:
  // `prefix`: the model's prefix cache index (outlives the Scheduler); null: no prefix reuse.
  Scheduler(Stepper& stepper, const DecodeSettings& settings, PrefixCache* prefix = nullptr);

  // Serves `first` and, between steps, the jobs `more` hands over (addressable runtimes
  // only), until every job taken is complete. Never throws: failures complete their jobs.
  void Serve(std::shared_ptr<ScheduledJob> first, const MoreJobs& more);

 private:
  struct Row {
    std::shared_ptr<ScheduledJob> job;
    size_t index = 0;              // row within its job
    std::vector<int64_t> history;  // the most recent tokens (prompt window, then generated)
    std::vector<int64_t> feed;     // tokens still to feed before the row samples again
    uint64_t arrival = 0;          // admission order, for the prefill queue
    int64_t position = 0;          // tokens already in this row's cache
    std::unique_ptr<RowRandom> random;
    std::unique_ptr<PenaltyState> penalties;  // only for penalised rows
    // Set until the first step: the row whose prefill this one copies (same job, same
    // prompt); this row feeds nothing meanwhile.
    const Row* prefillFrom = nullptr;
    // Constrained rows (structured output): the mask of the next token, which JavaScript
    // computes from the tokens so far. A row whose mask has not come when its logits are
    // ready keeps its logits row in `held` and sits out of the steps until the mask comes
    // (ResumeHeld): the other rows never wait for the JS thread.
    bool constrained = false;
    std::vector<int32_t> mask;
    std::vector<float> held;  // its logits row while it waits for its mask (else empty)
    // Set while this row waits for a running row (another job's, same prompt prefix) to have
    // computed positions 0..prefixLength-1, which it then copies; it feeds nothing meanwhile.
    const Row* prefixFrom = nullptr;
    int64_t prefixLength = 0;
    const SamplingSettings& sampling() const { return job->generation->rows()[index].sampling; }
  };

  bool Admit(const std::shared_ptr<ScheduledJob>& job);  // false: not enough free slots
  void Finish(size_t slot);                                // the row in `slot` is done
  void FailAll(const ErrorInfo& error);
  void Step();
  // After a row sampled `token`: output, end of row (EOS, max tokens), next feed.
  void Accept(size_t slot, const SampledToken& token);
  // Constrained rows (structured output): samples the held rows whose mask has come; true
  // when some row can step.
  bool ResumeHeld();
  // Before a step: a short, bounded wait for rows whose mask is about to come.
  void GraceForHeld();
  SampleRow SampleRowOf(Row& row, int64_t logitRow);
  // After a step: rows that share a prefill take a copy of their source's cache.
  void CopyPrefills(const std::vector<size_t>& active);
  size_t SlotOf(const Row* row) const;

  // Prefix caching (PrefixCache.h). A free slot for a row: uncached ones first (low ones
  // when idle slots cost compute), else the least recently used cached one (evicted).
  size_t TakeFreeSlot(std::vector<size_t>& free);
  // Places a new row: on the idle cached slot holding the longest prefix of its prompt
  // window, or on a free slot with a copy of a running row's prefix (now, or once that row
  // has computed it). Returns the slot.
  size_t PlaceWithPrefix(Row& row, std::vector<size_t>& free);
  // Row starts at position `length` from a copy of `source`'s first `length` positions.
  void ReusePrefix(Row& row, size_t slot, const Row* source, int64_t length);
  // Rows waiting for `source`'s prefix take what it has computed (it finishes or shifts).
  void ReleaseDependents(const Row& source);
  // Before a step: waiting rows whose source has computed their prefix copy it.
  void CopyReadyPrefixes();
  // A row's slot holds history[0..position) (false while a copy is pending).
  static bool Positional(const Row& row);

  Stepper& stepper_;
  PrefixCache* prefix_;  // null: prefix caching off (or a runtime that cannot keep slots)
  DecodeSettings settings_;
  StepPolicy policy_;
  int64_t half_;
  uint64_t admitted_ = 0;  // rows admitted so far: the next row's arrival
  std::chrono::microseconds lastStep_{0};  // how long the last step took (GraceForHeld)
  std::vector<std::unique_ptr<Row>> slots_;  // null: free
  std::vector<std::pair<std::shared_ptr<ScheduledJob>, size_t>> remaining_;  // rows left per job
};

}  // namespace tsn
