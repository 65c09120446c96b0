#include "runtime/Unpickler.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tsn::pickle {

namespace {

// The storage classes a persistent id names (torch.<Type>Storage), with the dtype and element size each stands for.
struct StorageType {
  const char* global;
  const char* dtype;
  size_t size;
};
constexpr StorageType kStorageTypes[] = {
    {"torch.FloatStorage", "float32", 4}, {"torch.BFloat16Storage", "bfloat16", 2}, {"torch.HalfStorage", "float16", 2},
    {"torch.DoubleStorage", "float64", 8}, {"torch.ByteStorage", "uint8", 1},      {"torch.CharStorage", "int8", 1},
    {"torch.ShortStorage", "int16", 2},   {"torch.IntStorage", "int32", 4},        {"torch.LongStorage", "int64", 8},
    {"torch.BoolStorage", "bool", 1},
};

}  // namespace

[[noreturn]] void Fail(const std::string& why) { throw ArchiveError(why); }

std::string Quoted(const std::string& s) {
  std::string out = "'";
  for (unsigned char c : s.substr(0, 120)) {
    char escaped[8];
    std::snprintf(escaped, sizeof escaped, "\\x%02x", c);
    out += c < 0x20 || c >= 0x7f ? escaped : std::string(1, static_cast<char>(c));
  }
  return out + (s.size() > 120 ? "...'" : "'");
}

uint64_t Le(const std::string& b, uint64_t at, int n, const char* what) {
  if (at > b.size() || static_cast<uint64_t>(n) > b.size() - at) Fail(std::string(what) + " is cut short");
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = v << 8 | static_cast<unsigned char>(b[at + i]);
  return v;
}

Ref Unpickler::Load() {
  while (pos_ < d_.size()) {
    op_ = pos_;
    const auto code = static_cast<unsigned char>(d_[pos_++]);
    switch (code) {
      case 0x80: Take(1); break;  // PROTO
      case 0x95: Take(8); break;  // FRAME: a hint for buffered readers
      case '(': marks_.push_back(stack_.size()); break;
      case '.': return Pop();  // STOP
      case 'N': stack_.push_back(kNoneRef); break;
      case 0x88: stack_.push_back(kTrue); break;
      case 0x89: stack_.push_back(kFalse); break;
      case 'K': Pushed(Kind::kInt).i = static_cast<int64_t>(Take(1)); break;
      case 'M': Pushed(Kind::kInt).i = static_cast<int64_t>(Take(2)); break;
      case 'J': Pushed(Kind::kInt).i = static_cast<int32_t>(Take(4)); break;
      case 0x8a: {  // LONG1: little-endian two's complement; TorchScript's ints are 64 bits, written in 8 bytes
        const uint64_t n = Take(1);
        if (n > 8) Bad("an integer wider than 64 bits");
        uint64_t v = Take(static_cast<int>(n));
        if (n > 0 && n < 8 && (v >> (8 * n - 1) & 1)) v |= ~0ull << (8 * n);  // sign-extend
        Pushed(Kind::kInt).i = static_cast<int64_t>(v);
        break;
      }
      case 'I': {  // INT: text; "01" and "00" are protocol 0's bools
        const std::string text = Line();
        char* end = nullptr;
        errno = 0;
        const long long v = std::strtoll(text.c_str(), &end, 10);
        if (text.empty() || *end != '\0' || errno != 0) Bad("a malformed INT");
        if (text == "01" || text == "00") stack_.push_back(v ? kTrue : kFalse);
        else Pushed(Kind::kInt).i = v;
        break;
      }
      case 'G': {  // BINFLOAT: big-endian
        uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = bits << 8 | Take(1);
        std::memcpy(&Pushed(Kind::kFloat).f, &bits, 8);
        break;
      }
      case 'X': case 0x8c: case 0x8d: case 'T': case 'U': {  // BINUNICODE (4, 1, 8-byte length), BINSTRING, SHORT_BINSTRING
        std::string s = Bytes(Take(code == 'X' || code == 'T' ? 4 : code == 0x8d ? 8 : 1));
        Pushed(Kind::kString).s = std::move(s);
        break;
      }
      case ')': Pushed(Kind::kTuple); break;
      case ']': Pushed(Kind::kList); break;
      case '}': Pushed(Kind::kDict); break;
      case 't': case 0x85: case 0x86: case 0x87: {  // TUPLE, TUPLE1..3
        std::vector<Ref> items = code == 't' ? PopMark() : std::vector<Ref>(code - 0x84);
        for (size_t i = items.size(); code != 't' && i-- > 0;) items[i] = Pop();
        Pushed(Kind::kTuple).items = std::move(items);
        break;
      }
      case 'a': case 'e': case 's': case 'u': {  // APPEND, APPENDS, SETITEM, SETITEMS
        std::vector<Ref> items;
        if (code == 'e' || code == 'u') items = PopMark();
        for (int n = code == 'a' ? 1 : code == 's' ? 2 : 0; n > 0; --n) items.insert(items.begin(), Pop());
        Value& target = Top();
        if (target.kind != (code == 'a' || code == 'e' ? Kind::kList : Kind::kDict)) Bad("an APPEND or SETITEM to the wrong kind");
        if (target.kind == Kind::kDict && items.size() % 2 != 0) Bad("a SETITEMS with a key and no value");
        target.items.insert(target.items.end(), items.begin(), items.end());
        break;
      }
      case 'q': case 'r': case 0x94: {  // BINPUT, LONG_BINPUT, MEMOIZE (at the next free index)
        const uint64_t key = code == 'q' ? Take(1) : code == 'r' ? Take(4) : memo_.size();
        Top();
        memo_[key] = stack_.back();
        break;
      }
      case 'h': case 'j': {  // BINGET, LONG_BINGET
        const auto found = memo_.find(Take(code == 'h' ? 1 : 4));
        if (found == memo_.end()) Bad("a BINGET of nothing stored");
        stack_.push_back(found->second);
        break;
      }
      case 'c': {  // GLOBAL
        std::string name = Line();
        name += "." + Line();
        Pushed(Kind::kGlobal).s = std::move(name);
        break;
      }
      case 'R': {
        const Ref args = Pop(), callable = Pop();
        stack_.push_back(Reduce(callable, args));
        break;
      }
      case 0x81: {  // NEWOBJ: a TorchScript class (a module) made empty; its BUILD gives the attributes
        Pop();
        std::string name = Expect(Pop(), Kind::kGlobal, "NEWOBJ class").s;
        Pushed(Kind::kObject).s = std::move(name);
        break;
      }
      case 'b': {
        const Ref state = Pop();
        Value& target = Top();
        if (target.kind == Kind::kObject) target.state = state;
        break;
      }
      case 'Q': stack_.push_back(Persistent(Pop())); break;  // BINPERSID
      default: {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02x", code);
        Bad(std::string("unsupported pickle opcode ") + hex);
      }
    }
  }
  Fail("data.pkl ends without its STOP opcode: cut short");
}

