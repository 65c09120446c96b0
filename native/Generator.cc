#include "Generator.h"

#include <algorithm>
#include <memory>

#include "Errors.h"
#include "Sampler.h"

namespace tsn {

namespace {

struct RowState {
  std::vector<int64_t> history;  // the most recent tokens (prompt window, then generated)
  std::vector<int64_t> feed;     // tokens to feed at the next step
  int64_t position = 0;          // tokens already in this row's cache
  bool done = false;
  SamplingParams params;
  std::unique_ptr<RowRandom> random;
};

std::vector<int64_t> Tail(const std::vector<int64_t>& tokens, int64_t count) {
  const auto n = std::min<int64_t>(count, static_cast<int64_t>(tokens.size()));
  return std::vector<int64_t>(tokens.end() - n, tokens.end());
}

}  // namespace

void RunGeneration(Generation& job, Stepper& stepper, const GeneratorSettings& settings,
                   const TokenSink& sink) {
  const int64_t context = settings.contextLength;
  const int64_t half = std::max<int64_t>(1, context / 2);
  const size_t rowCount = job.size();

  std::vector<RowState> rows(rowCount);
  for (size_t r = 0; r < rowCount; ++r) {
    const GenerateRow& spec = job.rows()[r];
    if (spec.prompt.empty()) throw CodedError("ERR_INVALID_ARGUMENT", "a prompt has no tokens");
    // Keep the most recent prompt tokens that leave room for the continuation (up to half
    // the context; longer continuations slide the window instead).
    const int64_t window = std::max<int64_t>(1, context - std::min(spec.maxNewTokens, half));
    rows[r].feed = Tail(spec.prompt, window);
    rows[r].history = rows[r].feed;
    rows[r].done = spec.maxNewTokens <= 0;
    rows[r].params = {spec.temperature, spec.topK};
    rows[r].random = std::make_unique<RowRandom>(spec.seed);
  }

  std::vector<size_t> slotRow(rowCount);  // cache slot -> row
  for (size_t r = 0; r < rowCount; ++r) slotRow[r] = r;
  stepper.Begin(static_cast<int64_t>(rowCount));

  for (;;) {
    std::vector<size_t> activeSlots;
    for (size_t s = 0; s < slotRow.size(); ++s) {
      RowState& row = rows[slotRow[s]];
      if (!row.done && job.Cancelled(slotRow[s])) row.done = true;
      if (!row.done) activeSlots.push_back(s);
    }
    if (activeSlots.empty()) break;

    // Finished rows still cost compute: drop them from the cache once they are the majority.
    if (stepper.WantsCompaction() && slotRow.size() >= 4 && activeSlots.size() * 2 <= slotRow.size()) {
      std::vector<int64_t> keep(activeSlots.begin(), activeSlots.end());
      stepper.Keep(at::tensor(keep, at::kLong));
      std::vector<size_t> kept;
      for (size_t s : activeSlots) kept.push_back(slotRow[s]);
      slotRow.swap(kept);
      for (size_t i = 0; i < activeSlots.size(); ++i) activeSlots[i] = i;
    }

    const int64_t slots = static_cast<int64_t>(slotRow.size());
    int64_t width = 1;
    for (size_t s : activeSlots) {
      width = std::max<int64_t>(width, static_cast<int64_t>(rows[slotRow[s]].feed.size()));
    }
    at::Tensor idx = at::zeros({slots, width}, at::kLong);
    at::Tensor pos = at::zeros({slots}, at::kLong);
    at::Tensor lengths = at::zeros({slots}, at::kLong);
    auto idxData = idx.accessor<int64_t, 2>();
    auto posData = pos.accessor<int64_t, 1>();
    auto lenData = lengths.accessor<int64_t, 1>();
    for (size_t s : activeSlots) {
      const RowState& row = rows[slotRow[s]];
      for (size_t t = 0; t < row.feed.size(); ++t) idxData[s][t] = row.feed[t];
      posData[s] = row.position;
      lenData[s] = static_cast<int64_t>(row.feed.size());
    }

    at::Tensor logits = stepper.Step(idx, pos, lengths);
    if (static_cast<int64_t>(activeSlots.size()) < slots) {
      std::vector<int64_t> active(activeSlots.begin(), activeSlots.end());
      logits = logits.index_select(0, at::tensor(active, at::kLong).to(logits.device()));
    }
    std::vector<SamplingParams> params;
    std::vector<RowRandom*> randoms;
    for (size_t s : activeSlots) {
      params.push_back(rows[slotRow[s]].params);
      randoms.push_back(rows[slotRow[s]].random.get());
    }
    const std::vector<int64_t> tokens = SampleTokens(logits, params, randoms);

    for (size_t i = 0; i < activeSlots.size(); ++i) {
      const size_t r = slotRow[activeSlots[i]];
      RowState& row = rows[r];
      row.position += static_cast<int64_t>(row.feed.size());
      const int64_t token = tokens[i];
      if (token == settings.eosTokenId) {
        row.done = true;
        continue;
      }
      job.outputs[r].push_back(static_cast<int32_t>(token));
      if (sink) sink(r, static_cast<int32_t>(token));
      if (static_cast<int64_t>(job.outputs[r].size()) >= job.rows()[r].maxNewTokens) {
        row.done = true;
        continue;
      }
      row.history.push_back(token);
      if (row.position >= context) {
        // The cache is full: start over from the most recent half of the context.
        row.feed = Tail(row.history, half);
        row.history = row.feed;
        row.position = 0;
      } else {
        row.feed.assign(1, token);
        if (static_cast<int64_t>(row.history.size()) > 2 * context) row.history = Tail(row.history, context);
      }
    }
  }
  stepper.End();
}

}  // namespace tsn
