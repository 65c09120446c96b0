#include "runtime/Checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <unordered_map>
#include <immintrin.h>
#include <map>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>

#include "common/Device.h"
#include "common/MappedFile.h"
#include "common/Parallel.h"
#include "common/ReadFully.h"
#include "kernels/Kernels.h"
#include "runtime/ArchiveWeights.h"
#include "runtime/LayoutCache.h"
#include "runtime/LoadCheckCache.h"
#include "common/ErrorCodes.h"
#include "common/Errors.h"

namespace tsn {

namespace {

// torch::jit::load reads the archive on one thread, and every weight record into fresh memory:
// the page faults of those blocks and the copy from the page cache were 81% of loading a
// 1.3 GB Q8_0 checkpoint (38% and 43%; the archive's parsing the rest). This reader hands
// torch everything but the large tensor records, which it notes (the block torch allocated,
// and where in the file); FillDeferred then reads them into those blocks from several threads.
// On the CPU a record's block is the tensor's storage as it stays; nothing reads it before
// the load returns. (On a GPU the unpickler copies each record to the device at once, so
// there every read happens in place.)
class DeferringReader final : public caffe2::serialize::ReadAdapterInterface {
 public:
  DeferringReader(const std::string& path, std::set<uint64_t> deferrable)
      : fd_(open(path.c_str(), O_RDONLY | O_CLOEXEC)), deferrable_(std::move(deferrable)) {
    struct stat st {};
    if (fd_ < 0 || fstat(fd_, &st) != 0) {
      if (fd_ >= 0) close(fd_);
      throw CodedError(ErrorCode::kCheckpointNotFound, "Checkpoint could not be opened: " + path);
    }
    size_ = static_cast<size_t>(st.st_size);
  }
  ~DeferringReader() override { close(fd_); }
  DeferringReader(const DeferringReader&) = delete;
  DeferringReader& operator=(const DeferringReader&) = delete;

  size_t size() const override { return size_; }

  size_t read(uint64_t pos, void* buf, size_t n, const char* what = "") const override {
    if (n >= kDeferBytes && deferrable_.count(pos) && pos + n <= size_) {
      deferred_.push_back({pos, static_cast<char*>(buf), n});
      return n;
    }
    return ReadAt(pos, static_cast<char*>(buf), n);
  }

