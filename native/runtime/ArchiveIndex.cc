#include "runtime/ArchiveIndex.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/ReadFully.h"
#include "runtime/Unpickler.h"

namespace tsn {

using namespace pickle;  // the unpickler's values, and the failures both readers share

namespace {

// Limits against damaged or hostile files. A module tree's pickle is a few hundred bytes a
// tensor (31 KB for an 8B model) and the zip directory ~100 bytes an entry: these are far above
// any real checkpoint and far below an allocation that could hurt. A submodule shared under
// several names is walked once a name, so the walk has limits of its own.
constexpr uint64_t kMaxDirectoryBytes = 64ull << 20;
constexpr uint64_t kMaxPickleBytes = 16ull << 20;
constexpr int kMaxModuleDepth = 64;
constexpr size_t kMaxAttributes = 1u << 20, kMaxPathBytes = 64u << 20;

// The file read with pread, not mapped: a file cut short while it is read gives an error here,
// where a mapping would give SIGBUS.
class File {
 public:
  explicit File(const std::string& path) : fd_(open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    struct stat st {};
    const bool opened = fd_ >= 0 && fstat(fd_, &st) == 0;
    const std::string why = opened ? "not a regular file" : std::string("cannot open it: ") + std::strerror(errno);
    if (opened && S_ISREG(st.st_mode)) {
      size_ = static_cast<uint64_t>(st.st_size);
      return;
    }
    if (fd_ >= 0) close(fd_);
    Fail(why);
  }
  ~File() { close(fd_); }
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  uint64_t size() const { return size_; }

  std::string Read(uint64_t offset, uint64_t n, const std::string& what) const {
    if (offset > size_ || n > size_ - offset) {
      Fail(what + " (" + std::to_string(n) + " bytes at " + std::to_string(offset) + ") lies past the end of the " +
           std::to_string(size_) + "-byte file: cut short or damaged");
    }
    std::string out(n, '\0');
    if (ReadFully(fd_, out.data(), n, offset) < n) {
      Fail("reading " + what + ": " + (errno != 0 ? std::strerror(errno) : "the file shrank"));
    }
    return out;
  }

