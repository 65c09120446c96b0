// One forward step of a causal LM with a KV cache it owns (docs/checkpoint.md):
// forward(idx[B,T], pos[B], lengths[B]) -> logits[B,V]. Prefill and decode are the same
// call; rows may sit at different positions; a step takes and gives plain C++ (Logits.h).
// Implementations: ScriptStepper (any TorchScript checkpoint, any device) and the native CPU
// steppers, each registered by architecture in NativeRegistry.h (DecoderStepper's GptStepper
// for "gpt", LlamaStepper for "llama").
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

#include "kernels/Kernels.h"
#include "steppers/CheckpointWeights.h"
#include "steppers/Logits.h"
#include "steppers/ModelFields.h"

namespace tsn {

class Stepper {
 public:
  virtual ~Stepper() = default;
  // Allocates a zeroed cache for `batch` rows.
  virtual void Begin(int64_t batch) = 0;
  // B = batch.slots. Returns float logits [R,V] after each row's last fed token, on the model's
  // device, for R >= 1 + the last row fed (R <= B; rows fed nothing hold anything). The
  // stepper may reuse them for a later step once the caller has let go of them.
  virtual std::shared_ptr<const Logits> Step(const StepBatch& batch) = 0;
  // True when any slot can start a new row at any step and idle slots cost nothing (rows at
  // different positions, lengths 0 for idle slots): the Scheduler then batches continuously.
  // False for a batch-bound cache, where finished rows cost compute until Keep drops them.
  virtual bool AddressableSlots() const { return false; }
  // Slots worth allocating for continuous batching (addressable runtimes).
  virtual int64_t SlotBudget() const { return 1; }
  // Bytes of cache one row (slot) holds at full context: what the KV budget is divided by.
  virtual int64_t CacheBytesPerRow() const = 0;
  // Bytes of weights the stepper holds beside the module's (the native runtime's packed copy);
  // 0 for a stepper that computes with the module's own tensors.
  virtual int64_t WeightBytes() const { return 0; }
  // Batch-bound caches: keeps only the rows listed, in that order.
  virtual void Keep(const std::vector<int64_t>& rows) { throw std::logic_error("this runtime does not compact"); }
  // True when CopyRow works: n samples of one prompt then share one prefill.
  virtual bool CanCopyRows() const { return false; }
  // Makes slot `to`'s cache a copy of slot `from`'s (every position).
  virtual void CopyRow(int64_t from, int64_t to) { throw std::logic_error("this runtime does not copy rows"); }
  // Makes positions 0..positions-1 of slot `to` a copy of slot `from`'s (a cached prompt
  // prefix); later positions of `to` may change too. Default: the whole row.
  virtual void CopyRow(int64_t from, int64_t to, int64_t positions) { CopyRow(from, to); }
  // True when idle slots below the highest busy one cost compute in a step (a TorchScript
  // forward computes every row it is given): the Scheduler then keeps busy slots low even
  // at the price of evicting cached prefixes.
  virtual bool IdleSlotsCost() const { return false; }
  // Ends a Serve; may free the cache.
  virtual void End() = 0;
  // True when End keeps the cache and Begin with the same batch keeps its contents: what
  // prefix caching across Serve calls needs.
  virtual bool RetainsCache() const { return false; }
  // The checkpoint's tensors this stepper reads are its alone from now on (the module's
  // parameters were released): it may rewrite them in place into a layout of its own kernels.
  // Returns what it did, for the configure note ("" for nothing). `cache`: where the rewritten
  // rows come from (a layout file an earlier load wrote) or go (one this load writes), or null.
  virtual std::string OwnWeights(RegroupCache* /*cache*/) { return ""; }
  // Computes on `threads` threads from now on, no more than it was built with: the load-time
  // check runs on the load's threads (LoadThreads), serving on the threads asked for.
  virtual void UseThreads(int /*threads*/) {}
};

// What a native CPU stepper is built from: the checkpoint's weights by name, its config.json
// fields, the kernel family to compute with and the compute threads.
struct NativeContext {
  const CheckpointWeights& weights;
  const ModelFields& fields;
  const KernelSet& kernels;
  int threads = 1;
  int64_t kvBudgetBytes = 0;  // memory for the cache (SERVICE_KV_BUDGET_MB); 0: 256 MiB

};

}  // namespace tsn
