#include "runtime/Scheduler.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <tuple>

#include "common/DeviceMemory.h"
#include "common/ErrorCodes.h"

namespace tsn {

namespace {

std::vector<int64_t> Tail(const std::vector<int64_t>& tokens, int64_t count) {
  const auto n = std::min<int64_t>(count, static_cast<int64_t>(tokens.size()));
  return std::vector<int64_t>(tokens.end() - n, tokens.end());
}

}  // namespace

Scheduler::Scheduler(Stepper& stepper, const DecodeSettings& settings, PrefixCache* prefix)
    : stepper_(stepper),
      prefix_(prefix && settings.prefixCache && stepper.AddressableSlots() && stepper.CanCopyRows() && stepper.RetainsCache()
                  ? prefix
                  : nullptr),
      settings_(settings), policy_(settings.stepTokens, settings.prefillPerDecode), half_(std::max<int64_t>(1, settings.contextLength / 2)) {}

void Scheduler::Serve(std::shared_ptr<ScheduledJob> first, const MoreJobs& more) {
  const bool continuous = stepper_.AddressableSlots();
  std::deque<std::shared_ptr<ScheduledJob>> waiting{std::move(first)};
  for (;;) {
    try {
      if (continuous && more) {
        while (auto next = more()) waiting.push_back(std::move(next));
      }
      // Admit in arrival order while the jobs fit; the cache grows only when it is idle.
      while (!waiting.empty()) {
        const int64_t rows = static_cast<int64_t>(waiting.front()->generation->size());
        if (remaining_.empty() && rows > static_cast<int64_t>(slots_.size())) {
          const int64_t capacity = continuous ? std::max(rows, stepper_.SlotBudget()) : rows;
          stepper_.Begin(capacity);
          slots_.clear();
          slots_.resize(capacity);
          if (prefix_) prefix_->Resize(static_cast<size_t>(capacity));
        }
        if (!Admit(waiting.front())) break;
        waiting.pop_front();
        if (!continuous) break;
      }
      for (size_t s = 0; s < slots_.size(); ++s) {
        if (slots_[s] && slots_[s]->job->generation->Cancelled(slots_[s]->index)) Finish(s);
      }
      const uint64_t signals = Generation::SignalCount();
      const bool stepping = ResumeHeld();
      if (remaining_.empty()) {
        if (waiting.empty()) break;
        continue;
      }
      if (!stepping) {
        // Every row waits for a mask the JS thread is computing (a fraction of a
        // millisecond): sleep until one comes or a row is cancelled; the timeout lets new
        // jobs in meanwhile.
        Generation::WaitForSignal(signals, std::chrono::microseconds(1000));
        continue;
      }
      GraceForHeld();
      bool steppable = false;  // rows may have finished during the grace
      for (const auto& slot : slots_) steppable = steppable || (slot && slot->held.empty());
      if (!steppable) continue;
      const auto started = std::chrono::steady_clock::now();
      Step();
      lastStep_ = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - started);
    } catch (...) {
      FailAll(CurrentError(ErrorCode::kInference));
    }
  }
  try {
    stepper_.End();
  } catch (...) {
  }
  slots_.clear();
}

bool Scheduler::Admit(const std::shared_ptr<ScheduledJob>& job) {
  const auto& specs = job->generation->rows();
  std::vector<size_t> free;
  for (size_t s = 0; s < slots_.size(); ++s) {
    if (!slots_[s]) free.push_back(s);
  }
  if (free.size() < specs.size()) return false;
  remaining_.emplace_back(job, specs.size());
  std::vector<size_t> placed(specs.size());
  for (size_t r = 0; r < specs.size(); ++r) {
    const GenerateRow& spec = specs[r];
    auto row = std::make_unique<Row>();
    row->job = job;
    row->index = r;
    // Keep the most recent prompt tokens that leave room for the continuation (up to half the
    // context; longer continuations slide the window instead).
    const int64_t window = std::max<int64_t>(1, settings_.contextLength - std::min(spec.maxNewTokens, half_));
    row->feed = Tail(spec.prompt, window);
    row->history = row->feed;
    row->arrival = admitted_++;
    row->random = std::make_unique<RowRandom>(spec.sampling.seed);
    row->constrained = spec.constrained;
    if (spec.sampling.Penalised()) {
      row->penalties = std::make_unique<PenaltyState>();
      row->penalties->prompt.insert(spec.prompt.begin(), spec.prompt.end());
    }
    const int64_t source = spec.sharesPrefillWith;
    size_t slot;
    if (source >= 0 && source < static_cast<int64_t>(r) && stepper_.CanCopyRows() &&
        specs[source].prompt == spec.prompt && specs[source].sharesPrefillWith < 0) {
      row->prefillFrom = slots_[placed[source]].get();
      row->feed.clear();
      slot = TakeFreeSlot(free);
    } else {
      slot = PlaceWithPrefix(*row, free);
    }
    placed[r] = slot;
    slots_[slot] = std::move(row);
  }
  return true;
}

