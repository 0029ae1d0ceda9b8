#include "common/safetensors.h"

#include <algorithm>
#include <bit>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

namespace attn::safetensors {

static_assert(std::endian::native == std::endian::little, "safetensors is little-endian");

size_t dtype_size(const std::string& dtype) {
  static const std::map<std::string, size_t> sizes = {
      {"F16", 2}, {"BF16", 2}, {"F32", 4}, {"F64", 8}, {"I8", 1},  {"U8", 1},  {"I16", 2},
      {"U16", 2}, {"I32", 4},  {"U32", 4}, {"I64", 8}, {"U64", 8}, {"BOOL", 1}};
  const auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

namespace {

uint64_t file_size(std::ifstream& in) {
  in.seekg(0, std::ios::end);
  const auto n = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  return n;
}

TensorInfo parse_tensor(const std::string& name, const nlohmann::json& j, uint64_t data_start,
                        uint64_t data_bytes) {
  auto bad = [&](const std::string& why) { return FormatError("tensor '" + name + "': " + why); };
  if (!j.is_object() || !j.contains("dtype") || !j.contains("shape") || !j.contains("data_offsets"))
    throw bad("needs dtype, shape and data_offsets");
  TensorInfo t;
  if (!j["dtype"].is_string()) throw bad("dtype is not a string");
  t.dtype = j["dtype"].get<std::string>();
  const size_t item = dtype_size(t.dtype);
  if (item == 0) throw bad("unknown dtype " + t.dtype);
  if (!j["shape"].is_array()) throw bad("shape is not an array");
  uint64_t elements = 1;
  for (const auto& d : j["shape"]) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0)
      throw bad("shape entries must be non-negative integers");
    const auto n = static_cast<uint64_t>(d.get<int64_t>());
    if (n != 0 && elements > std::numeric_limits<uint64_t>::max() / 8 / n)
      throw bad("shape too large");
    elements *= n;
    t.shape.push_back(static_cast<int64_t>(n));
  }
  const auto& off = j["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
      !off[1].is_number_unsigned())
    throw bad("data_offsets must be two non-negative integers");
  const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
  if (begin > end)
    throw bad("data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
              "] run backwards");
  if (end > data_bytes)
    throw bad("data_offsets end " + std::to_string(end) + " is past the " +
              std::to_string(data_bytes) + " data bytes in the file (truncated?)");
  if (end - begin != elements * item)
    throw bad("data_offsets cover " + std::to_string(end - begin) + " bytes but the shape needs " +
              std::to_string(elements * item));
  t.begin = data_start + begin;
  t.end = data_start + end;
  return t;
}

}  // namespace

Header read_header(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FormatError("cannot open for reading");
  const uint64_t size = file_size(in);
  uint64_t n = 0;
  if (size < 8 || !in.read(reinterpret_cast<char*>(&n), 8))
    throw FormatError("truncated: " + std::to_string(size) +
                      " bytes, too short for the 8-byte header length");
  if (n > kMaxHeaderBytes)
    throw FormatError("header length " + std::to_string(n) + " is over the format's limit of " +
                      std::to_string(kMaxHeaderBytes) + " bytes (not a safetensors file?)");
  if (8 + n > size)
    throw FormatError("truncated: the header says " + std::to_string(n) +
                      " bytes of JSON but the file has " + std::to_string(size - 8) + " after it");
  std::string text(n, '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    std::string what = e.what();
    throw FormatError("header is not valid JSON: " + what.substr(0, 200));
  }
  if (!j.is_object()) throw FormatError("header is not a JSON object");

  Header h;
  const uint64_t data_start = 8 + n, data_bytes = size - data_start;
  for (const auto& [name, value] : j.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) throw FormatError("__metadata__ is not an object");
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string()) throw FormatError("__metadata__ '" + k + "' is not a string");
        h.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    h.tensors[name] = parse_tensor(name, value, data_start, data_bytes);
  }
  // No two tensors may share bytes: sort by start, then each must end before the next begins.
  std::vector<std::pair<const std::string*, const TensorInfo*>> by_start;
  for (const auto& [name, t] : h.tensors) by_start.push_back({&name, &t});
  std::sort(by_start.begin(), by_start.end(),
            [](const auto& a, const auto& b) { return a.second->begin < b.second->begin; });
  for (size_t i = 1; i < by_start.size(); ++i)
    if (by_start[i].second->begin < by_start[i - 1].second->end &&
        by_start[i].second->begin != by_start[i].second->end)
      throw FormatError("tensors '" + *by_start[i - 1].first + "' and '" + *by_start[i].first +
                        "' overlap");
  return h;
}

void read_tensor(const std::string& path, const TensorInfo& t, void* dst) {
  std::ifstream in(path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(t.begin));
  if (!in || !in.read(static_cast<char*>(dst), static_cast<std::streamsize>(t.end - t.begin)))
    throw FormatError("read failed (file changed while reading?)");
}

void write(const std::string& path, const std::vector<TensorOut>& tensors,
           const std::map<std::string, std::string>& metadata) {
  nlohmann::json j = nlohmann::json::object();
  j["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const TensorOut& t : tensors) {
    j[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes}}};
    offset += t.bytes;
  }
  std::string text = j.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error("cannot open for writing");
  const uint64_t n = text.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(text.data(), static_cast<std::streamsize>(n));
  for (const TensorOut& t : tensors)
    out.write(static_cast<const char*>(t.data), static_cast<std::streamsize>(t.bytes));
  out.close();
  if (!out) throw std::runtime_error("write failed (disk full?)");
}

}  // namespace attn::safetensors
