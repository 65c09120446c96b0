#include "runtime/NativeChoice.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <sstream>
#include <tuple>

#include <torch/version.h>

#include "common/ErrorCodes.h"
#include "common/Errors.h"
#include "common/Parallel.h"
#include "runtime/ArchiveWeights.h"
#include "runtime/LoadCheckCache.h"
#include "steppers/NativeRegistry.h"

namespace tsn {

bool FastBf16Matmul() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16") || __builtin_cpu_supports("amx-bf16");
}

bool NeedsTiming(const std::string& family) { return family == "baseline"; }

// The TorchScript forward serves only when clearly faster: timings at load move by a few
// percent with the neighbours, and a wrong flip to it costs more than one to native.
constexpr double kScriptMargin = 1.2;
double ScriptBudget(double nativeSeconds) { return nativeSeconds / kScriptMargin; }

RuntimeVerdict DecideRuntime(const std::string& family, const RuntimeTimings& timings) {
  if (!NeedsTiming(family)) {
    return {true, "native runtime, " + family +
                      " kernels: 1.3-12x the TorchScript forward's decode at every batch size on this family, "
                      "and at par or ahead in prefill"};
  }
  char figures[200];
  if (timings.scriptStopped) {
    std::snprintf(figures, sizeof figures,
                  "a short workload took %.1f ms native (%s kernels); TorchScript was stopped %.1f ms into a run of "
                  "it, once it could no longer be chosen",
                  timings.native * 1e3, family.c_str(), timings.script * 1e3);
    return {true, std::string("native runtime: ") + figures};
  }
  std::snprintf(figures, sizeof figures, "a short workload took %.1f ms native (%s kernels), %.1f ms TorchScript",
                timings.native * 1e3, family.c_str(), timings.script * 1e3);
  if (timings.native > 0 && timings.script > 0 && timings.script < ScriptBudget(timings.native)) {
    return {false, std::string("TorchScript runtime: ") + figures};
  }
  return {true, std::string("native runtime: ") + figures};
}

std::string ScriptSettings(const RuntimeRequest& request) {
  std::string words = "compute=" + request.scriptCompute + ",dequantize=" + request.scriptDequantize +
                      ",optimize=" + request.scriptOptimize;
  for (char& c : words) {
    if (c == ' ' || c == '\n' || c == '\t') c = '_';
  }
  return words;
}

bool ScriptWidens(bool cpu, const RuntimeRequest& request) {
  if (request.dtype == at::kFloat || !cpu) return false;
  if (request.scriptCompute == "float32") return true;
  return request.scriptCompute == "auto" && (request.dtype == at::kHalf || !FastBf16Matmul());
}

bool ScriptDequantizesEveryCall(bool cpu, const RuntimeRequest& request) {
  return request.scriptDequantize == "every-call" || (request.scriptDequantize == "auto" && cpu);
}

std::string UntimedScript(bool cpu, const RuntimeRequest& request) {
  const bool quantized = !request.fields.String("quantization", "").empty();
  if (quantized && ScriptDequantizesEveryCall(cpu, request)) {
    return "the TorchScript forward of a quantized checkpoint dequantizes every weight on every call on the CPU "
           "(SERVICE_TORCHSCRIPT_DEQUANTIZE=once has it timed)";
  }
  if (ScriptWidens(cpu, request)) {
    return "the TorchScript forward would compute this 16-bit checkpoint in float32 on this CPU, holding a float32 "
           "copy of its weights (SERVICE_TORCHSCRIPT_COMPUTE=checkpoint has it timed)";
  }
  return "";
}

std::optional<RuntimeVerdict> DecisionUntimed(const std::string& family, const RuntimeRequest& request,
                                              const std::optional<CheckVerdict>& verdict) {
  if (request.runtime == "native") return RuntimeVerdict{true, "native runtime, " + family + " kernels: asked for"};
  if (!NeedsTiming(family)) return DecideRuntime(family, RuntimeTimings{});
  const std::string untimed = UntimedScript(true, request);
  if (!untimed.empty()) return RuntimeVerdict{true, "native runtime, " + family + " kernels: not timed, as " + untimed};
  if (!verdict || !verdict->timing || verdict->timing->settings != ScriptSettings(request)) return std::nullopt;
  RuntimeVerdict decision = DecideRuntime(
      family, RuntimeTimings{verdict->timing->native, verdict->timing->script, verdict->timing->scriptStopped});
  decision.reason += " (timed at an earlier load, remembered with the verdict)";
  return decision;
}

