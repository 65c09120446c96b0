// The module tree's pickle (data.pkl) of a TorchScript archive, read without libtorch: the
// protocol-2 subset TorchScript's Pickler writes, into an arena of values (modules, their
// attributes, each tensor's view of its storage record) for ArchiveIndex.cc to walk. A pair of its
// own so that the zip reader, the walker and this each stay short enough to read in one sitting.
// Only the C++ standard library, like ArchiveIndex.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/ArchiveIndex.h"

// In a namespace of their own: these short names are the reader's alone.
namespace tsn::pickle {

// Shared with the zip reader in ArchiveIndex.cc, so that both fail as one ArchiveError, in the
// same words; defined in Unpickler.cc, so that the dependency runs one way.
[[noreturn]] void Fail(const std::string& why);
// A name from the file, safe in a one-line message: printable ASCII, other bytes as \xNN.
std::string Quoted(const std::string& s);
// `n` bytes little-endian at `at` of a buffer read from the file.
uint64_t Le(const std::string& b, uint64_t at, int n, const char* what);

// Values live in one arena and refer to each other by index: sharing (the memo) and even
// cycles cost nothing, and freeing a deeply nested value does not recurse.
using Ref = uint32_t;
enum class Kind : uint8_t { kNone, kBool, kInt, kFloat, kString, kTuple, kList, kDict, kGlobal, kObject, kStorage, kTensor, kOpaque };

struct Value {
  Kind kind = Kind::kNone;
  int64_t i = 0;                // bool, int; a storage's element count; a tensor's index in tensors()
  double f = 0;                 // float
  std::string s;                // string; a global's or object's "module.Name"; a storage's key
  const char* dtype = nullptr;  // storage
  std::vector<Ref> items;       // tuple, list; a dict's keys and values in turn
  Ref state = 0;                // object: BUILD's argument (None until built)
};

struct PickledTensor {
  ArchiveTensor tensor;  // all but where its record lies, found after the pickle
  uint64_t elements;     // its storage's element count, as the pickle gives it
};

class Unpickler {
 public:
  explicit Unpickler(const std::string& data) : d_(data) {
    New(Kind::kNone);
    values_[New(Kind::kBool)].i = 1;  // kTrue
    New(Kind::kBool);                 // kFalse
  }

  Ref Load();
  const Value& at(Ref r) const { return values_[r]; }
  const std::vector<PickledTensor>& tensors() const { return tensors_; }

 private:
  static constexpr Ref kNoneRef = 0, kTrue = 1, kFalse = 2;

  Ref New(Kind kind) {
    values_.emplace_back();
    values_.back().kind = kind;
    return static_cast<Ref>(values_.size() - 1);
  }
  Value& Pushed(Kind kind) {
    stack_.push_back(New(kind));
    return values_.back();
  }
  [[noreturn]] void Bad(const std::string& why) const { Fail("data.pkl: " + why + " at offset " + std::to_string(op_)); }
  // Nothing below the innermost MARK may be taken.
  bool Empty() const { return stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back()); }
  Ref Pop() {
    if (Empty()) Bad("a pop from an empty stack");
    const Ref r = stack_.back();
    stack_.pop_back();
    return r;
  }
  Value& Top() {
    if (Empty()) Bad("an empty stack");
    return values_[stack_.back()];
  }
  std::vector<Ref> PopMark() {
    if (marks_.empty()) Bad("no MARK to pop to");
    std::vector<Ref> items(stack_.begin() + static_cast<ptrdiff_t>(marks_.back()), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }
  uint64_t Take(int n) {
    pos_ += static_cast<uint64_t>(n);
    return Le(d_, pos_ - static_cast<uint64_t>(n), n, "data.pkl");
  }
  std::string Bytes(uint64_t n) {
    if (n > d_.size() - pos_) Bad("a string longer than the pickle");
    pos_ += n;
    return d_.substr(pos_ - n, n);
  }
  std::string Line() {
    const size_t end = d_.find('\n', pos_);
    if (end == std::string::npos) Bad("a line without its end");
    std::string line = d_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return line;
  }
  const Value& Expect(Ref r, Kind kind, const char* what) const {
    if (values_[r].kind != kind) Bad(std::string("a malformed ") + what);
    return values_[r];
  }
  std::vector<int64_t> Ints(Ref tuple, const char* what) const {
    std::vector<int64_t> out;
    for (Ref r : Expect(tuple, Kind::kTuple, what).items) out.push_back(Expect(r, Kind::kInt, what).i);
    return out;
  }
  Ref Reduce(Ref callable, Ref args);
  Ref Persistent(Ref id);

  const std::string& d_;
  uint64_t pos_ = 0, op_ = 0;
  std::deque<Value> values_;  // a deque: references stay valid as it grows
  std::vector<Ref> stack_;
  std::vector<size_t> marks_;  // the stack's size at each open MARK
  std::unordered_map<uint64_t, Ref> memo_;
  std::vector<PickledTensor> tensors_;
};

}  // namespace tsn::pickle