void Scheduler::Finish(size_t slot) {
  std::shared_ptr<ScheduledJob> job = slots_[slot]->job;
  const Row& done = *slots_[slot];
  ReleaseDependents(done);
  if (prefix_ && Positional(done) && done.position > 0) {
    prefix_->Remember(slot, std::vector<int64_t>(done.history.begin(), done.history.begin() + done.position));
  }
  for (auto& other : slots_) {
    // A row that was to copy this one's prefill (cancelled before its first step) computes
    // its own: its history still holds its prompt window.
    if (other && other->prefillFrom == slots_[slot].get()) {
      other->prefillFrom = nullptr;
      other->feed = other->history;
    }
  }
  slots_[slot].reset();
  for (auto it = remaining_.begin(); it != remaining_.end(); ++it) {
    if (it->first == job) {
      if (--it->second == 0) {
        remaining_.erase(it);
        job->complete();
      }
      return;
    }
  }
}

void Scheduler::FailAll(const ErrorInfo& error) {
  if (prefix_) prefix_->Clear();  // a failed step may have written any slot
  for (auto& slot : slots_) slot.reset();
  auto failed = std::move(remaining_);
  remaining_.clear();
  for (auto& [job, rows] : failed) {
    job->generation->failed = true;
    job->generation->error = error;
    job->complete();
  }
}

void Scheduler::Step() {
  CopyReadyPrefixes();
  std::vector<size_t> active;
  for (size_t s = 0; s < slots_.size(); ++s) {
    if (slots_[s]) active.push_back(s);
  }
  // A batch-bound cache computes finished rows too: drop them once they are the majority.
  if (!stepper_.AddressableSlots() && slots_.size() >= 4 && active.size() * 2 <= slots_.size()) {
    stepper_.Keep(std::vector<int64_t>(active.begin(), active.end()));
    std::vector<std::unique_ptr<Row>> kept;
    for (size_t s : active) kept.push_back(std::move(slots_[s]));
    slots_ = std::move(kept);
    for (size_t i = 0; i < active.size(); ++i) active[i] = i;
  }

  // How much of its pending feed each row takes this step (StepPolicy).
  std::vector<StepDemand> demands;
  // A held row (constrained, waiting for its mask) has an empty feed: it takes no tokens.
  for (size_t s : active) demands.push_back({static_cast<int64_t>(slots_[s]->feed.size()), slots_[s]->arrival});
  const std::vector<int64_t> plan = policy_.Plan(demands);

  const int64_t count = static_cast<int64_t>(slots_.size());
  int64_t width = 1;
  for (int64_t n : plan) width = std::max(width, n);
  StepBatch batch(count, width);
  std::vector<size_t> sampling;  // rows whose feed ends this step: they pick a token
  for (size_t i = 0; i < active.size(); ++i) {
    const size_t s = active[i];
    Row& row = *slots_[s];
    const int64_t n = plan[i];
    for (int64_t t = 0; t < n; ++t) batch.token(s, t) = row.feed[t];
    batch.positions[s] = row.position;
    batch.lengths[s] = n;
    // Waits for its source's prefill (below), a running row's prefix, or its mask.
    if (row.prefillFrom || row.prefixFrom || !row.held.empty()) continue;
    if (n == static_cast<int64_t>(row.feed.size())) {
      sampling.push_back(s);
    } else if (n > 0) {
      // A chunk of a longer feed: the rest goes in later steps; its logits are not used.
      row.position += n;
      row.feed.erase(row.feed.begin(), row.feed.begin() + n);
    }
  }
  // A row sharing a prefill samples in the step its source's prefill completes, from a copy
  // of the source's cache and from the source's logits.
  std::vector<size_t> copies;
  for (size_t s : active) {
    const Row* source = slots_[s]->prefillFrom;
    if (source && std::find(sampling.begin(), sampling.end(), SlotOf(source)) != sampling.end()) copies.push_back(s);
  }

  const std::shared_ptr<const Logits> logits = stepper_.Step(batch);
  CopyPrefills(copies);
  sampling.insert(sampling.end(), copies.begin(), copies.end());
  if (sampling.empty()) return;
  active.clear();
  std::vector<SampleRow> sampleRows;
  for (size_t s : sampling) {
    Row& row = *slots_[s];
    const int64_t from = static_cast<int64_t>(row.prefillFrom ? SlotOf(row.prefillFrom) : s);
    if (row.constrained && !row.job->generation->TakeMask(row.index, row.mask)) {
      // Its mask is still being computed on the JS thread: keep the logits, go on without it.
      row.held = logits->HostRows({from});
      continue;
    }
    active.push_back(s);
    sampleRows.push_back(SampleRowOf(row, from));
  }
  std::vector<SampledToken> tokens;
  if (!active.empty()) tokens = SampleTokens(*logits, std::move(sampleRows));
  for (size_t s : sampling) {
    Row& row = *slots_[s];
    row.prefillFrom = nullptr;
    row.position += static_cast<int64_t>(row.feed.size());
    row.feed.clear();
  }
  for (size_t i = 0; i < active.size(); ++i) Accept(active[i], tokens[i]);
}