std::string RememberedCheckNote(const CheckVerdict& verdict, const LoadCheckCache& cache) {
  return "load-time check " + std::string(verdict.agrees ? "passed" : "failed") + " on " + verdict.checked +
         " for this archive, build and kernel family (remembered in " + cache.file() + ")";
}

double ToleranceFor(const RuntimeRequest& request) {
  const bool quantized = !request.fields.String("quantization", "").empty();
  return quantized ? kToleranceQuantized : request.dtype != at::kFloat ? kTolerance16 : kTolerance32;
}

std::string CheckKey(const RuntimeRequest& request, const std::string& family, const std::string& digest, double tolerance) {
  std::ostringstream key;
  key.precision(17);
  key << "torchserve-node load-time check 1\n"
      << "archive " << digest << "\n"
      << "addon " << AddonIdentity() << "\n"
      << "libtorch " << TORCH_VERSION << "\n"
      << "architecture " << request.architecture << "\n"
      << "dtype " << c10::toString(request.dtype) << "\n"
      << "kernels " << family << "\n"
      << "threads " << request.threads << "\n"
      << "tolerance " << tolerance << "\n";
  for (const auto& [name, value] : request.fields.numbers) key << "config " << name << " " << value << "\n";
  for (const auto& [name, value] : request.fields.strings) key << "config " << name << " \"" << value << "\"\n";
  return key.str();
}

std::vector<int64_t> ProbeTokens(int64_t rows, int64_t length) {
  std::vector<int64_t> tokens(static_cast<size_t>(rows * length));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = (static_cast<int64_t>(i) * 37 + 11) % 200;
  return tokens;
}

Probe::Probe(int64_t context)
    : first(std::max<int64_t>(1, std::min<int64_t>(4, context - 2))), second(std::max<int64_t>(1, first / 2)),
      tokens(ProbeTokens(2, first + 1)) {}

namespace {

// A step of `slots` rows at `positions`, row s feeding the first lengths[s] tokens of `rows[s]`
// (each a row of the probe's tokens, or that row less its last token).
StepBatch ProbeBatch(const Probe& probe, const std::vector<int64_t>& rows, const std::vector<int64_t>& positions,
                     const std::vector<int64_t>& lengths, int64_t offset) {
  const int64_t width = *std::max_element(lengths.begin(), lengths.end());
  StepBatch batch(static_cast<int64_t>(rows.size()), width);
  for (size_t s = 0; s < rows.size(); ++s) {
    batch.positions[s] = positions[s];
    batch.lengths[s] = lengths[s];
    for (int64_t t = 0; t < lengths[s]; ++t) batch.token(static_cast<int64_t>(s), t) = probe.token(rows[s], offset + t);
  }
  return batch;
}

}  // namespace

ProbeSteps ProbeLogits(Stepper& stepper, const Probe& probe) {
  ProbeSteps logits;
  stepper.Begin(2);
  logits.push_back(stepper.Step(ProbeBatch(probe, {0, 1}, {0, 0}, {probe.first, probe.second}, 0))->HostRows({0, 1}));
  // Each row's next token: row 0's at `first`, row 1's at `second`.
  StepBatch next(2, 1);
  next.token(0, 0) = probe.token(0, probe.first);
  next.token(1, 0) = probe.token(1, probe.second);
  next.positions = {probe.first, probe.second};
  next.lengths = {1, 1};
  logits.push_back(stepper.Step(next)->HostRows({0, 1}));
  stepper.End();
  return logits;
}

ProbeSteps ReferenceLogits(Stepper& stepper, const Probe& probe) {
  stepper.Begin(4);
  const StepBatch all =
      ProbeBatch(probe, {0, 1, 0, 1}, {0, 0, 0, 0}, {probe.first, probe.second, probe.first + 1, probe.second + 1}, 0);
  const std::shared_ptr<const Logits> logits = stepper.Step(all);
  ProbeSteps steps{logits->HostRows({0, 1}), logits->HostRows({2, 3})};
  stepper.End();
  return steps;
}

