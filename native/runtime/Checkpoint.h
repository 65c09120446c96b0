// Reading a TorchScript checkpoint, with each way it can be wrong mapped to a coded error.
#pragma once

#include <torch/script.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tsn {

class LayoutSource;
struct ArchiveIndex;

// How a deferred module is loaded when it is needed (LoadModule): LoadCheckpoint's arguments.
struct ModuleSource {
  std::vector<std::string> extraFileNames;
  bool mapWeights = true;
  std::string kernelsCap = "auto";
};

struct LoadedModel {
  std::string path;  // the archive it was read from
  // Null while deferred (OpenCheckpoint): the native runtime may then be built from `index`
  // with no module at all (ChooseRuntime), else LoadModule loads it.
  std::shared_ptr<torch::jit::Module> module;
  std::shared_ptr<const ArchiveIndex> index;  // set by OpenCheckpoint
  ModuleSource source;
  c10::Device device{c10::kCPU};
  std::map<std::string, std::string> extraFiles;  // only those present in the archive
  // The load-time check's reference logits from the export (kLoadCheckFile), if it carries
  // them; kept apart from extraFiles (binary, and not for JS).
  std::string loadCheckReference;
  // How the weight records were read (on the CPU): in place from a mapping of the file, or
  // into memory and why.
  std::string weightsNote;
  // The kernels' layout of the rows the family rewrites, from a layout file an earlier load
  // wrote (runtime/LayoutCache.h), where one was found for this archive, build and family; those
  // rows' records are then mapped, not read. `layoutDir`: where to look, and write one (none
  // with mapping off, on a GPU, or where the archive's digest cannot be read).
  std::shared_ptr<LayoutSource> layout;
  std::string layoutDir;
  // A language model's archive digest (ArchiveDigest), taken once as it was opened: the key of
  // its layout file and of the load-time check's verdicts. Empty where it cannot be read.
  std::string digest;
};

// The extra file a language model's export writes the load-time check's reference logits to
// (python/torchserve_node/export_gpt.py: load_check_reference).
inline constexpr const char* kLoadCheckFile = "load_check.bin";

// Blocking; run it off the JS thread. For a language model the serving interface is
// checked too (forward, cache_shape, interface_version() == 1, config.json present). On the
// CPU with `mapWeights`, the weight records are used where they lie in a mapping of the file
// (common/MappedFile.h) where a read lease is granted, else read into memory; so are the
// quantized rows the kernel family `kernelsCap` gives lays out anew (FamilyRegroups), unless
// `layoutDir` holds that family's layout of them (runtime/LayoutCache.h).
LoadedModel LoadCheckpoint(const std::string& path, const std::string& deviceName,
                           const std::vector<std::string>& extraFileNames, bool languageModel,
                           bool mapWeights = true, const std::string& kernelsCap = "auto",
                           const std::string& layoutDir = "");

// Loads a deferred module (LoadCheckpoint, with the serving interface checked); nothing where
// it is loaded already. Blocking.
void LoadModule(LoadedModel& model);

constexpr int64_t kLanguageModelInterfaceVersion = 1;

// Bytes of the module's parameters and buffers, and of quantized matrices' weights held
// dequantized (SERVICE_TORCHSCRIPT_DEQUANTIZE), each storage counted once (a tied head is the
// embedding's storage).
int64_t ModuleWeightBytes(const torch::jit::Module& module);

// While alive, the module's 16-bit parameters are float32 (converted in place, each storage
// once, ties kept, each 16-bit tensor freed as its float32 one replaces it: at most the
// float32 weights are held, never both). The destructor converts them back, bit for bit.
// For running a forward in float32 without a second module.
class WidenedParameters {
 public:
  explicit WidenedParameters(torch::jit::Module& module);
  ~WidenedParameters();
  WidenedParameters(const WidenedParameters&) = delete;
  WidenedParameters& operator=(const WidenedParameters&) = delete;

 private:
  struct Slot {
    torch::jit::Module owner;
    std::string name;
    size_t group;  // slots of one storage share a group
  };
  std::vector<Slot> slots_;
  std::vector<c10::ScalarType> groupTypes_;  // each group's dtype before widening
  void Convert(bool widen);
};

// Replaces every parameter of the module and its submodules with an empty tensor of the same
// dtype and device: the weights are freed once nothing else holds them. Buffers stay, except
// quantized matrices' GGUF rows (`qweight`), which the native runtime holds itself.
void ReleaseParameters(torch::jit::Module& module);

}  // namespace tsn