 private:
  int fd_;
  uint64_t size_ = 0;
};

// ---- Zip: the central directory, ZIP64 where sizes or offsets pass 4 GiB ---------------------

struct Entry {
  uint64_t localHeader = 0, size = 0, storedSize = 0;
  uint16_t method = 0, flags = 0;
};

std::map<std::string, Entry> ReadDirectory(const File& f) {
  if (f.size() < 22) Fail("not a zip archive: " + std::to_string(f.size()) + " bytes is too short for one");
  // The end record: the last 22 bytes and a comment of up to 64 KiB.
  const uint64_t tailSize = std::min<uint64_t>(f.size(), 22 + 0xffff);
  const std::string tail = f.Read(f.size() - tailSize, tailSize, "the zip's end");
  uint64_t at = tailSize - 22;
  while (!(Le(tail, at, 4, "end") == 0x06054b50 && at + 22 + Le(tail, at + 20, 2, "end") <= tailSize)) {
    if (at-- == 0) Fail("not a zip archive: no end-of-central-directory record (or the file is cut short)");
  }
  const uint64_t end = f.size() - tailSize + at;
  uint64_t count = Le(tail, at + 10, 2, "zip end"), bytes = Le(tail, at + 12, 4, "zip end");
  uint64_t offset = Le(tail, at + 16, 4, "zip end");
  // A ZIP64 locator right before the end record points at the ZIP64 end record, whose 8-byte
  // fields replace the 0xffff and 0xffffffff placeholders. PyTorch writes one into every archive.
  const std::string locator = end >= 20 ? f.Read(end - 20, 20, "the zip64 locator") : std::string();
  if (end >= 20 && Le(locator, 0, 4, "zip64 locator") == 0x07064b50) {
    const std::string end64 = f.Read(Le(locator, 8, 8, "zip64 locator"), 56, "the zip64 end record");
    if (Le(end64, 0, 4, "zip64 end") != 0x06064b50) Fail("zip: the zip64 locator points at no zip64 end record");
    count = Le(end64, 32, 8, "zip64 end");
    bytes = Le(end64, 40, 8, "zip64 end");
    offset = Le(end64, 48, 8, "zip64 end");
  }
  if (bytes > kMaxDirectoryBytes || count > bytes / 46) {
    Fail("zip: " + std::to_string(count) + " entries in a central directory of " + std::to_string(bytes) + " bytes (damaged)");
  }
  const std::string dir = f.Read(offset, bytes, "the zip's central directory");

  std::map<std::string, Entry> entries;
  const char* what = "zip central directory";
  for (uint64_t i = 0, p = 0; i < count; ++i) {
    if (Le(dir, p, 4, what) != 0x02014b50) Fail("zip: central directory entry " + std::to_string(i) + " is damaged");
    Entry e;
    e.flags = static_cast<uint16_t>(Le(dir, p + 8, 2, what));
    e.method = static_cast<uint16_t>(Le(dir, p + 10, 2, what));
    e.storedSize = Le(dir, p + 20, 4, what);
    e.size = Le(dir, p + 24, 4, what);
    e.localHeader = Le(dir, p + 42, 4, what);
    const uint64_t nameLength = Le(dir, p + 28, 2, what), extraLength = Le(dir, p + 30, 2, what);
    const uint64_t next = p + 46 + nameLength + extraLength + Le(dir, p + 32, 2, what);
    if (next > dir.size()) Fail("zip: central directory entry " + std::to_string(i) + " is cut short");
    std::string name = dir.substr(p + 46, nameLength);
    // The ZIP64 extra field (id 1) holds 8-byte values for the fields set to 0xffffffff, in
    // this order: size, stored size, local header offset.
    for (uint64_t x = p + 46 + nameLength, xEnd = x + extraLength; x + 4 <= xEnd;) {
      const uint64_t id = Le(dir, x, 2, what), fieldsEnd = x + 4 + Le(dir, x + 2, 2, what);
      if (fieldsEnd > xEnd) Fail("zip: the extra field of entry " + Quoted(name) + " is damaged");
      uint64_t field = x + 4;
      for (uint64_t* v : {&e.size, &e.storedSize, &e.localHeader}) {
        if (id != 1 || *v != 0xffffffff) continue;
        if (field + 8 > fieldsEnd) Fail("zip: the zip64 field of entry " + Quoted(name) + " is cut short");
        *v = Le(dir, field, 8, what);
        field += 8;
      }
      x = fieldsEnd;
    }
    if (!entries.emplace(name, e).second) Fail("zip: two entries named " + Quoted(name));
    p = next;
  }
  return entries;
}

// Where an entry's bytes start: after its local header, whose extra field (where PyTorch pads
// each record to 64-byte alignment) need not match the central directory's.
uint64_t DataStart(const File& f, const std::string& name, const Entry& e) {
  const std::string entry = "zip entry " + Quoted(name);
  if (e.method != 0) Fail(entry + " is compressed (method " + std::to_string(e.method) + "); only stored entries are read");
  if (e.flags & 1) Fail(entry + " is encrypted");
  if (e.storedSize != e.size) Fail(entry + " is damaged: stored, but its two sizes differ");
  const std::string header = f.Read(e.localHeader, 30 + name.size(), "the local header of " + Quoted(name));
  if (Le(header, 0, 4, "local header") != 0x04034b50 || header.compare(30, name.size(), name) != 0) {
    Fail(entry + ": no local header where the directory says (damaged)");
  }
  const uint64_t start = e.localHeader + 30 + Le(header, 26, 2, "local header") + Le(header, 28, 2, "local header");
  if (start > f.size() || e.size > f.size() - start) Fail(entry + " runs past the end of the file: cut short");
  return start;
}

// ---- The module tree ---------------------------------------------------------------------------

struct Walker {
  const Unpickler& u;
  ArchiveIndex& out;
  std::vector<std::pair<std::string, size_t>> tensors;  // path, index into u.tensors()
  size_t visits = 0, pathBytes = 0;