// A storage record: ("storage", torch.<Type>Storage, key, location, element count).
Ref Unpickler::Persistent(Ref id) {
  const std::vector<Ref>& items = Expect(id, Kind::kTuple, "persistent id").items;
  if (items.size() < 5 || values_[items[0]].kind != Kind::kString || values_[items[0]].s != "storage") {
    Bad("a persistent id that is not a storage");
  }
  const std::string& type = Expect(items[1], Kind::kGlobal, "storage type").s;
  const auto known = std::find_if(std::begin(kStorageTypes), std::end(kStorageTypes),
                                  [&](const StorageType& t) { return type == t.global; });
  if (known == std::end(kStorageTypes)) Bad("a storage of unsupported type " + Quoted(type));
  if (Expect(items[4], Kind::kInt, "storage size").i < 0) Bad("a storage of negative size");
  const Ref storage = New(Kind::kStorage);
  values_[storage].s = Expect(items[2], Kind::kString, "storage key").s;
  values_[storage].i = values_[items[4]].i;
  values_[storage].dtype = known->dtype;
  return storage;
}

Ref Unpickler::Reduce(Ref callable, Ref args) {
  const std::string name = values_[callable].kind == Kind::kGlobal ? values_[callable].s : "a non-global";
  const std::vector<Ref>& a = Expect(args, Kind::kTuple, "REDUCE argument tuple").items;
  if (name == "torch._utils._rebuild_tensor_v2") {
    // (storage, storage offset, size, stride, requires_grad, backward hooks[, metadata])
    if (a.size() < 6) Bad("a _rebuild_tensor_v2 of " + std::to_string(a.size()) + " arguments");
    const Value& storage = Expect(a[0], Kind::kStorage, "tensor storage");
    PickledTensor t{{}, static_cast<uint64_t>(storage.i)};
    t.tensor.dtype = storage.dtype;
    t.tensor.storageKey = storage.s;
    t.tensor.storageOffset = Expect(a[1], Kind::kInt, "tensor storage offset").i;
    t.tensor.shape = Ints(a[2], "tensor size");
    t.tensor.strides = Ints(a[3], "tensor stride");
    if (t.tensor.shape.size() != t.tensor.strides.size()) Bad("a tensor whose size and stride differ in rank");
    tensors_.push_back(std::move(t));
    const Ref tensor = New(Kind::kTensor);
    values_[tensor].i = static_cast<int64_t>(tensors_.size() - 1);
    return tensor;
  }
  if (name == "torch._utils._rebuild_parameter" && !a.empty()) return a[0];
  // TorchScript's typed lists (build_intlist, ...) and dicts (restore_type_tag): the first argument.
  const bool typedList = name.rfind("torch.jit._pickle.build_", 0) == 0 && name.compare(name.size() - 4, 4, "list") == 0;
  if ((typedList || name == "torch.jit._pickle.restore_type_tag") && !a.empty()) return a[0];
  if (name == "collections.OrderedDict") return New(Kind::kDict);  // a tensor's backward hooks: empty
  const Ref opaque = New(Kind::kOpaque);
  values_[opaque].s = name;
  return opaque;
}

}  // namespace tsn::pickle

namespace tsn {

// Declared in ArchiveIndex.h; defined here, next to the storage types' table it reads.
size_t DtypeSize(const std::string& dtype) {
  for (const auto& t : pickle::kStorageTypes) {
    if (dtype == t.dtype) return t.size;
  }
  return 0;
}

}  // namespace tsn
