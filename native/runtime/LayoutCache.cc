#include "runtime/LayoutCache.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "common/Sha1.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/MappedFile.h"
#include "common/Parallel.h"
#include "runtime/LoadCheckCache.h"

namespace tsn {

namespace {

constexpr const char* kMagic = "torchserve-node layout 1\n";
// The header's room; the runs start at this offset, page-aligned like the mapping.
constexpr size_t kHeaderBytes = 4096;
constexpr size_t kChunkBytes = size_t{16} << 20;

struct Header {
  std::string key, checkpoint, family;
  size_t payload = 0;
};

std::string Field(const std::string& text, const std::string& name) {
  const std::string prefix = "\n" + name + " ";
  const size_t at = text.find(prefix);
  if (at == std::string::npos) return "";
  const size_t begin = at + prefix.size();
  const size_t end = text.find('\n', begin);
  return end == std::string::npos ? "" : text.substr(begin, end - begin);
}

// The header of a layout file (false where it is not one).
bool ReadHeader(const std::string& path, Header& header) {
  std::ifstream in(path, std::ios::binary);
  std::string text(kHeaderBytes, '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(text.size()))) return false;
  if (text.compare(0, std::strlen(kMagic), kMagic) != 0) return false;
  header.key = Field(text, "key");
  header.checkpoint = Field(text, "checkpoint");
  header.family = Field(text, "family");
  const std::string payload = Field(text, "payload");
  if (header.key.empty() || payload.empty()) return false;
  try {
    header.payload = std::stoull(payload);
  } catch (...) {
    return false;
  }
  return true;
}

std::string HeaderText(const Header& header) {
  std::string text = std::string(kMagic) + "key " + header.key + "\ncheckpoint " + header.checkpoint + "\nfamily " +
                     header.family + "\npayload " + std::to_string(header.payload) + "\n";
  text.resize(kHeaderBytes, '\0');
  return text;
}

std::string Absolute(const std::string& path) {
  std::error_code ec;
  const auto absolute = std::filesystem::absolute(path, ec);
  return ec ? path : absolute.lexically_normal().string();
}

bool WriteAll(int fd, const uint8_t* data, size_t bytes) {
  while (bytes > 0) {
    const ssize_t wrote = ::write(fd, data, bytes);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) return false;
    data += wrote;
    bytes -= static_cast<size_t>(wrote);
  }
  return true;
}

// Temporary files of processes that are gone (killed while writing), and the layout files of
// the same checkpoint path and family under another key (another archive or build): removed.
// Returns the pid of a live process writing `file`, or 0.
pid_t Tidy(const std::string& dir, const std::string& file, const Header& mine) {
  pid_t writer = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string path = entry.path().string(), name = entry.path().filename().string();
    if (name.rfind("layout-", 0) != 0) continue;
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0) {
      // layout-<sha1>.bin.<pid>.tmp
      const size_t dot = name.rfind('.', name.size() - 5);
      const pid_t pid = dot == std::string::npos ? 0 : static_cast<pid_t>(std::atol(name.c_str() + dot + 1));
      const bool alive = pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
      if (!alive) {
        std::filesystem::remove(path, ec);
      } else if (path.compare(0, file.size(), file) == 0) {
        writer = pid;
      }
      continue;
    }
    if (path == file) continue;
    Header other;
    if (ReadHeader(path, other) && other.checkpoint == mine.checkpoint && other.family == mine.family) {
      std::filesystem::remove(path, ec);
    }
  }
  return writer;
}

}  // namespace

LayoutName LayoutFileName(const std::string& dir, const std::string& digest, const std::string& family) {
  LayoutName name;
  // The types the family lays out anew (FamilyRegroups, which the CPU's vendor, or
  // SERVICE_CPU_VENDOR, changes for Q4_K on the AVX-512 families): another set is another layout.
  std::string regrouped;
  const KernelSet& kernels = SelectKernels(family);
  for (int t = 0; t <= static_cast<int>(WeightType::Q5_K); ++t) {
    if (FamilyRegroups(kernels, static_cast<WeightType>(t))) regrouped += " " + std::to_string(t);
  }
  name.key = digest + " | " + AddonIdentity() + " | " + family + " | regroups" + regrouped;
  name.file = (std::filesystem::path(dir) / ("layout-" + Sha1Hex(name.key) + ".bin")).string();
  return name;
}