  void Walk(Ref object, const std::string& prefix, int depth) {
    if (depth > kMaxModuleDepth) Fail("data.pkl: modules nested more than 64 deep at " + Quoted(prefix));
    const Value& state = u.at(u.at(object).state);
    if (state.kind != Kind::kDict) return;  // a class with a __getstate__ of its own: no attributes to index
    for (size_t k = 0; k + 1 < state.items.size(); k += 2) {
      const Value& key = u.at(state.items[k]);
      const Value& value = u.at(state.items[k + 1]);
      if (key.kind != Kind::kString) continue;
      pathBytes += prefix.size() + key.s.size();
      if (++visits > kMaxAttributes || pathBytes > kMaxPathBytes) Fail("data.pkl: too many attribute paths (shared modules?)");
      const std::string path = prefix + key.s;
      switch (value.kind) {
        case Kind::kTensor: tensors.emplace_back(path, static_cast<size_t>(value.i)); break;
        case Kind::kBool: out.bools[path] = value.i != 0; break;
        case Kind::kInt: out.ints[path] = value.i; break;
        case Kind::kFloat: out.floats[path] = value.f; break;
        case Kind::kString: out.strings[path] = value.s; break;
        case Kind::kObject: Walk(state.items[k + 1], path + ".", depth + 1); break;
        case Kind::kOpaque:  // a sparse tensor, say: refused, not left out as if it were no tensor
          if (value.s.rfind("torch._utils._rebuild_", 0) != 0) break;
          Fail("tensor " + Quoted(path) + " is of a kind not read (" + value.s + ")");
        default: break;  // None, lists, tuples, dicts
      }
    }
  }
};

// The record holds the storage the pickle describes, and the tensor's elements lie inside it.
void CheckExtent(const std::string& path, const ArchiveTensor& t, uint64_t elements) {
  const std::string tensor = "tensor " + Quoted(path);
  const size_t size = DtypeSize(t.dtype);
  if (elements > t.storageBytes / size || elements * size != t.storageBytes) {
    Fail(tensor + ": its storage record holds " + std::to_string(t.storageBytes) + " bytes, not " + std::to_string(elements) +
         " " + t.dtype + " elements (damaged)");
  }
  if (t.storageOffset < 0) Fail(tensor + " has a negative storage offset");
  for (size_t d = 0; d < t.shape.size(); ++d) {
    if (t.shape[d] < 0 || t.strides[d] < 0) Fail(tensor + " has a negative size or stride");
  }
  if (std::find(t.shape.begin(), t.shape.end(), 0) != t.shape.end()) return;  // no elements, nothing to read
  uint64_t last = static_cast<uint64_t>(t.storageOffset);
  for (size_t d = 0; d < t.shape.size(); ++d) {
    uint64_t reach = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(t.shape[d] - 1), static_cast<uint64_t>(t.strides[d]), &reach) ||
        __builtin_add_overflow(last, reach, &last)) {
      last = UINT64_MAX;
    }
  }
  if (last >= elements) Fail(tensor + " reaches past its storage record of " + std::to_string(elements) + " elements");
}

}  // namespace


ArchiveIndex ReadArchiveIndex(const std::string& path) {
  try {
    File f(path);
    const std::map<std::string, Entry> entries = ReadDirectory(f);
    ArchiveIndex index;
    // Everything lies under one top folder, which `<root>/data.pkl` names.
    const std::string* pickleName = nullptr;
    for (const auto& [name, entry] : entries) {
      const size_t slash = name.find('/');
      if (slash == std::string::npos || slash == 0 || name.compare(slash, std::string::npos, "/data.pkl") != 0) continue;
      if (pickleName) Fail("two module pickles: " + Quoted(*pickleName) + " and " + Quoted(name));
      pickleName = &name;
      index.root = name.substr(0, slash);
    }
    if (!pickleName) Fail("no <folder>/data.pkl in the zip: not a TorchScript archive");
    const Entry& pickleEntry = entries.at(*pickleName);
    if (pickleEntry.size > kMaxPickleBytes) Fail(Quoted(*pickleName) + " is " + std::to_string(pickleEntry.size) + " bytes: damaged");
    const std::string pickle = f.Read(DataStart(f, *pickleName, pickleEntry), pickleEntry.size, Quoted(*pickleName));

    Unpickler u(pickle);
    const Ref root = u.Load();
    if (u.at(root).kind != Kind::kObject) Fail("data.pkl holds no module object (a torch.save file, not torch.jit.save?)");
    index.rootClass = u.at(root).s;
    Walker walker{u, index, {}, 0, 0};
    walker.Walk(root, "", 0);

    const std::string dataPrefix = index.root + "/data/", extraPrefix = index.root + "/extra/";
    std::map<std::string, std::pair<uint64_t, uint64_t>> records;  // key -> {offset, size}: a tied record's header read once
    for (const auto& [name, i] : walker.tensors) {
      ArchiveTensor t = u.tensors()[i].tensor;
      auto record = records.find(t.storageKey);
      if (record == records.end()) {
        const auto entry = entries.find(dataPrefix + t.storageKey);
        if (entry == entries.end()) Fail("tensor " + Quoted(name) + ": no storage record " + Quoted(dataPrefix + t.storageKey));
        record = records.emplace(t.storageKey, std::make_pair(DataStart(f, entry->first, entry->second), entry->second.size)).first;
      }
      t.fileOffset = record->second.first;
      t.storageBytes = record->second.second;
      CheckExtent(name, t, u.tensors()[i].elements);
      index.tensors[name] = std::move(t);
    }
    for (const auto& [name, entry] : entries) {
      if (name.size() > extraPrefix.size() && name.compare(0, extraPrefix.size(), extraPrefix) == 0 && name.back() != '/') {
        index.extraFiles[name.substr(extraPrefix.size())] = {DataStart(f, name, entry), entry.size};
      }
    }
    return index;
  } catch (const ArchiveError& e) {
    throw ArchiveError("checkpoint " + path + " cannot be read: " + e.what());
  }
}

std::string ReadArchiveBytes(const std::string& path, uint64_t offset, uint64_t size) {
  try {
    return File(path).Read(offset, size, "the bytes asked for");
  } catch (const ArchiveError& e) {
    throw ArchiveError("checkpoint " + path + " cannot be read: " + e.what());
  }
}

}  // namespace tsn