ProbeSteps StoredReference(const std::string& blob, const Probe& probe, int64_t vocab) {
  static constexpr char kMagic[8] = {'T', 'S', 'N', 'L', 'C', 'H', 'K', '1'};
  int64_t header[4] = {0, 0, 0, 0};
  constexpr size_t kHead = sizeof kMagic + sizeof header;
  if (blob.size() < kHead || std::memcmp(blob.data(), kMagic, sizeof kMagic) != 0) return {};
  std::memcpy(header, blob.data() + sizeof kMagic, sizeof header);
  const auto [first, second, rows, width] = std::tuple(header[0], header[1], header[2], header[3]);
  if (first != probe.first || second != probe.second || rows != 4 || width != vocab || width <= 0) return {};
  const size_t tokenBytes = probe.tokens.size() * sizeof(int64_t);
  const size_t rowFloats = static_cast<size_t>(width);
  if (blob.size() != kHead + tokenBytes + 4 * rowFloats * sizeof(float)) return {};
  if (std::memcmp(blob.data() + kHead, probe.tokens.data(), tokenBytes) != 0) return {};
  const char* logits = blob.data() + kHead + tokenBytes;
  ProbeSteps steps(2, std::vector<float>(2 * rowFloats));
  std::memcpy(steps[0].data(), logits, 2 * rowFloats * sizeof(float));
  std::memcpy(steps[1].data(), logits + 2 * rowFloats * sizeof(float), 2 * rowFloats * sizeof(float));
  return steps;
}

double Disagreement(const ProbeSteps& reference, const ProbeSteps& candidate) {
  double worst = 0;
  for (size_t step = 0; step < reference.size(); ++step) {
    const std::vector<float>& a = reference[step];
    if (step >= candidate.size() || candidate[step].size() != a.size()) return HUGE_VAL;
    const std::vector<float>& b = candidate[step];
    float scale = 1, difference = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      if (std::isfinite(a[i])) scale = std::max(scale, std::fabs(a[i]));
      if (a[i] == b[i]) continue;  // equal infinities too
      const float d = std::fabs(a[i] - b[i]);
      if (!std::isfinite(d)) return HUGE_VAL;  // a NaN on either side, or an infinity the other lacks
      difference = std::max(difference, d);
    }
    worst = std::max(worst, static_cast<double>(difference) / scale);
  }
  return worst;
}

ProbeSteps StoredReferenceOf(const LoadedModel& model, const RuntimeRequest& request, const Probe& probe) {
  return StoredReference(model.loadCheckReference, probe, request.fields.Int("vocab_size", -1));
}

int CheckThreads(const RuntimeRequest& request) { return std::max(request.threads, static_cast<int>(LoadThreads())); }

CheckVerdict CheckStepper(Stepper& native, const Probe& probe, const ProbeSteps& expected, const RuntimeRequest& request,
                          std::vector<int64_t> cacheShape, PhaseClock& clock) {
  CheckVerdict verdict;
  verdict.disagreement = Disagreement(expected, ProbeLogits(native, probe));
  verdict.agrees = verdict.disagreement <= ToleranceFor(request);
  verdict.cacheShape = std::move(cacheShape);
  native.UseThreads(request.threads);
  clock.Lap("native forward");
  return verdict;
}

std::string RememberCheck(CheckVerdict& verdict, const LoadCheckCache& cache, bool stored) {
  const std::string ran = std::string("load-time check ran") + (stored ? " (against the reference logits stored at export)" : "");
  std::string error;
  if (cache.Remember(verdict, error)) return ran + ", verdict remembered in " + cache.file();
  if (!error.empty()) return ran + "; its verdict could not be remembered: " + error;
  return ran;
}

namespace {

// A TorchScript class name less the "___torch_mangle_<n>" parts torch adds to a class scripted
// more than once in a process ("__torch__.torchserve_node.llama.___torch_mangle_8.LlamaLM").
std::string Unmangled(const std::string& name) {
  static constexpr const char kMangle[] = "___torch_mangle_";
  std::string out;
  for (size_t start = 0; start <= name.size();) {
    size_t end = name.find('.', start);
    if (end == std::string::npos) end = name.size();
    const std::string part = name.substr(start, end - start);
    const bool mangle = part.rfind(kMangle, 0) == 0 && part.size() > sizeof kMangle - 1 &&
                        part.find_first_not_of("0123456789", sizeof kMangle - 1) == std::string::npos;
    if (!mangle) out += (out.empty() ? "" : ".") + part;
    start = end + 1;
  }
  return out;
}

}  // namespace

std::vector<int64_t> ArchiveCacheShape(const ArchiveIndex& index, const std::string& architecture) {
  const ArchiveModule* module = FindArchiveModule(architecture);
  if (module == nullptr || Unmangled(index.rootClass) != module->rootClass) return {};
  std::vector<int64_t> shape;
  for (const char* name : {"n_layer", "", module->kvHeads, "block_size", "head_dim"}) {
    if (*name == '\0') {
      shape.insert(shape.end(), {2, 1});  // keys and values; one row
      continue;
    }
    const auto found = index.ints.find(name);
    if (found == index.ints.end() || found->second <= 0) return {};
    shape.push_back(found->second);
  }
  return shape;
}