  // Points each deferred record's tensor at the record where it lies in `file` (a mapping of
  // the same file), in place of the block torch allocated for it, which was never written and
  // is freed; then maps in those pages on up to `threads` threads. A record whose block no
  // tensor of the module holds (or not 64-byte aligned in the file, as the kernels expect) stays
  // deferred for FillDeferred, as do the rows of a quantized matrix `family` rewrites into a
  // layout of its own (FamilyRegroups: a rewrite of mapped rows would cost a fresh page each),
  // unless `layout` says a layout file holds them or will (runtime/LayoutCache.h): then they are
  // mapped too, and mapped in only where the file is yet to be written (they are served as they
  // lie until then, and the file is written from them). Returns the bytes pointed at the mapping;
  // `laidOut`: the records left for FillDeferred because the family rewrites them.
  enum class Layout { kNone, kToWrite, kInFile };
  size_t PointAtMapping(const torch::jit::Module& module, const std::shared_ptr<MappedFile>& file,
                        const KernelSet& family, Layout layout, int threads, size_t* laidOut) {
    std::set<const void*> rewritten;
    for (const auto& sub : module.modules()) {
      if (!sub.hasattr("qtype") || !sub.hasattr("qweight")) continue;
      const c10::IValue qtype = sub.attr("qtype"), rows = sub.attr("qweight");
      if (!qtype.isString() || !rows.isTensor() || !rows.toTensor().has_storage()) continue;
      if (FamilyRegroups(family, WeightTypeOf(qtype.toStringRef()))) rewritten.insert(rows.toTensor().storage().data());
    }
    std::unordered_map<const void*, c10::StorageImpl*> storages;
    std::function<void(const c10::IValue&)> visit = [&](const c10::IValue& value) {
      if (value.isTensor()) {
        const at::Tensor& tensor = value.toTensor();
        if (tensor.defined() && tensor.has_storage() && tensor.is_cpu()) {
          storages.emplace(tensor.storage().data(), tensor.storage().unsafeGetStorageImpl());
        }
      } else if (value.isList()) {
        for (const c10::IValue& item : value.toListRef()) visit(item);
      } else if (value.isTuple()) {
        for (const c10::IValue& item : value.toTupleRef().elements()) visit(item);
      } else if (value.isGenericDict()) {
        for (const auto& entry : value.toGenericDict()) visit(entry.value());
      }
    };
    for (const auto& attribute : module.named_attributes(/*recurse=*/true)) visit(attribute.value);
    std::vector<Deferred> mapped, rest;
    size_t bytes = 0;
    for (const Deferred& d : deferred_) {
      const auto found = storages.find(d.buf);
      // With a layout file they are mapped, not populated: nothing reads them but the layout's
      // check (a few runs a matrix).
      const bool inLayout = layout == Layout::kInFile && rewritten.count(d.buf) > 0;
      const bool laidOutAnew = layout == Layout::kNone && rewritten.count(d.buf) > 0;
      if (laidOutAnew || found == storages.end() || found->second->nbytes() != d.n || d.pos % 64 != 0 ||
          d.pos + d.n > file->size()) {
        if (laidOutAnew) ++*laidOut;
        rest.push_back(d);
        continue;
      }
      // The DataPtr's context holds the mapping alive; the last tensor of the file unmaps it.
      auto* owner = new std::shared_ptr<MappedFile>(file);
      found->second->set_data_ptr_noswap(c10::DataPtr(file->data() + d.pos, owner,
                                                      [](void* ctx) { delete static_cast<std::shared_ptr<MappedFile>*>(ctx); },
                                                      c10::Device(c10::kCPU)));
      file->Use(d.pos, d.n);
      if (!inLayout) mapped.push_back(d);
      bytes += d.n;
    }
    deferred_ = std::move(rest);
    LargestFirst(mapped, threads, BytesOf, [&](const Deferred& d) { file->Populate(d.pos, d.n); });
    return bytes;
  }

  // Reads every deferred record into its block, the largest first, on up to `threads`
  // threads; false if the file ended early (truncated since its records were listed).
  bool FillDeferred(int threads) {
    std::atomic<bool> complete{true};
    LargestFirst(deferred_, threads, BytesOf, [&](const Deferred& d) {
      // Huge pages before the first write: a 1.3 GB Q8_0 archive's fresh 4 KiB pages cost
      // more to fault in than to copy (archive 0.73 -> 0.37-0.44 s), and the weights, read
      // in place by the native runtime, then stream through fewer TLB entries.
      AdviseHugePages(d.buf, d.n);
      if (ReadAt(d.pos, d.buf, d.n) != d.n) complete = false;
    });
    deferred_.clear();
    return complete;
  }

  // Records this size and larger are deferred: a weight matrix, not a pickle or code file.
  static constexpr size_t kDeferBytes = size_t{1} << 20;

 private:
  struct Deferred {
    uint64_t pos;
    char* buf;
    size_t n;
  };
  static size_t BytesOf(const Deferred& d) { return d.n; }

  size_t ReadAt(uint64_t pos, char* buf, size_t n) const { return ReadFully(fd_, buf, n, pos); }

