#include "common/MappedFile.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

namespace tsn {

namespace {

constexpr size_t kPage = 4096;

// Every live mapping, for the lease-break thread (by descriptor) and ForgetPages (by address).
std::mutex registryMutex;
std::vector<MappedFile*> registry;

// The lease-break signal: a real-time one, so that it carries the descriptor (si_fd) and is
// queued. Its handler only writes the descriptor to a pipe; a thread of its own does the copy.
int leasePipe[2] = {-1, -1};

// The addon built without libtorch (TSN_NATIVE_ONLY) can share a process with the libtorch
// addon, each with its own copy of this file: each takes a signal of its own.
#if TSN_NATIVE_ONLY
constexpr int kLeaseSignalOffset = 9;
#else
constexpr int kLeaseSignalOffset = 8;
#endif
int LeaseSignal() { return SIGRTMIN + kLeaseSignalOffset; }

void OnLeaseBreak(int, siginfo_t* info, void*) {
  const int saved = errno;
  const int fd = info->si_fd;
  if (write(leasePipe[1], &fd, sizeof fd) < 0) {
    // Nothing to do from a signal handler: the kernel ends the lease after lease-break-time.
  }
  errno = saved;
}

void WatchLeases() {
  for (;;) {
    int fd = -1;
    const ssize_t got = read(leasePipe[0], &fd, sizeof fd);
    if (got < 0 && errno == EINTR) continue;
    if (got != static_cast<ssize_t>(sizeof fd)) return;
    std::lock_guard<std::mutex> lock(registryMutex);
    for (MappedFile* file : registry) {
      if (file->fd() == fd) file->Detach();
    }
  }
}

// The handler and its thread, once per process; false (with why) if the signal is taken.
bool ListenForLeaseBreaks(std::string* why) {
  static std::once_flag once;
  static std::string failure;
  std::call_once(once, [] {
    struct sigaction old {};
    if (sigaction(LeaseSignal(), nullptr, &old) != 0 || (old.sa_flags & SA_SIGINFO) != 0 || old.sa_handler != SIG_DFL) {
      failure = "signal " + std::to_string(LeaseSignal()) + " (SIGRTMIN+" + std::to_string(kLeaseSignalOffset) +
                ") is taken in this process";
      return;
    }
    if (pipe2(leasePipe, O_CLOEXEC) != 0) {
      failure = std::string("pipe2: ") + std::strerror(errno);
      return;
    }
    struct sigaction action {};
    action.sa_sigaction = OnLeaseBreak;
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&action.sa_mask);
    if (sigaction(LeaseSignal(), &action, nullptr) != 0) {
      failure = std::string("sigaction: ") + std::strerror(errno);
      return;
    }
    std::thread(WatchLeases).detach();
  });
  if (!failure.empty()) *why = failure;
  return failure.empty();
}

}  // namespace

std::shared_ptr<MappedFile> MappedFile::Open(const std::string& path, std::string* why) {
  if (!ListenForLeaseBreaks(why)) return nullptr;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0 || st.st_size <= 0) {
    *why = std::string("open: ") + std::strerror(errno);
    if (fd >= 0) close(fd);
    return nullptr;
  }
  if (fcntl(fd, F_SETSIG, LeaseSignal()) != 0 || fcntl(fd, F_SETLEASE, F_RDLCK) != 0) {
    const int error = errno;
    *why = error == EAGAIN   ? "the file is open for writing"
           : error == EACCES ? "no read lease on a file of another user without CAP_LEASE"
                             : std::string("no read lease (") + std::strerror(error) + ")";
    close(fd);
    return nullptr;
  }
  const size_t size = static_cast<size_t>(st.st_size);
  // Writable and private: a write (none is expected) makes a private copy of its page, never
  // reaches the file, and cannot fault.
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  if (base == MAP_FAILED) {
    *why = std::string("mmap: ") + std::strerror(errno);
    close(fd);  // gives the lease back
    return nullptr;
  }
  std::shared_ptr<MappedFile> file(new MappedFile(fd, static_cast<uint8_t*>(base), size));
  std::lock_guard<std::mutex> lock(registryMutex);
  registry.push_back(file.get());
  return file;
}

