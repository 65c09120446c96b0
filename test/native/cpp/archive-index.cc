// The torch-free archive index (runtime/ArchiveIndex.cc) as JSON, for archiveIndex.test.ts to
// hold against Python torch's view of the same file. Each tensor carries the CRC-32 of its
// elements' bytes in row-major order, read at its strides from its record where the index says
// it lies; each extra file, the CRC-32 of its bytes.
//
//   archive-index FILE            the index, with the CRCs
//   archive-index --no-data FILE  the index only (no record is read)
//   archive-index --time N FILE   indexes the file N times; prints the fastest and median in ms
//
// Any error: one line "archive-index: MESSAGE" on stderr and status 1.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "runtime/ArchiveIndex.h"

namespace {

uint32_t Crc32(const std::string& bytes) {
  static uint32_t table[256];
  if (table[1] == 0) {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
      table[i] = c;
    }
  }
  uint32_t crc = 0xffffffffu;
  for (unsigned char b : bytes) crc = table[(crc ^ b) & 0xff] ^ (crc >> 8);
  return crc ^ 0xffffffffu;
}

// The tensor's elements in row-major order, each read at its strides from the record.
std::string Elements(const tsn::ArchiveTensor& t, const std::string& record) {
  const size_t size = tsn::DtypeSize(t.dtype);
  int64_t count = 1;
  for (int64_t n : t.shape) count *= n;
  std::string out;
  if (count == 0) return out;
  std::vector<int64_t> index(t.shape.size(), 0);
  for (int64_t e = 0; e < count; ++e) {
    int64_t at = t.storageOffset;
    for (size_t d = 0; d < index.size(); ++d) at += index[d] * t.strides[d];
    out.append(record, static_cast<size_t>(at) * size, size);
    for (size_t d = index.size(); d-- > 0;) {
      if (++index[d] < t.shape[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

std::string Json(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      out += escaped;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string Ints(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + std::to_string(v[i]);
  return out + "]";
}

// Finite floats as numbers that parse back to the same double; the others as Python names them.
std::string Float(double v) {
  if (std::isnan(v)) return "\"nan\"";
  if (std::isinf(v)) return v > 0 ? "\"inf\"" : "\"-inf\"";
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", v);
  return text;
}

void Print(const std::string& path, const tsn::ArchiveIndex& index, bool withData) {
  std::map<std::string, std::string> records;  // key -> bytes
  std::printf("{\"root\":%s,\"rootClass\":%s,\n\"tensors\":{", Json(index.root).c_str(), Json(index.rootClass).c_str());
  const char* sep = "\n";
  for (const auto& [name, t] : index.tensors) {
    std::printf("%s%s:{\"dtype\":%s,\"shape\":%s,\"strides\":%s,\"offset\":%lld,\"key\":%s,\"fileOffset\":%llu,\"storageBytes\":%llu",
                sep, Json(name).c_str(), Json(t.dtype).c_str(), Ints(t.shape).c_str(), Ints(t.strides).c_str(),
                static_cast<long long>(t.storageOffset), Json(t.storageKey).c_str(), static_cast<unsigned long long>(t.fileOffset),
                static_cast<unsigned long long>(t.storageBytes));
    if (withData) {
      auto record = records.find(t.storageKey);
      if (record == records.end()) record = records.emplace(t.storageKey, tsn::ReadArchiveBytes(path, t.fileOffset, t.storageBytes)).first;
      std::printf(",\"crc\":%u", Crc32(Elements(t, record->second)));
    }
    std::printf("}");
    sep = ",\n";
  }
  // Ints as strings: JSON numbers lose 64-bit integers in JavaScript.
  std::printf("},\n\"ints\":{");
  sep = "";
  for (const auto& [name, v] : index.ints) std::printf("%s%s:\"%lld\"", sep, Json(name).c_str(), static_cast<long long>(v)), sep = ",";
  std::printf("},\n\"floats\":{");
  sep = "";
  for (const auto& [name, v] : index.floats) std::printf("%s%s:%s", sep, Json(name).c_str(), Float(v).c_str()), sep = ",";
  std::printf("},\n\"bools\":{");
  sep = "";
  for (const auto& [name, v] : index.bools) std::printf("%s%s:%s", sep, Json(name).c_str(), v ? "true" : "false"), sep = ",";
  std::printf("},\n\"strings\":{");
  sep = "";
  for (const auto& [name, v] : index.strings) std::printf("%s%s:%s", sep, Json(name).c_str(), Json(v).c_str()), sep = ",";
  std::printf("},\n\"extra\":{");
  sep = "";
  for (const auto& [name, at] : index.extraFiles) {
    std::printf("%s%s:{\"offset\":%llu,\"size\":%llu", sep, Json(name).c_str(), static_cast<unsigned long long>(at.first),
                static_cast<unsigned long long>(at.second));
    if (withData) std::printf(",\"crc\":%u", Crc32(tsn::ReadArchiveBytes(path, at.first, at.second)));
    std::printf("}");
    sep = ",";
  }
  std::printf("}}\n");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 4 && std::strcmp(argv[1], "--time") == 0) {
      std::vector<double> ms;
      for (int i = 0, n = std::atoi(argv[2]); i < n; ++i) {
        const auto start = std::chrono::steady_clock::now();
        const tsn::ArchiveIndex index = tsn::ReadArchiveIndex(argv[3]);
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
        if (i == 0) std::printf("%zu tensors, %zu extra files\n", index.tensors.size(), index.extraFiles.size());
      }
      if (ms.empty()) return 1;
      std::sort(ms.begin(), ms.end());
      std::printf("fastest %.3f ms, median %.3f ms over %zu runs\n", ms.front(), ms[ms.size() / 2], ms.size());
      return 0;
    }
    const bool withData = !(argc == 3 && std::strcmp(argv[1], "--no-data") == 0);
    if (argc != (withData ? 2 : 3)) {
      std::fprintf(stderr, "archive-index: usage: archive-index [--no-data | --time N] FILE\n");
      return 2;
    }
    const std::string path = argv[argc - 1];
    Print(path, tsn::ReadArchiveIndex(path), withData);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "archive-index: %s\n", e.what());
    return 1;
  }
}