  int fd_;
  size_t size_ = 0;
  std::set<uint64_t> deferrable_;
  mutable std::vector<Deferred> deferred_;
};

// Where each tensor record's bytes start in the archive (records named data/N, the module's
// state; constants and code are read as torch reads them).
std::set<uint64_t> TensorRecordOffsets(const std::string& path) {
  caffe2::serialize::PyTorchStreamReader reader(path);
  std::set<uint64_t> offsets;
  for (const std::string& name : reader.getAllRecords()) {
    const size_t slash = name.rfind('/');
    if (slash == std::string::npos || slash < 4 || name.compare(slash - 4, 5, "data/") != 0) continue;
    if (slash > 4 && name[slash - 5] != '/') continue;  // .../data/N, not .../somedata/N
    const std::string index = name.substr(slash + 1);
    if (index.empty() || index.find_first_not_of("0123456789") != std::string::npos) continue;
    offsets.insert(reader.getRecordOffset(name));
  }
  return offsets;
}

void RequireMethod(const torch::jit::Module& module, const std::string& name, const std::string& path) {
  if (!module.find_method(name)) {
    throw CodedError(ErrorCode::kCheckpointInterface,
                     "Checkpoint " + path + " has no method `" + name +
                         "`: it does not implement the serving interface (see docs/checkpoint.md).");
  }
}

}  // namespace

LoadedModel LoadCheckpoint(const std::string& path, const std::string& deviceName,
                           const std::vector<std::string>& extraFileNames, bool languageModel, bool mapWeights,
                           const std::string& kernelsCap, const std::string& layoutDir) {
  LoadedModel loaded;
  loaded.path = path;
  loaded.device = ResolveDevice(deviceName);
  // Layout files are mapped too: with mapping off (SERVICE_MMAP=off) none is read or written.
  if (mapWeights && loaded.device.is_cpu()) loaded.layoutDir = layoutDir;

  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw CodedError(ErrorCode::kCheckpointNotFound, "Checkpoint not found: " + path);
  }

  // torch fills only the names present in the archive; a sentinel tells them apart.
  static const std::string kAbsent("\x01<absent>");
  torch::jit::ExtraFilesMap extra;
  for (const auto& name : extraFileNames) extra[name] = kAbsent;
  if (languageModel) {
    extra["config.json"] = kAbsent;
    extra[kLoadCheckFile] = kAbsent;
  }
  try {
    if (loaded.device.is_cpu()) {
      // The lease first, so that the file cannot change between the reads below and the mapping.
      std::string why;
      std::shared_ptr<MappedFile> file = mapWeights ? MappedFile::Open(path, &why) : nullptr;
      auto reader = std::make_shared<DeferringReader>(path, TensorRecordOffsets(path));
      loaded.module = std::make_shared<torch::jit::Module>(torch::jit::load(reader, loaded.device, extra));
      size_t laidOut = 0;
      const KernelSet& family = FamilyForCap(kernelsCap);
      if (languageModel) loaded.digest = ArchiveDigest(path);
      if (loaded.digest.empty()) loaded.layoutDir.clear();
      std::string noLayout;  // why there is none (the first load writes one, ModelCore::OwnWeights)
      // Only where the records can be mapped: read into memory, the rows cost the same whether
      // rewritten or replaced by the file's.
      if (file && !loaded.layoutDir.empty()) {
        loaded.layout = LayoutSource::Open(loaded.layoutDir, loaded.digest, family.name, &noLayout);
      }
      const DeferringReader::Layout layout = loaded.layout ? DeferringReader::Layout::kInFile
                                             : loaded.layoutDir.empty() ? DeferringReader::Layout::kNone
                                                                        : DeferringReader::Layout::kToWrite;
      const size_t mapped = file ? reader->PointAtMapping(*loaded.module, file, family, layout,
                                                          static_cast<int>(LoadThreads()), &laidOut)
                                 : 0;
      const std::string anew = "the quantized rows the " + std::string(family.name) + " kernels lay out anew read into memory";
      if (mapped > 0) {
        loaded.weightsNote = "weights read in place from the checkpoint (mapped, under a read lease)" +
                             (laidOut > 0 ? "; " + anew : std::string());
      } else if (laidOut > 0) {
        loaded.weightsNote = "weights read into memory (" + anew + ")";
      } else {
        loaded.weightsNote = "weights read into memory (" +
                             (!mapWeights ? std::string("mapping off") : !file ? why : std::string("no record of 1 MiB or more")) + ")";
      }
      file.reset();  // the tensors that point into it hold it now
      if (!reader->FillDeferred(static_cast<int>(LoadThreads()))) {
        throw CodedError(ErrorCode::kCheckpointInvalid,
                         "Checkpoint " + path + " ended before its last weight record (truncated while loading?)");
      }
    } else {
      loaded.module = std::make_shared<torch::jit::Module>(torch::jit::load(path, loaded.device, extra));
    }
  } catch (const c10::Error& e) {
    throw CodedError(ErrorCode::kCheckpointInvalid, "Checkpoint " + path +
                                                   " is not a readable TorchScript archive "
                                                   "(corrupt or truncated?): " +
                                                   e.what_without_backtrace());
  }
  loaded.module->eval();
  for (auto& [name, content] : extra) {
    if (content == kAbsent) continue;
    if (languageModel && name == kLoadCheckFile) {
      loaded.loadCheckReference = std::move(content);
    } else {
      loaded.extraFiles[name] = std::move(content);
    }
  }