std::shared_ptr<LayoutSource> LayoutSource::Open(const std::string& dir, const std::string& digest,
                                                 const std::string& family, std::string* why, bool populate) {
  why->clear();
  const LayoutName name = LayoutFileName(dir, digest, family);
  std::error_code ec;
  if (!std::filesystem::exists(name.file, ec)) {
    *why = "no layout file yet for this archive, build and kernel family";
    return nullptr;
  }
  Header header;
  if (!ReadHeader(name.file, header) || header.key != name.key || header.family != family) {
    *why = "layout file " + name.file + " does not match this archive, build and kernel family";
    return nullptr;
  }
  std::string unmapped;
  std::shared_ptr<MappedFile> map = MappedFile::Open(name.file, &unmapped);
  if (!map) {
    *why = "layout file " + name.file + " not mapped: " + unmapped;
    return nullptr;
  }
  if (map->size() != kHeaderBytes + header.payload) {
    *why = "layout file " + name.file + " is " + std::to_string(map->size()) + " bytes where its header says " +
           std::to_string(kHeaderBytes + header.payload);
    return nullptr;
  }
  std::shared_ptr<LayoutSource> source(new LayoutSource());
  source->map_ = std::move(map);
  source->file_ = name.file;
  source->family_ = family;
  source->payload_ = header.payload;
  source->map_->Use(kHeaderBytes, header.payload);
  if (populate) source->Populate();
  // Touched now, so that an operator who prunes the directory by age keeps the files in use.
  std::filesystem::last_write_time(name.file, std::filesystem::file_time_type::clock::now(), ec);
  return source;
}

void LayoutSource::Populate() const {
  constexpr size_t kSlice = size_t{2} << 20;
  const MappedFile& mapped = *map_;
  SplitAcrossThreads(static_cast<int64_t>((payload_ + kSlice - 1) / kSlice), payload_, [&](int64_t begin, int64_t end) {
    const size_t from = static_cast<size_t>(begin) * kSlice;
    mapped.Populate(kHeaderBytes + from, std::min(static_cast<size_t>(end) * kSlice, payload_) - from);
  });
}

const uint8_t* LayoutSource::Take(size_t bytes, std::shared_ptr<const void>* owner) {
  if (!rejected_.empty() || cursor_ + bytes > payload_) {
    if (rejected_.empty()) rejected_ = "it holds fewer runs than this load makes";
    return nullptr;
  }
  const uint8_t* at = map_->data() + kHeaderBytes + cursor_;
  cursor_ += bytes;
  *owner = map_;
  return at;
}

void LayoutSource::Reject(const std::string& why) {
  if (rejected_.empty()) rejected_ = why;
}

bool LayoutSink::Defer(std::vector<const uint8_t*> sources, size_t groupBytes, RewriteRun rewrite,
                       std::shared_ptr<const void> owner) {
  bytes_ += sources.size() * groupBytes;
  runs_.push_back({std::move(sources), groupBytes, std::move(rewrite), std::move(owner)});
  return true;
}

