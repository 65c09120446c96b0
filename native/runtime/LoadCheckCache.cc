#include "runtime/LoadCheckCache.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/Sha1.h"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace tsn {

namespace {

uint64_t Little(const unsigned char* p, int bytes) {
  uint64_t value = 0;
  for (int i = bytes - 1; i >= 0; --i) value = (value << 8) | p[i];
  return value;
}

bool ReadAt(std::ifstream& in, uint64_t offset, std::vector<unsigned char>& out) {
  in.clear();
  in.seekg(static_cast<std::streamoff>(offset));
  in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size()));
  return static_cast<size_t>(in.gcount()) == out.size();
}

std::string NowUtc() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

constexpr const char* kVerdictLine = "verdict ";
constexpr const char* kTimingLine = "timing ";
constexpr const char* kCacheShapeLine = "cache_shape ";

}  // namespace

std::string ArchiveDigest(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  const uint64_t size = static_cast<uint64_t>(in.tellg());
  if (size < 22) return "";
  // The end-of-central-directory record is within the last 22 + 65535 (comment) bytes.
  const uint64_t tail = std::min<uint64_t>(size, 22 + 65535);
  std::vector<unsigned char> end(tail);
  if (!ReadAt(in, size - tail, end)) return "";
  int64_t at = -1;
  for (int64_t i = static_cast<int64_t>(tail) - 22; i >= 0; --i) {
    if (Little(&end[i], 4) == 0x06054b50) {
      at = i;
      break;
    }
  }
  if (at < 0) return "";
  uint64_t cdSize = Little(&end[at + 12], 4), cdOffset = Little(&end[at + 16], 4);
  if (cdOffset == 0xffffffffu || cdSize == 0xffffffffu) {
    // zip64: the locator just before the record points at the zip64 end record.
    if (at < 20 || Little(&end[at - 20], 4) != 0x07064b50) return "";
    std::vector<unsigned char> record(56);
    if (!ReadAt(in, Little(&end[at - 20 + 8], 8), record) || Little(record.data(), 4) != 0x06064b50) return "";
    cdSize = Little(&record[40], 8);
    cdOffset = Little(&record[48], 8);
  }
  if (cdSize == 0 || cdSize > (64u << 20) || cdOffset + cdSize > size) return "";
  std::vector<unsigned char> directory(cdSize);
  if (!ReadAt(in, cdOffset, directory)) return "";
  const std::string bytes(directory.begin(), directory.end());
  return Sha1Hex(bytes) + " " + std::to_string(size);
}

std::string AddonIdentity() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&AddonIdentity), &info) == 0 || info.dli_fname == nullptr) return "unknown";
#if TSN_NATIVE_ONLY
  // The build without libtorch lies beside the libtorch addon, built with it from the same
  // sources: it takes that one's identity, and so finds the verdicts that one remembered.
  const std::string path = (std::filesystem::path(info.dli_fname).parent_path() / "torchserve.node").string();
#else
  const std::string path = info.dli_fname;
#endif
  struct stat st{};
  if (stat(path.c_str(), &st) != 0) return "unknown: " + std::string(info.dli_fname);
  return path + " " + std::to_string(st.st_size) + " " + std::to_string(st.st_mtim.tv_sec) + "." +
         std::to_string(st.st_mtim.tv_nsec);
}

LoadCheckCache::LoadCheckCache(std::string dir, std::string key) : dir_(std::move(dir)), key_(std::move(key)) {
  if (!dir_.empty()) file_ = (std::filesystem::path(dir_) / (Sha1Hex(key_) + ".txt")).string();
}

std::optional<CheckVerdict> LoadCheckCache::Find() const {
  if (file_.empty()) return std::nullopt;
  std::ifstream in(file_);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  const std::string content = text.str();
  // The whole key is stored, so a verdict is never taken for another key (a hash collision).
  if (content.compare(0, key_.size(), key_) != 0) return std::nullopt;
  std::istringstream rest(content.substr(key_.size()));
  std::string line;
  std::optional<CheckVerdict> verdict;
  std::optional<CheckTiming> timing;
  std::vector<int64_t> cacheShape;
  while (std::getline(rest, line)) {
    if (line.rfind(kVerdictLine, 0) == 0 && !verdict) {
      std::istringstream fields(line.substr(std::strlen(kVerdictLine)));
      std::string word;
      CheckVerdict found;
      if (!(fields >> word >> found.disagreement >> found.checked)) return std::nullopt;
      if (word != "agrees" && word != "disagrees") return std::nullopt;
      found.agrees = word == "agrees";
      verdict = found;
    } else if (line.rfind(kCacheShapeLine, 0) == 0) {
      // One that does not parse is none: the module is loaded for it.
      std::istringstream fields(line.substr(std::strlen(kCacheShapeLine)));
      std::vector<int64_t> shape;
      for (int64_t size = 0; fields >> size;) shape.push_back(size);
      if (fields.eof() && shape.size() == 6) cacheShape = shape;
    } else if (line.rfind(kTimingLine, 0) == 0) {
      // A timing line that does not parse is no timing (it runs again), not a lost verdict.
      std::istringstream fields(line.substr(std::strlen(kTimingLine)));
      CheckTiming found;
      if (fields >> found.settings >> found.native >> found.script && found.native > 0 && found.script > 0) {
        std::string stopped;
        found.scriptStopped = fields >> stopped && stopped == "stopped";
        timing = found;
      }
    }
  }
  if (verdict) {
    verdict->timing = timing;
    verdict->cacheShape = cacheShape;
  }
  return verdict;
}

bool LoadCheckCache::Remember(CheckVerdict& verdict, std::string& error) const {
  if (file_.empty()) return false;
  if (verdict.checked.empty()) verdict.checked = NowUtc();
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) {
    error = "cannot create " + dir_ + ": " + ec.message();
    return false;
  }
  // Written beside its final name and renamed over it, so a reader never sees half a file.
  const std::string temporary = file_ + "." + std::to_string(getpid()) + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    char disagreement[32];
    std::snprintf(disagreement, sizeof disagreement, "%.6g", verdict.disagreement);
    out << key_ << kVerdictLine << (verdict.agrees ? "agrees" : "disagrees") << " " << disagreement << " "
        << verdict.checked << "\n";
    if (verdict.timing) {
      char seconds[64];
      std::snprintf(seconds, sizeof seconds, "%.6g %.6g", verdict.timing->native, verdict.timing->script);
      out << kTimingLine << verdict.timing->settings << " " << seconds << (verdict.timing->scriptStopped ? " stopped" : "")
          << "\n";
    }
    if (!verdict.cacheShape.empty()) {
      out << kCacheShapeLine;
      for (size_t i = 0; i < verdict.cacheShape.size(); ++i) out << (i ? " " : "") << verdict.cacheShape[i];
      out << "\n";
    }
    if (!out.flush()) {
      error = "cannot write " + temporary + ": " + std::strerror(errno);
      std::filesystem::remove(temporary, ec);
      return false;
    }
  }
  std::filesystem::rename(temporary, file_, ec);
  if (ec) {
    error = "cannot write " + file_ + ": " + ec.message();
    std::filesystem::remove(temporary, ec);
    return false;
  }
  return true;
}

}  // namespace tsn
