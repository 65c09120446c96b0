// Which rows feed how many tokens in one step: the chunked-prefill policy of the decode
// loop (docs/operations.md "Scheduling"). Every decoding row feeds its one token; prompt
// tokens (rows still feeding a prompt, or re-feeding their window at the context end) get
// the rest of the step's token budget, oldest admission first, in chunks, but while rows
// decode at most `prefillPerDecode` prompt tokens per decoding row (at least kMinChunk), so
// a step that carries a prompt chunk costs a bounded multiple of a decode-only step. That
// limit is lifted while the prompts in line outnumber the decoding rows by
// kWaitingServedRatio (TGI's waiting_served_ratio): then the server is prefill-bound, and
// holding prompts back would only lengthen everyone's time to first token. A long prompt is thus
// spread over several steps instead of stalling every running stream for its whole
// prefill, and a prompt admitted later cannot overtake an earlier one. As in vLLM's
// chunked prefill (decodes first, then prefill chunks under max_num_batched_tokens) and
// TGI's max_batch_prefill_tokens.
#pragma once

#include <cstdint>
#include <vector>

namespace tsn {

struct StepDemand {
  int64_t pending = 0;   // tokens the row still has to feed before it samples (1: decoding)
  uint64_t arrival = 0;  // admission order: smaller is older
};

class StepPolicy {
 public:
  // stepTokens <= 0: no budget (every row feeds all it has: unchunked prefill).
  // prefillPerDecode <= 0: prompts take all the budget the decodes leave.
  StepPolicy(int64_t stepTokens, int64_t prefillPerDecode);

  // Tokens each row feeds this step (same order as `rows`); 0: the row waits. At least one
  // row feeds when any row has something pending, so the loop always progresses.
  std::vector<int64_t> Plan(const std::vector<StepDemand>& rows) const;

  int64_t stepTokens() const { return stepTokens_; }

  // The smallest chunk a prefilling row is given while decodes fill the budget, so that
  // prompts still progress when many streams are decoding.
  static constexpr int64_t kMinChunk = 8;
  static constexpr double kWaitingServedRatio = 1.2;

 private:
  int64_t stepTokens_;
  int64_t prefillPerDecode_;
};

}  // namespace tsn
