#include "runtime/ArchiveWeights.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

#include "common/MappedFile.h"
#include "common/Parallel.h"
#include "common/ReadFully.h"
#include "runtime/LayoutCache.h"
#include "runtime/LoadCheckCache.h"

namespace tsn {

namespace {

struct Record {
  uint64_t offset, bytes;
  bool populate;
};

WeightDtype FloatDtype(const std::string& dtype, bool* ok) {
  *ok = true;
  if (dtype == "float32") return WeightDtype::F32;
  if (dtype == "bfloat16") return WeightDtype::BF16;
  if (dtype == "float16") return WeightDtype::F16;
  *ok = false;
  return WeightDtype::F32;
}

bool Contiguous(const ArchiveTensor& t) {
  int64_t expected = 1;
  for (size_t d = t.shape.size(); d-- > 0;) {
    if (t.shape[d] != 1 && t.strides[d] != expected) return false;
    expected *= t.shape[d];
  }
  return true;
}

// `bytes` of the file from `offset` into fresh memory (2 MiB aligned, on huge pages where the
// kernel gives them: the rows are rewritten in place and then streamed every step).
std::shared_ptr<const void> ReadIntoMemory(int fd, uint64_t offset, uint64_t bytes, const std::string& path) {
  constexpr size_t kAlign = size_t{2} << 20;
  const size_t size = (std::max<uint64_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
  void* memory = std::aligned_alloc(kAlign, size);
  if (memory == nullptr) throw ArchiveError("out of memory reading " + path);
  std::shared_ptr<const void> owner(memory, [](const void* p) { std::free(const_cast<void*>(p)); });
  AdviseHugePages(memory, size);
  if (ReadFully(fd, memory, bytes, offset) < bytes) {
    throw ArchiveError("Checkpoint " + path + " ended before its last weight record (truncated while loading?)" +
                       (errno != 0 ? std::string(": ") + std::strerror(errno) : ""));
  }
  return owner;
}

// The bytes of one tensor: in the mapping, or read into memory, each record once however many
// tensors view it (a tied head).
class Records {
 public:
  Records(const std::string& path, std::shared_ptr<MappedFile> file) : path_(path), file_(std::move(file)) {
    fd_ = file_ ? -1 : open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (!file_ && fd_ < 0) throw ArchiveError("Checkpoint could not be opened: " + path);
  }
  ~Records() {
    if (fd_ >= 0) close(fd_);
  }
  Records(const Records&) = delete;
  Records& operator=(const Records&) = delete;

  // mapped: in place in the mapping (false: read into memory); populate: paged in at load.
  WeightView View(const ArchiveTensor& t, WeightDtype dtype, size_t elementBytes, bool mapped, bool populate) {
    WeightView view;
    view.dtype = dtype;
    view.shape = t.shape;
    const uint64_t start = static_cast<uint64_t>(t.storageOffset) * elementBytes;
    if (mapped && file_) {
      view.data = file_->data() + t.fileOffset + start;
      view.owner = std::shared_ptr<const void>(file_, view.data);
      if (used_.insert(t.fileOffset).second) {
        file_->Use(t.fileOffset, t.storageBytes);
        mapped_.push_back({t.fileOffset, t.storageBytes, populate});
      }
      return view;
    }
    auto it = read_.find(t.fileOffset);
    if (it == read_.end()) {
      if (fd_ < 0) fd_ = open(path_.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd_ < 0) throw ArchiveError("Checkpoint could not be opened: " + path_);
      it = read_.emplace(t.fileOffset, ReadIntoMemory(fd_, t.fileOffset, t.storageBytes, path_)).first;
      readBytes_ += t.storageBytes;
    }
    view.data = static_cast<const uint8_t*>(it->second.get()) + start;
    view.owner = std::shared_ptr<const void>(it->second, view.data);
    return view;
  }

  // Pages in the mapped records to be read at load, the largest first, on up to `threads` threads.
  void Populate(int threads) {
    std::vector<Record> records;
    for (const Record& r : mapped_) {
      if (r.populate) records.push_back(r);
    }
    LargestFirst(records, threads, [](const Record& r) { return r.bytes; },
                 [&](const Record& r) { file_->Populate(r.offset, r.bytes); });
  }

  bool mapping() const { return file_ != nullptr; }
  uint64_t mappedBytes() const {
    uint64_t bytes = 0;
    for (const Record& r : mapped_) bytes += r.bytes;
    return bytes;
  }
  uint64_t readBytes() const { return readBytes_; }

 private:
  std::string path_;
  std::shared_ptr<MappedFile> file_;
  int fd_ = -1;
  std::set<uint64_t> used_;
  std::vector<Record> mapped_;
  std::map<uint64_t, std::shared_ptr<const void>> read_;
  uint64_t readBytes_ = 0;
};

}  // namespace

CheckpointWeights ArchiveWeights(const ArchiveIndex& index, const std::string& path, std::vector<int64_t> cacheShape,
                                 const KernelSet& family, RegroupedRows regrouped, bool mapWeights, int threads,
                                 std::string* note) {
  std::string why = "mapping off";
  Records records(path, mapWeights ? MappedFile::Open(path, &why) : nullptr);
  CheckpointWeights weights;
  weights.cacheShape = std::move(cacheShape);
  for (const auto& [name, tensor] : index.tensors) {
    bool isFloat = false;
    const WeightDtype dtype = FloatDtype(tensor.dtype, &isFloat);
    if (!isFloat) continue;
    if (!Contiguous(tensor)) throw ArchiveError(name + " is a view that is not contiguous");
    // Packing copies float weights: read from the mapping, never paged in twice.
    weights.tensors[name] = records.View(tensor, dtype, DtypeSize(tensor.dtype), true, true);
  }
  for (const auto& [key, qtype] : index.strings) {
    constexpr const char* kSuffix = ".qtype";
    const size_t cut = key.size() >= 6 ? key.size() - 6 : std::string::npos;
    if (cut == std::string::npos || key.compare(cut, 6, kSuffix) != 0) continue;
    const std::string module = key.substr(0, cut);
    const auto rows = index.tensors.find(module + ".qweight");
    if (rows == index.tensors.end()) continue;
    auto width = index.ints.find(module + ".in_features");
    if (width == index.ints.end()) width = index.ints.find(module + ".embedding_dim");
    if (width == index.ints.end()) throw ArchiveError(module + ": a quantized module without in_features or embedding_dim");
    const ArchiveTensor& t = rows->second;
    if (t.dtype != "uint8" || t.shape.size() != 2 || !Contiguous(t)) {
      throw ArchiveError(module + ": qweight is not uint8 [rows, row bytes]");
    }
    const bool laidOutAnew = FamilyRegroups(family, WeightTypeOf(qtype));
    const bool aligned = (t.fileOffset + static_cast<uint64_t>(t.storageOffset)) % 64 == 0;
    const bool mapped = aligned && !(laidOutAnew && regrouped == RegroupedRows::kRewritten);
    const bool populate = !(laidOutAnew && regrouped == RegroupedRows::kInLayoutFile);
    weights.quantized[module + ".weight"] = {records.View(t, WeightDtype::U8, 1, mapped, populate), qtype, width->second};
  }
  if (records.mapping()) records.Populate(threads);
  if (note != nullptr) {
    const auto gb = [](uint64_t bytes) {
      char text[32];
      std::snprintf(text, sizeof text, "%.2f GB", static_cast<double>(bytes) / 1e9);
      return std::string(text);
    };
    *note = "weights read from the archive without the TorchScript module: " +
            (!records.mapping() ? gb(records.readBytes()) + " read into memory (" + why + ")"
                                : gb(records.mappedBytes()) + " in place (mapped, under a read lease)" +
                                      (records.readBytes() > 0 ? ", " + gb(records.readBytes()) + " read into memory" : ""));
  }
  return weights;
}

const KernelSet& FamilyForCap(const std::string& cap) {
  try {
    return SelectKernels(cap);
  } catch (...) {
    return SelectKernels("auto");
  }
}

LoadedModel OpenCheckpoint(const std::string& path, const std::vector<std::string>& extraFileNames, bool mapWeights,
                           const std::string& kernelsCap, const std::string& layoutDir) {
  LoadedModel loaded;
  loaded.path = path;
  loaded.source = {extraFileNames, mapWeights, kernelsCap};
  auto index = std::make_shared<ArchiveIndex>(ReadArchiveIndex(path));
  std::vector<std::string> names = extraFileNames;
  names.push_back("config.json");
  names.push_back(kLoadCheckFile);
  for (const std::string& name : names) {
    const auto found = index->extraFiles.find(name);
    if (found == index->extraFiles.end()) continue;
    std::string content = ReadArchiveBytes(path, found->second.first, found->second.second);
    if (name == kLoadCheckFile) {
      loaded.loadCheckReference = std::move(content);
    } else {
      loaded.extraFiles[name] = std::move(content);
    }
  }
  if (!loaded.extraFiles.count("config.json")) throw ArchiveError("no config.json");
  loaded.index = std::move(index);
  loaded.digest = ArchiveDigest(path);
  if (mapWeights && !layoutDir.empty() && !loaded.digest.empty()) {
    loaded.layoutDir = layoutDir;
    std::string why;
    loaded.layout = LayoutSource::Open(loaded.layoutDir, loaded.digest, FamilyForCap(kernelsCap).name, &why);
  }
  return loaded;
}

}  // namespace tsn
