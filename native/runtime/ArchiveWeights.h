// A language model opened, and its weights read, straight from its TorchScript archive without
// libtorch (OpenCheckpoint, ArchiveWeights): the records ArchiveIndex lists, each where it lies
// in a mapping of the file (under its read lease, MappedFile.h) as LoadCheckpoint maps them for
// the module, so that a later load of a checkpoint the native runtime has been checked on needs
// no TorchScript module, nor libtorch (the addon's build without it, TSN_NATIVE_ONLY).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kernels/Kernels.h"
#include "runtime/ArchiveIndex.h"
#include "runtime/Checkpoint.h"
#include "steppers/CheckpointWeights.h"

namespace tsn {

// Where the rows a kernel family lays out anew (FamilyRegroups) come from, as for
// LoadCheckpoint: rewritten at load (read into memory: a rewrite of mapped rows costs a fresh
// page each), served as they lie while a layout file of them is written (mapped), or from a
// layout file an earlier load wrote (mapped, not read in: only the layout's check reads them).
enum class RegroupedRows { kRewritten, kToLayoutFile, kInLayoutFile };

// The parameters and buffers of float32, bf16 or fp16 (by dotted name) and the quantized
// matrices (a module's string `qtype` and uint8 `qweight` [rows, row bytes], with in_features
// or embedding_dim columns) of `index`, the archive at `path`; `cacheShape` the checkpoint's
// cache_shape(1). Records are mapped where the lease is granted (and `mapWeights`) and read
// into memory where it is not, or where a quantized record does not lie 64-byte aligned (the kernels' loads expect
// it); the mapped ones are paged in on `threads` threads. `note`: how they were read. Throws
// ArchiveError for a tensor it cannot take as it lies (a view that is not contiguous, a
// quantized module of the wrong kind).
CheckpointWeights ArchiveWeights(const ArchiveIndex& index, const std::string& path, std::vector<int64_t> cacheShape,
                                 const KernelSet& family, RegroupedRows regrouped, bool mapWeights, int threads,
                                 std::string* note);

// The family configure picks for a kernels cap (an unknown cap: "auto"'s; configure reports it).
const KernelSet& FamilyForCap(const std::string& cap);

// A language model's archive on the CPU opened without libtorch (runtime/ArchiveIndex.h): the
// module tree's records and attributes listed, the extra files (config.json, required, and
// the load-time check's reference) read, the layout file found as LoadCheckpoint finds it;
// the module itself is left for LoadModule. Throws where the archive is not one this reader
// takes (the caller then loads it with LoadCheckpoint, whose errors say what is wrong).
LoadedModel OpenCheckpoint(const std::string& path, const std::vector<std::string>& extraFileNames, bool mapWeights,
                           const std::string& kernelsCap, const std::string& layoutDir);

}  // namespace tsn
