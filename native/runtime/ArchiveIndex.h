// Where a TorchScript archive's weights lie, found without libtorch: the zip's directory and
// the module tree's pickle (data.pkl) are read, never the tensor records themselves, so that a
// CPU runtime can map a checkpoint's weights without loading libtorch (~0.5 s a process).
// Only the C++ standard library: no torch, ATen, c10 or Node header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tsn {

// Whatever the reader cannot read, in one line naming the file and the part. Not a CodedError:
// common/Errors.h brings napi.h, whose inline code needs Node's symbols to link. The load path
// catches it as a std::exception with ERR_CHECKPOINT_INVALID as the fallback code.
class ArchiveError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A tensor attribute of the module tree: its view of a storage record, as torch.jit.save wrote
// it. Tensors that share a storage (a tied head) share its key and offset.
struct ArchiveTensor {
  std::string dtype;  // "float32", "bfloat16", "float16", "float64", "uint8", "int8", "int16", "int32", "int64", "bool"
  std::vector<int64_t> shape, strides;  // in elements
  int64_t storageOffset = 0;           // in elements
  std::string storageKey;              // the record's name under data/: "0", "1", ...
  uint64_t fileOffset = 0;             // where the record's bytes start in the file
  uint64_t storageBytes = 0;           // the record's size
};

// The module tree's attributes by dotted path from the root module ("layers.0.q_proj.qweight";
// a ModuleList's children are "0", "1", ...). Attributes of other kinds (None, lists, tuples,
// dicts) are left out.
struct ArchiveIndex {
  std::string root;       // the zip's top folder ("archive", or the file's stem)
  std::string rootClass;  // the root module's class ("__torch__.torchserve_node.llama.LlamaLM")
  std::map<std::string, ArchiveTensor> tensors;
  std::map<std::string, int64_t> ints;
  std::map<std::string, double> floats;
  std::map<std::string, bool> bools;
  std::map<std::string, std::string> strings;
  std::map<std::string, std::pair<uint64_t, uint64_t>> extraFiles;  // name under extra/ -> {offset, size}
};

// Bytes per element of one of ArchiveTensor's dtypes; 0 for any other name.
size_t DtypeSize(const std::string& dtype);

// Throws ArchiveError for a file it cannot read (missing, not a zip, cut short, compressed or
// damaged records, a pickle it does not know, a tensor reaching past its record).
ArchiveIndex ReadArchiveIndex(const std::string& path);

// `size` bytes of the file from `offset` (an extra file's, or a record's); ArchiveError where
// they are not all there.
std::string ReadArchiveBytes(const std::string& path, uint64_t offset, uint64_t size);

}  // namespace tsn
