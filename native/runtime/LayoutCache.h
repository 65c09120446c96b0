// The native kernels' own layout of the quantized rows they rewrite at load (FamilyRegroups:
// Q8_0, Q4_0 and Q5_0 on every SIMD family, Q4_K on avx2 and Intel's AVX-512), kept in a file
// so that a later load maps it where the rows would otherwise be read into fresh memory and rewritten (an 8B Q8_0
// load: 2.2-3.5x a cached read of the checkpoint that way, docs/benchmarks.md section 11).
//
// One file per checkpoint and kernel family in a directory the operator names
// (SERVICE_LAYOUT_CACHE), keyed like the load-time check's verdicts: the archive's digest (its
// zip central directory: every entry's CRC-32 and size), the addon build, the family and the
// types it lays out anew (FamilyRegroups: Q4_K on the AVX-512 families depends on the CPU's
// vendor, which SERVICE_CPU_VENDOR can set). The
// first load maps those rows too and serves them as they lie (every family's products read the
// GGUF rows as well); a thread of its own rewrites them into the file once the runtime is
// configured, and the inference thread then takes the file's runs in place of the rows between
// two steps (ModelCore::AdoptLayout). A later load maps the file under a read lease
// (common/MappedFile.h). So no load reads those rows into fresh memory: an 8B Q8_0 first load
// from the page cache spent 14 s of its 18 s doing that. Each matrix's first, middle and last run is
// rewritten from the checkpoint and compared with the file's before the file's rows are used, so
// a file of another layout is set aside, never served. The rest is trusted as the remembered
// verdicts are: the file is written under a temporary name, synced, then renamed, and a hash of
// it all would cost a pass over it at every load (the read it replaces). A file that cannot be read,
// written or kept (the disk short of space) only means the rows are rewritten at load, as
// without the cache.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/Kernels.h"

namespace tsn {

class MappedFile;

// The layout file's name in `dir` for the archive of `digest` (ArchiveDigest, taken once at
// load, so that the file is named for the archive that was read) and `family`, and the key its
// header holds. Reads nothing.
struct LayoutName {
  std::string file;
  std::string key;
};
LayoutName LayoutFileName(const std::string& dir, const std::string& digest, const std::string& family);

// A layout file mapped for reading: the rewritten runs in the order the stepper makes them.
class LayoutSource final : public RegroupCache {
 public:
  // The file for (digest, family) in dir, mapped and its header checked, and its pages mapped
  // in unless `populate` is false; null with `why` set where there is none yet or it does not
  // match.
  static std::shared_ptr<LayoutSource> Open(const std::string& dir, const std::string& digest,
                                            const std::string& family, std::string* why, bool populate = true);
  // Maps in the file's pages (from the page cache, or the disk) on the load's threads, 2 MiB at
  // a time, so that the steps do not fault them in a page at a time.
  void Populate() const;

  const uint8_t* Take(size_t bytes, std::shared_ptr<const void>* owner) override;
  void Reject(const std::string& why) override;

  const std::string& file() const { return file_; }
  const std::string& family() const { return family_; }
  // Why runs were refused ("" none), and whether every run was taken and none refused: the
  // stepper reads all of the file's runs (else the note says so).
  const std::string& rejected() const { return rejected_; }
  bool whole() const { return rejected_.empty() && cursor_ == payload_; }

 private:
  LayoutSource() = default;
  std::shared_ptr<MappedFile> map_;
  std::string file_, family_, rejected_;
  size_t payload_ = 0, cursor_ = 0;
};

// The runs a first load leaves for the layout file (RegroupCache::Defer), in order, with what
// keeps their rows alive: the stepper serves those rows as they lie until the file is written
// and taken back (ModelCore::AdoptLayout).
class LayoutSink final : public RegroupCache {
 public:
  const uint8_t* Take(size_t, std::shared_ptr<const void>*) override { return nullptr; }
  bool Defer(std::vector<const uint8_t*> sources, size_t groupBytes, RewriteRun rewrite,
             std::shared_ptr<const void> owner) override;
  void Reject(const std::string&) override {}
  size_t bytes() const { return bytes_; }

 private:
  friend class LayoutWriter;
  struct Run {
    std::vector<const uint8_t*> sources;
    size_t groupBytes;
    RewriteRun rewrite;
    std::shared_ptr<const void> owner;
  };
  std::vector<Run> runs_;
  size_t bytes_ = 0;
};

// Writes a sink's runs to the layout file on a thread of its own, each rewritten from its rows
// as it goes: to a temporary name beside it, synced, then renamed over it, so a reader never maps
// half a file; then maps the file for this process to take its runs from (layout()). It replaces
// the layout file of the same checkpoint path and family (another archive or build), and leaves
// the file unwritten where the disk would keep less than 10% (and 1 GiB) free.
class LayoutWriter {
 public:
  // Starts the write of the layout for the archive of `digest` read from `checkpoint`; null with
  // `why` set where it is not started (nothing to write, a directory that cannot be made, too
  // little space, another process writing the same file).
  static std::unique_ptr<LayoutWriter> Start(const std::string& dir, const std::string& digest,
                                             const std::string& checkpoint, const std::string& family,
                                             LayoutSink&& sink, std::string* why);
  ~LayoutWriter();  // cancels a write in progress (its temporary file is removed) and joins
  LayoutWriter(const LayoutWriter&) = delete;
  LayoutWriter& operator=(const LayoutWriter&) = delete;

  const std::string& file() const { return file_; }
  size_t bytes() const { return bytes_; }
  // The write's outcome ("" written, else why not), once it ends; any thread.
  std::shared_future<std::string> done() const { return done_; }
  // Once done() is ready: the file written and mapped (null where the write or the mapping
  // failed, or was cancelled).
  std::shared_ptr<LayoutSource> layout() const { return layout_; }
  void Cancel() { cancel_ = true; }
  bool cancelled() const { return cancel_; }

 private:
  LayoutWriter() = default;
  std::string file_, temporary_;
  size_t bytes_ = 0;
  std::atomic<bool> cancel_{false};
  std::shared_future<std::string> done_;
  std::shared_ptr<LayoutSource> layout_;  // written by the thread before done_ is set
  std::thread thread_;
};

}  // namespace tsn
