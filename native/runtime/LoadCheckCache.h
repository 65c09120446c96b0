// Remembered verdicts of the load-time check (the native forward against the checkpoint's own
// TorchScript forward), so a checkpoint is checked once per addon build, kernel family and
// thread count, not on every load. A verdict is found again only for the same archive bytes:
// the key holds a digest of the archive's zip central directory, which carries the CRC-32 and
// size of every entry (code, constants, config.json and each weight tensor), so recognising a
// checkpoint reads no weights. Anything else in the key (the addon file, libtorch, the kernel
// family, threads, dtype, config.json as parsed) that differs means the check runs again.
// One small text file per key in a directory the operator names (SERVICE_LOAD_CHECK_CACHE);
// a file that cannot be read or written means the check runs, never that it is skipped.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tsn {

// The runtimes' timing at load, where the kernel family asks for one (the baseline family:
// NeedsTiming in Runtime.h), remembered beside the verdict so that it too runs once.
struct CheckTiming {
  std::string settings;  // the TorchScript runtime's settings it was timed with (no spaces)
  double native = 0;     // seconds of the short workload on each runtime
  double script = 0;
  bool scriptStopped = false;  // the TorchScript run stopped once it could not be chosen (RuntimeTimings)
};

struct CheckVerdict {
  bool agrees = false;
  double disagreement = 0;  // largest relative logit difference measured
  std::string checked;      // when the check ran (UTC, ISO 8601)
  std::optional<CheckTiming> timing;
  // The checkpoint's cache_shape(1), remembered so that a later load that finds this verdict
  // can build the native runtime from the archive's records with no TorchScript module
  // (ArchiveWeights.h); empty in a verdict remembered without it.
  std::vector<int64_t> cacheShape;
};

class LoadCheckCache {
 public:
  // `dir` empty: nothing is remembered. `key` describes everything the verdict depends on.
  LoadCheckCache(std::string dir, std::string key);

  // The verdict remembered for this key, if any (and the key text in the file matches).
  std::optional<CheckVerdict> Find() const;
  // Remembers `verdict` (stamped with the time now, unless it has a time: a timing added to a
  // remembered verdict keeps the check's date); false (and `error` set) if it could not.
  bool Remember(CheckVerdict& verdict, std::string& error) const;
  const std::string& file() const { return file_; }

 private:
  std::string dir_, key_, file_;
};

// A digest of a zip archive's central directory and its size ("" if the file is not a zip
// this can read): equal digests mean the same entries with the same CRC-32s and sizes.
std::string ArchiveDigest(const std::string& path);

// The addon binary's identity (its path, size and modification time), so a rebuilt addon
// checks again; in the build without libtorch, the libtorch addon's beside it
// (torchserve.node).
std::string AddonIdentity();

}  // namespace tsn
