// Reading and writing the safetensors format: an 8-byte little-endian header length N, N bytes of
// JSON ({"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}), then
// the tensors' bytes. The JSON is handled by nlohmann-json; this file checks everything a broken
// or hostile file could get wrong before a single tensor byte is trusted.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace attn::safetensors {

// One line saying what is wrong with a file.
struct FormatError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the format's own limit (100 MB)

struct TensorInfo {
  std::string dtype;  // "F16", "BF16", "F32", "I32", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // absolute byte offsets in the file
};

struct Header {
  std::map<std::string, TensorInfo> tensors;
  std::map<std::string, std::string> metadata;
};

// Bytes per element of a dtype name, or 0 for a name this project does not know.
size_t dtype_size(const std::string& dtype);

// Parses and validates the header of `path`: dtypes known, shapes non-negative, every tensor's
// byte range as long as its shape says, inside the file and overlapping no other. Throws
// FormatError.
Header read_header(const std::string& path);

// Copies tensor `t` of `path` (from read_header) into dst, which holds t.end - t.begin bytes.
void read_tensor(const std::string& path, const TensorInfo& t, void* dst);

struct TensorOut {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  const void* data;
  size_t bytes;
};

// Writes the tensors (in order) and string metadata to `path`. Throws std::runtime_error.
void write(const std::string& path, const std::vector<TensorOut>& tensors,
           const std::map<std::string, std::string>& metadata);

}  // namespace attn::safetensors