SampleRow Scheduler::SampleRowOf(Row& row, int64_t logitRow) {
  SampleRow sample{&row.sampling(), row.random.get(), row.penalties.get(), logitRow};
  if (row.constrained) {
    sample.mask = row.mask.data();
    sample.maskWords = static_cast<int64_t>(row.mask.size());
  }
  return sample;
}

void Scheduler::GraceForHeld() {
  // The masks of one JS callback arrive microseconds apart: rows still held get a moment (a
  // quarter of a step, at most 250 us) so the step takes them too rather than splitting the
  // batch into steps of a few rows each. Bounded: a slow mask never holds the others longer.
  const auto grace = std::clamp(lastStep_ / 4, std::chrono::microseconds(20), std::chrono::microseconds(250));
  const auto deadline = std::chrono::steady_clock::now() + grace;
  for (;;) {
    bool held = false;
    for (const auto& slot : slots_) held = held || (slot && !slot->held.empty());
    const auto now = std::chrono::steady_clock::now();
    if (!held || now >= deadline) return;
    const uint64_t signals = Generation::SignalCount();
    ResumeHeld();
    held = false;
    for (const auto& slot : slots_) held = held || (slot && !slot->held.empty());
    if (!held) return;
    Generation::WaitForSignal(signals, std::chrono::duration_cast<std::chrono::microseconds>(deadline - now));
  }
}

bool Scheduler::ResumeHeld() {
  bool stepping = false;
  for (size_t s = 0; s < slots_.size(); ++s) {
    if (!slots_[s]) continue;
    Row& row = *slots_[s];
    if (row.held.empty()) {
      stepping = true;
      continue;
    }
    if (!row.job->generation->TakeMask(row.index, row.mask)) continue;
    const int64_t vocab = static_cast<int64_t>(row.held.size());
    const HostLogits logits(std::move(row.held), vocab);
    row.held.clear();
    const std::vector<SampledToken> tokens = SampleTokens(logits, {SampleRowOf(row, 0)});
    Accept(s, tokens[0]);
    stepping = stepping || slots_[s] != nullptr;
  }
  return stepping;
}

void Scheduler::Accept(size_t s, const SampledToken& sampled) {
  Row& row = *slots_[s];
  Generation& generation = *row.job->generation;
  const int64_t token = sampled.token;
  if (settings_.IsEos(token)) {
    Finish(s);
    return;
  }
  if (row.penalties) ++row.penalties->generated[token];
  generation.outputs[row.index].push_back(static_cast<int32_t>(token));
  if (row.job->sink) row.job->sink(row.index, sampled);
  if (static_cast<int64_t>(generation.outputs[row.index].size()) >= generation.rows()[row.index].maxNewTokens) {
    Finish(s);
    return;
  }
  row.history.push_back(token);
  if (row.position >= settings_.contextLength) {
    // The cache is full: start over from the most recent half of the context.
    ReleaseDependents(row);
    row.feed = Tail(row.history, half_);
    row.history = row.feed;
    row.position = 0;
  } else {
    row.feed.assign(1, token);
    if (static_cast<int64_t>(row.history.size()) > 2 * settings_.contextLength) {
      row.history = Tail(row.history, settings_.contextLength);
    }
  }
}

size_t Scheduler::SlotOf(const Row* row) const {
  for (size_t s = 0; s < slots_.size(); ++s) {
    if (slots_[s].get() == row) return s;
  }
  throw std::logic_error("a row shares the prefill of a row that is gone");
}

void Scheduler::CopyPrefills(const std::vector<size_t>& active) {
  for (size_t s : active) {
    Row& row = *slots_[s];
    if (!row.prefillFrom) continue;
    const Row& source = *row.prefillFrom;
    stepper_.CopyRow(static_cast<int64_t>(SlotOf(&source)), static_cast<int64_t>(s));
    // The source's position already counts this step's feed only after the loop below; its
    // cache now holds its whole feed.
    row.position = source.position + static_cast<int64_t>(source.feed.size());
    row.history = source.history;
    Generation& generation = *row.job->generation;
    generation.cachedTokens[row.index] = generation.cachedTokens[source.index];
  }
}