  if (languageModel) {
    RequireMethod(*loaded.module, "forward", path);
    RequireMethod(*loaded.module, "cache_shape", path);
    RequireMethod(*loaded.module, "interface_version", path);
    int64_t version = -1;
    try {
      version = loaded.module->run_method("interface_version").toInt();
    } catch (const c10::Error& e) {
      throw CodedError(ErrorCode::kCheckpointInterface,
                       std::string("interface_version() failed: ") + e.what_without_backtrace());
    }
    if (version != kLanguageModelInterfaceVersion) {
      throw CodedError(ErrorCode::kCheckpointInterface,
                       "Checkpoint " + path + " implements serving interface version " +
                           std::to_string(version) + "; this server supports version " +
                           std::to_string(kLanguageModelInterfaceVersion) + ".");
    }
    if (!loaded.extraFiles.count("config.json")) {
      throw CodedError(ErrorCode::kCheckpointInterface,
                       "Checkpoint " + path + " carries no config.json extra file (see docs/checkpoint.md).");
    }
  }
  return loaded;
}

void LoadModule(LoadedModel& model) {
  if (model.module) return;
  LoadedModel full = LoadCheckpoint(model.path, "cpu", model.source.extraFileNames, true, model.source.mapWeights,
                                    model.source.kernelsCap, model.layoutDir);
  model.module = std::move(full.module);
  model.weightsNote = std::move(full.weightsNote);
  // The module's records were mapped for the layout LoadCheckpoint found: that one serves.
  model.layout = std::move(full.layout);
  model.layoutDir = std::move(full.layoutDir);
}

int64_t ModuleWeightBytes(const torch::jit::Module& module) {
  std::set<const void*> seen;
  int64_t bytes = 0;
  const auto count = [&](const at::Tensor& tensor) {
    if (!tensor.defined() || !tensor.has_storage()) return;
    const c10::Storage& storage = tensor.storage();
    if (seen.insert(storage.unsafeGetStorageImpl()).second) bytes += static_cast<int64_t>(storage.nbytes());
  };
  for (const auto& p : module.named_parameters(true)) count(p.value);
  for (const auto& b : module.named_buffers(true)) count(b.value);
  // A quantized matrix's weight dequantized once (quant.py's `dense`, a plain attribute).
  for (const auto& sub : module.modules()) {
    if (sub.hasattr("qweight") && sub.hasattr("dense") && sub.attr("dense").isTensor()) count(sub.attr("dense").toTensor());
  }
  return bytes;
}

void ReleaseParameters(torch::jit::Module& module) {
  for (const auto& sub : module.modules()) {
    std::vector<std::pair<std::string, at::TensorOptions>> names;
    for (const auto& p : sub.named_parameters(false)) names.emplace_back(p.name, p.value.options());
    // A quantized matrix's GGUF rows (quant.py's qweight buffer): the native runtime reads them
    // in place and keeps its own reference, so the module lets go of them too.
    for (const auto& b : sub.named_buffers(false)) {
      if (b.name == "qweight") names.emplace_back(b.name, b.value.options());
    }
    torch::jit::Module handle = sub;  // setattr is not const; the handle is the same object
    for (const auto& [name, options] : names) handle.setattr(name, at::empty({0}, options));
  }
}

namespace {

// F16C's conversions (round to nearest even), 8 values at a time; the tail in software.
__attribute__((target("f16c,avx"))) void WidenHalvesF16c(const uint16_t* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  }
  for (; i < n; ++i) out[i] = HalfToFloat(in[i]);
}

__attribute__((target("f16c,avx"))) void NarrowHalvesF16c(const float* in, uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) out[i] = FloatToHalf(in[i]);
}

