// A checkpoint's weight records read where they lie: the file mapped into memory (privately)
// under a read lease, so that a write to it while it is served never reaches the weights.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace tsn {

// The whole file mapped, under a read lease (fcntl F_SETLEASE). Tensors point into the mapping
// and each holds it alive; the last to go unmaps it and gives the lease back.
//
// Why a lease: a mapping reads the file's pages as they are now, so a file truncated or
// rewritten in place (`cp new.pt served.pt`) would change the weights under a running server,
// or kill it (SIGBUS past the new end). The kernel holds such a writer's open() until the
// lease is given back (up to /proc/sys/fs/lease-break-time, 45 s by default) and tells the
// holder; this process then copies what it still reads of the file into its own memory, puts
// the copy where the mapping was (mremap: the addresses stay), and gives the lease back. A
// `mv` or `rm` of the file breaks nothing and needs no copy (the mapping keeps the old file).
class MappedFile {
 public:
  // The file opened, leased and mapped; null, with the reason in `why`, where the lease is not
  // granted (the file open for writing, not this user's file without CAP_LEASE, a file system
  // without leases) or mapping fails. The caller then reads the file into memory instead.
  static std::shared_ptr<MappedFile> Open(const std::string& path, std::string* why);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  uint8_t* data() const { return base_; }
  size_t size() const { return size_; }
  int fd() const { return fd_; }

  // [offset, offset + n) is in use (a tensor's record): a lease break copies it.
  void Use(size_t offset, size_t n);
  // Maps in the pages of [offset, offset + n): from the page cache, or the disk where they are
  // not cached (blocking), so that first reads do not fault one page at a time.
  void Populate(size_t offset, size_t n) const;
  // Called from the lease-break thread: the copy described above.
  void Detach();

 private:
  MappedFile(int fd, uint8_t* base, size_t size) : fd_(fd), base_(base), size_(size) {}
  friend void ForgetPages(const void* memory, size_t bytes);
  friend bool InMappedFile(const void* memory);

  mutable std::mutex mutex_;
  int fd_;
  uint8_t* base_;
  size_t size_;
  bool detached_ = false;
  std::vector<std::pair<size_t, size_t>> used_;     // [offset, end) of records in use
  std::vector<std::pair<size_t, size_t>> dropped_;  // whole pages given back (ForgetPages)
};

// Whether `memory` lies in a live mapping of a checkpoint.
bool InMappedFile(const void* memory);

// Gives back the whole pages inside [memory, memory + bytes), which nothing reads again (rows
// rewritten into another layout elsewhere): anonymous memory is freed; pages of a mapped
// checkpoint are unmapped from this process (they stay in the page cache) and are not copied
// on a lease break. Bytes of partial pages at either end stay.
void ForgetPages(const void* memory, size_t bytes);

}  // namespace tsn