namespace {

// The native stepper built from the archive's records on `threads` threads, the records read
// as `model` asks (mapped, or into memory; the rows the family lays out anew from or to a
// layout file); `note` says how.
std::unique_ptr<Stepper> StepperFromRecords(LoadedModel& model, const RuntimeRequest& request, NativeFactory factory,
                                            const KernelSet& kernels, const std::vector<int64_t>& cacheShape, int threads,
                                            PhaseClock& clock) {
  const RegroupedRows regrouped = model.layout               ? RegroupedRows::kInLayoutFile
                                  : !model.layoutDir.empty() ? RegroupedRows::kToLayoutFile
                                                             : RegroupedRows::kRewritten;
  std::string note;
  const CheckpointWeights weights = ArchiveWeights(*model.index, model.path, cacheShape, kernels, regrouped,
                                                   model.source.mapWeights, static_cast<int>(LoadThreads()), &note);
  clock.Lap("archive");
  std::unique_ptr<Stepper> stepper = factory(NativeContext{weights, request.fields, kernels, threads, request.kvBudgetBytes});
  clock.Lap("pack");
  model.weightsNote = note;
  return stepper;
}

}  // namespace

bool NativeFromArchive(LoadedModel& model, const RuntimeRequest& request, RuntimeChoice& choice, PhaseClock& clock) {
  if (request.runtime == "torchscript" || request.forceCheck || !model.index || !model.device.is_cpu()) return false;
  const NativeFactory factory = FindNativeStepper(request.architecture);
  if (!factory) return false;
  const KernelSet* kernels = nullptr;
  try {
    kernels = &SelectKernels(request.kernels);
  } catch (const std::exception&) {
    return false;  // the choice below reports it
  }
  const LoadCheckCache cache(request.checkCacheDir.empty() || model.digest.empty() ? "" : request.checkCacheDir,
                             CheckKey(request, kernels->name, model.digest, ToleranceFor(request)));
  std::optional<CheckVerdict> verdict = cache.Find();
  // Where "auto" must time the runtimes (the baseline family; its TorchScript run needs the
  // module), or a remembered timing chose TorchScript, the module is loaded.
  const std::optional<RuntimeVerdict> decision = DecisionUntimed(kernels->name, request, verdict);
  if (!decision || !decision->native) return false;
  std::string checkNote;
  try {
    if (verdict) {
      if (!verdict->agrees || verdict->cacheShape.empty()) return false;
      choice.stepper = StepperFromRecords(model, request, factory, *kernels, verdict->cacheShape, request.threads, clock);
      checkNote = RememberedCheckNote(*verdict, cache);
    } else {
      // The first load of this archive here: checked against the reference stored at export,
      // as a load of the module checks it.
      std::vector<int64_t> cacheShape = ArchiveCacheShape(*model.index, request.architecture);
      if (cacheShape.empty()) return false;
      const Probe probe(cacheShape[4]);
      const ProbeSteps expected = StoredReferenceOf(model, request, probe);
      if (expected.empty()) return false;
      clock.Lap("stored reference");
      choice.stepper = StepperFromRecords(model, request, factory, *kernels, cacheShape, CheckThreads(request), clock);
      verdict = CheckStepper(*choice.stepper, probe, expected, request, std::move(cacheShape), clock);
      checkNote = RememberCheck(*verdict, cache, true);
      if (!verdict->agrees) {
        choice.stepper.reset();
        model.weightsNote.clear();
        return false;
      }
    }
  } catch (const std::exception&) {
    choice.stepper.reset();
    model.weightsNote.clear();
    return false;
  }
  choice.runtime = "native";
  choice.kernels = kernels->name;
  choice.note = decision->reason + "; " + checkNote;
  return true;
}


#if TSN_NATIVE_ONLY
// The build without libtorch serves what NativeFromArchive builds, and nothing else: the
// caller (TorchEngine) then loads the checkpoint with the addon that has libtorch.
RuntimeChoice ChooseRuntime(LoadedModel& model, const RuntimeRequest& request) {
  RuntimeChoice choice;
  PhaseClock clock(choice.phases);
  if (NativeFromArchive(model, request, choice, clock)) return choice;
  throw CodedError(ErrorCode::kNeedsLibtorch,
                   "this checkpoint needs libtorch to load (neither a remembered verdict of the load-time check nor "
                   "reference logits stored at export let the native runtime serve it from its records)");
}
#endif

}  // namespace tsn