MappedFile::~MappedFile() {
  {
    std::lock_guard<std::mutex> lock(registryMutex);
    registry.erase(std::remove(registry.begin(), registry.end(), this), registry.end());
  }
  munmap(base_, size_);
  close(fd_);  // the lease goes with the last descriptor
}

void MappedFile::Use(size_t offset, size_t n) {
  std::lock_guard<std::mutex> lock(mutex_);
  used_.emplace_back(offset, std::min(size_, offset + n));
}

void MappedFile::Populate(size_t offset, size_t n) const {
  const size_t begin = offset / kPage * kPage;
  const size_t end = std::min(size_, offset + n);
  if (end <= begin) return;
  if (madvise(base_ + begin, end - begin, MADV_POPULATE_READ) == 0) return;
  // Kernels before 5.14: a read of each page does the same, a fault at a time.
  volatile uint8_t sink = 0;
  for (size_t at = begin; at < end; at += kPage) sink = sink + base_[at];
}

void MappedFile::Detach() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (detached_) return;
  // The pages to copy: those of records in use, less those given back.
  const size_t pages = (size_ + kPage - 1) / kPage;
  std::vector<bool> keep(pages, false);
  for (const auto& [begin, end] : used_) {
    for (size_t p = begin / kPage; p < pages && p * kPage < end; ++p) keep[p] = true;
  }
  for (const auto& [begin, end] : dropped_) {
    for (size_t p = begin / kPage; p < end / kPage; ++p) keep[p] = false;
  }
  void* copy = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (copy == MAP_FAILED) {
    // The lease stays: the writer waits until the kernel ends it (lease-break-time).
    std::fprintf(stderr, "torchserve-node: a write to a served checkpoint waits: no memory to copy its weights (%s)\n",
                 std::strerror(errno));
    return;
  }
  auto* to = static_cast<uint8_t*>(copy);
  for (size_t p = 0; p < pages;) {
    if (!keep[p]) {
      ++p;
      continue;
    }
    size_t q = p;
    while (q < pages && keep[q]) ++q;
    const size_t begin = p * kPage, end = std::min(size_, q * kPage);
    std::memcpy(to + begin, base_ + begin, end - begin);
    p = q;
  }
  // One step: readers on other threads see the file's pages or the copy, never a hole.
  if (mremap(copy, size_, size_, MREMAP_MAYMOVE | MREMAP_FIXED, base_) == MAP_FAILED) {
    std::fprintf(stderr, "torchserve-node: a write to a served checkpoint waits: mremap failed (%s)\n", std::strerror(errno));
    munmap(copy, size_);
    return;
  }
  detached_ = true;
  fcntl(fd_, F_SETLEASE, F_UNLCK);
}

bool InMappedFile(const void* memory) {
  const auto at = reinterpret_cast<uintptr_t>(memory);
  std::lock_guard<std::mutex> lock(registryMutex);
  for (const MappedFile* file : registry) {
    const auto base = reinterpret_cast<uintptr_t>(file->base_);
    if (at >= base && at < base + file->size_) return true;
  }
  return false;
}

void ForgetPages(const void* memory, size_t bytes) {
  const auto at = reinterpret_cast<uintptr_t>(memory);
  const uintptr_t begin = (at + kPage - 1) / kPage * kPage;
  const uintptr_t end = (at + bytes) / kPage * kPage;
  if (end <= begin) return;
  std::lock_guard<std::mutex> registryLock(registryMutex);
  for (MappedFile* file : registry) {
    const auto base = reinterpret_cast<uintptr_t>(file->base_);
    if (begin < base || end > base + file->size_) continue;
    std::lock_guard<std::mutex> lock(file->mutex_);
    file->dropped_.emplace_back(begin - base, end - base);
    madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
    return;
  }
  madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

}  // namespace tsn