std::unique_ptr<LayoutWriter> LayoutWriter::Start(const std::string& dir, const std::string& digest,
                                                  const std::string& checkpoint, const std::string& family,
                                                  LayoutSink&& sink, std::string* why) {
  why->clear();
  if (sink.bytes() == 0) return nullptr;
  const LayoutName name = LayoutFileName(dir, digest, family);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    *why = "cannot create " + dir + ": " + ec.message();
    return nullptr;
  }
  Header header{name.key, Absolute(checkpoint), family, sink.bytes()};
  if (const pid_t other = Tidy(dir, name.file, header)) {
    *why = "process " + std::to_string(other) + " is writing " + name.file;
    return nullptr;
  }
  struct statvfs fs {};
  if (statvfs(dir.c_str(), &fs) == 0) {
    const double total = static_cast<double>(fs.f_blocks) * fs.f_frsize;
    const double free = static_cast<double>(fs.f_bavail) * fs.f_frsize;
    const double keep = std::max(total * 0.10, double(size_t{1} << 30));
    if (free - static_cast<double>(kHeaderBytes + sink.bytes()) < keep) {
      char text[160];
      std::snprintf(text, sizeof text, "%.2f GB would leave less than %.2f GB free in %s (%.2f GB free)",
                    (kHeaderBytes + sink.bytes()) / 1e9, keep / 1e9, dir.c_str(), free / 1e9);
      *why = text;
      return nullptr;
    }
  }
  std::unique_ptr<LayoutWriter> writer(new LayoutWriter());
  writer->file_ = name.file;
  writer->temporary_ = name.file + "." + std::to_string(getpid()) + ".tmp";
  writer->bytes_ = sink.bytes();
  const int fd = ::open(writer->temporary_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    *why = "cannot write " + writer->temporary_ + ": " + std::strerror(errno);
    return nullptr;
  }
  std::promise<std::string> outcome;
  writer->done_ = outcome.get_future().share();
  LayoutWriter* self = writer.get();
  writer->thread_ = std::thread([self, fd, header, dir, digest, family, runs = std::move(sink.runs_),
                                 outcome = std::move(outcome)]() mutable {
    // Beside serving, and for later loads only: it yields the cores to the compute threads.
    setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 10);
    std::string error;
    const std::string head = HeaderText(header);
    bool ok = WriteAll(fd, reinterpret_cast<const uint8_t*>(head.data()), head.size());
    // Each run rewritten from its rows (in the checkpoint's mapping, or in memory) into a chunk,
    // a chunk written at a time.
    size_t largest = 0;
    for (const auto& run : runs) largest = std::max(largest, run.groupBytes);
    const size_t capacity = std::max(kChunkBytes, largest);
    std::unique_ptr<uint8_t, decltype(&std::free)> chunk(static_cast<uint8_t*>(std::aligned_alloc(64, (capacity + 63) / 64 * 64)),
                                                         std::free);
    ok = ok && chunk != nullptr;
    size_t filled = 0;
    for (size_t r = 0; ok && r < runs.size(); ++r) {
      for (const uint8_t* source : runs[r].sources) {
        if (filled + runs[r].groupBytes > capacity) {
          if (self->cancel_) {
            error = "cancelled (the model was disposed)";
            ok = false;
            break;
          }
          ok = WriteAll(fd, chunk.get(), filled);
          filled = 0;
          if (!ok) break;
        }
        runs[r].rewrite(source, chunk.get() + filled);
        filled += runs[r].groupBytes;
      }
    }
    ok = ok && WriteAll(fd, chunk.get(), filled);
    if (ok && fdatasync(fd) != 0) ok = false;
    if (!ok && error.empty()) error = "cannot write " + self->temporary_ + ": " + std::strerror(errno);
    ::close(fd);
    runs.clear();
    std::error_code ec;
    if (ok) {
      std::filesystem::rename(self->temporary_, self->file_, ec);
      if (ec) error = "cannot write " + self->file_ + ": " + ec.message();
    }
    if (!error.empty()) {
      std::filesystem::remove(self->temporary_, ec);
      if (!self->cancel_) std::fprintf(stderr, "torchserve-node: layout file not written: %s\n", error.c_str());
    } else if (!self->cancel_) {
      // Mapped here, off the inference thread, for it to take the runs from; its pages are
      // mapped in once they are (ModelCore::AdoptLayout), after the checkpoint's pages of the
      // same rows are given back, so the process never maps both (8B Q8_0: a 16.8 GB peak).
      std::string why;
      self->layout_ = LayoutSource::Open(dir, digest, family, &why, /*populate=*/false);
      if (!self->layout_) {
        error = why;
        std::fprintf(stderr, "torchserve-node: layout file written but not mapped: %s\n", why.c_str());
      }
    }
    outcome.set_value(error);
  });
  return writer;
}

LayoutWriter::~LayoutWriter() {
  cancel_ = true;
  if (thread_.joinable()) thread_.join();
}

}  // namespace tsn