bool Scheduler::Positional(const Row& row) {
  // Between steps history holds the cached positions and the pending feed; right after a row
  // samples its last token (Finish), only the cached ones.
  const auto size = static_cast<int64_t>(row.history.size());
  return !row.prefillFrom && !row.prefixFrom && size >= row.position &&
         size <= row.position + static_cast<int64_t>(row.feed.size());
}

size_t Scheduler::TakeFreeSlot(std::vector<size_t>& free) {
  // Busy slots stay within a few of the highest busy one where idle slots cost compute.
  constexpr int64_t kSpread = 4;
  int64_t highestBusy = -1;
  for (size_t s = 0; s < slots_.size(); ++s) {
    if (slots_[s]) highestBusy = static_cast<int64_t>(s);
  }
  const bool compact = stepper_.IdleSlotsCost();
  auto key = [&](size_t s) {
    const bool far = compact && static_cast<int64_t>(s) > highestBusy + kSpread;
    const bool cached = prefix_ && prefix_->Holds(s);
    return std::make_tuple(far, far ? s : 0, cached, cached ? prefix_->LastUse(s) : s);
  };
  auto best = std::min_element(free.begin(), free.end(), [&](size_t a, size_t b) { return key(a) < key(b); });
  const size_t slot = *best;
  free.erase(best);
  if (prefix_) prefix_->Forget(slot, true);
  return slot;
}

size_t Scheduler::PlaceWithPrefix(Row& row, std::vector<size_t>& free) {
  if (!prefix_) return TakeFreeSlot(free);
  const std::vector<int64_t>& window = row.history;
  const int64_t limit = static_cast<int64_t>(window.size()) - 1;  // the last token is fed for its logits
  const PrefixMatch idle = prefix_->Longest(window, limit, free);
  const Row* running = nullptr;
  int64_t runningLength = 0;
  for (const auto& other : slots_) {
    if (!other || !(Positional(*other) || other->prefillFrom || other->prefixFrom)) continue;
    const int64_t length = CommonPrefix(other->history, window, limit);
    // Ties go to the row that has already computed more of it.
    if (length >= PrefixCache::kMinReuse &&
        (length > runningLength || (length == runningLength && other->position > running->position))) {
      running = other.get();
      runningLength = length;
    }
  }
  if (idle.length > 0 && idle.length >= runningLength) {
    // The idle slot holding it becomes this row's: nothing to copy.
    const size_t slot = static_cast<size_t>(idle.slot);
    free.erase(std::find(free.begin(), free.end(), slot));
    prefix_->Forget(slot, false);
    ReusePrefix(row, slot, nullptr, idle.length);
    return slot;
  }
  const size_t slot = TakeFreeSlot(free);
  if (runningLength == 0) {
    ReusePrefix(row, slot, nullptr, 0);
  } else if (running->position >= runningLength) {
    ReusePrefix(row, slot, running, runningLength);
  } else {
    row.prefixFrom = running;
    row.prefixLength = runningLength;
    row.feed.clear();
  }
  return slot;
}

void Scheduler::ReusePrefix(Row& row, size_t slot, const Row* source, int64_t length) {
  if (source && length > 0) stepper_.CopyRow(static_cast<int64_t>(SlotOf(source)), static_cast<int64_t>(slot), length);
  row.prefixFrom = nullptr;
  row.prefixLength = 0;
  row.position = length;
  row.feed.assign(row.history.begin() + length, row.history.end());
  row.job->generation->cachedTokens[row.index] = length;
  prefix_->CountQuery(static_cast<int64_t>(row.history.size()), length);
}

void Scheduler::ReleaseDependents(const Row& source) {
  for (size_t s = 0; s < slots_.size(); ++s) {
    Row* row = slots_[s].get();
    if (!row || row->prefixFrom != &source) continue;
    const int64_t length = Positional(source) ? std::min(row->prefixLength, source.position) : 0;
    ReusePrefix(*row, s, &source, length >= PrefixCache::kMinReuse ? length : 0);
  }
}

void Scheduler::CopyReadyPrefixes() {
  for (size_t s = 0; s < slots_.size(); ++s) {
    Row* row = slots_[s].get();
    if (row && row->prefixFrom && row->prefixFrom->position >= row->prefixLength) {
      ReusePrefix(*row, s, row->prefixFrom, row->prefixLength);
    }
  }
}

}  // namespace tsn