bool HasF16c() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
}

// An uninitialised tensor; a large one advised onto huge pages before it is written (its
// 4 KiB page faults cost more than the conversion).
at::Tensor Fresh(at::IntArrayRef sizes, const at::TensorOptions& options) {
  at::Tensor out = at::empty(sizes, options);
  const size_t bytes = out.nbytes();
  if (bytes >= (size_t{8} << 20)) AdviseHugePages(out.data_ptr(), bytes);
  return out;
}

// torch 1.13 widens bf16 at ~10 ns an element on one thread (measured); these loops run at
// memory speed, a large tensor on several threads.
at::Tensor Widen(const at::Tensor& half) {
  const at::Tensor source = half.contiguous();
  at::Tensor out = Fresh(source.sizes(), source.options().dtype(at::kFloat));
  const auto* in = reinterpret_cast<const uint16_t*>(source.data_ptr());
  float* dst = out.data_ptr<float>();
  const bool bf16 = source.scalar_type() == at::kBFloat16;
  const bool f16c = HasF16c();
  SplitAcrossThreads(source.numel(), out.nbytes(), [&](int64_t begin, int64_t end) {
    if (bf16) {
      auto* bits = reinterpret_cast<uint32_t*>(dst);
      for (int64_t i = begin; i < end; ++i) bits[i] = static_cast<uint32_t>(in[i]) << 16;
    } else if (f16c) {
      WidenHalvesF16c(in + begin, dst + begin, end - begin);
    } else {
      for (int64_t i = begin; i < end; ++i) dst[i] = HalfToFloat(in[i]);
    }
  });
  return out;
}

// Back to 16 bits. The values were widened from them, so every conversion is exact (bf16: the
// low half of each float is zero).
at::Tensor Narrow(const at::Tensor& wide, c10::ScalarType type) {
  at::Tensor out = Fresh(wide.sizes(), wide.options().dtype(type));
  const float* in = wide.data_ptr<float>();
  auto* dst = reinterpret_cast<uint16_t*>(out.data_ptr());
  const bool f16c = HasF16c();
  SplitAcrossThreads(wide.numel(), out.nbytes(), [&](int64_t begin, int64_t end) {
    if (type == at::kBFloat16) {
      const auto* bits = reinterpret_cast<const uint32_t*>(in);
      for (int64_t i = begin; i < end; ++i) dst[i] = static_cast<uint16_t>(bits[i] >> 16);
    } else if (f16c) {
      NarrowHalvesF16c(in + begin, dst + begin, end - begin);
    } else {
      for (int64_t i = begin; i < end; ++i) dst[i] = FloatToHalf(in[i]);
    }
  });
  return out;
}

}  // namespace

WidenedParameters::WidenedParameters(torch::jit::Module& module) {
  std::map<const void*, size_t> groups;
  for (const auto& sub : module.modules()) {
    for (const auto& p : sub.named_parameters(false)) {
      const c10::ScalarType type = p.value.scalar_type();
      if ((type != at::kBFloat16 && type != at::kHalf) || !p.value.is_cpu()) continue;
      const void* storage = p.value.storage().unsafeGetStorageImpl();
      auto [it, fresh] = groups.emplace(storage, groupTypes_.size());
      if (fresh) groupTypes_.push_back(type);
      slots_.push_back({sub, p.name, it->second});
    }
  }
  Convert(true);
}

WidenedParameters::~WidenedParameters() {
  try {
    Convert(false);
  } catch (...) {
    // Out of memory converting back: the module stays float32, which its forward still runs.
  }
}

void WidenedParameters::Convert(bool widen) {
  // Group by group, so each old tensor is freed (its last slot replaced) before the next is made.
  for (size_t group = 0; group < groupTypes_.size(); ++group) {
    at::Tensor converted;
    for (auto& slot : slots_) {
      if (slot.group != group) continue;
      if (!converted.defined()) {
        const at::Tensor current = slot.owner.attr(slot.name).toTensor();
        converted = widen ? Widen(current) : Narrow(current, groupTypes_[group]);
      }
      slot.owner.setattr(slot.name, converted);
    }
  }
}

}  // namespace tsn
