// One pread loop for every reader of a checkpoint's bytes (the archive index, the deferred
// records torch's loader leaves, the records read into memory): a read of a file can come back
// short or interrupted, and each caller needs the whole range or to know why not.
// Only the C++ standard library and POSIX, like runtime/ArchiveIndex.h.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>

namespace tsn {

// Reads `n` bytes of the file `fd` from `offset` into `buf`, reading again after a short or an
// interrupted read, at most 1 GiB a call (Linux reads at most about 2 GiB in one). Returns the
// bytes read: fewer than `n` only where the file ends first (errno then 0) or a read fails
// (errno says why).
inline size_t ReadFully(int fd, void* buf, size_t n, uint64_t offset) {
  size_t done = 0;
  errno = 0;
  while (done < n) {
    const ssize_t got =
        pread(fd, static_cast<char*>(buf) + done, std::min<size_t>(n - done, size_t{1} << 30), static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) {
      errno = 0;
      continue;
    }
    if (got <= 0) break;
    done += static_cast<size_t>(got);
  }
  return done;
}

}  // namespace tsn
