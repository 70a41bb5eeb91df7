#include "format/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_set>

#include "core/error.h"
#include "core/file_util.h"

namespace eg {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Same limit as the reference implementation (huggingface/safetensors MAX_HEADER_SIZE).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// Index files are small (a name -> file map); anything bigger is not an index.
constexpr size_t kMaxIndexBytes = 100'000'000;

/// Text from a file made safe for a one-line message: control characters escaped, long text cut.
std::string printable(std::string_view s, size_t max_len = 200) {
  std::string out;
  const size_t n = std::min(s.size(), max_len);
  out.reserve(n + 8);
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > max_len) out += "...";
  return out;
}

std::string sq(std::string_view name) {
  std::string out = "'";
  out += printable(name);
  out += '\'';
  return out;
}

[[noreturn]] void fail(const std::string& path, const std::string& msg) {
  throw Error(path + ": " + msg);
}
[[noreturn]] void fail_tensor(const std::string& path, const std::string& name,
                              const std::string& msg) {
  throw Error(path + ": tensor " + sq(name) + ": " + msg);
}

uint64_t read_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

enum class IntKind { kOk, kNegative, kNotInteger };

/// Classifies a JSON value as a non-negative integer (stored in *out), a negative integer, or
/// anything else (floats, strings, integers beyond 2^64 which nlohmann stores as floats...).
IntKind as_u64(const json& v, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
    return IntKind::kOk;
  }
  if (v.is_number_integer()) {  // signed storage: only used for negative literals ("-0" is 0)
    const int64_t x = v.get<int64_t>();
    if (x < 0) return IntKind::kNegative;
    *out = static_cast<uint64_t>(x);
    return IntKind::kOk;
  }
  return IntKind::kNotInteger;
}

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

/// numel * element size, or false on overflow (numel must also fit in int64).
bool checked_nbytes(const std::vector<int64_t>& shape, DType dt, uint64_t* nbytes) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return false;
  }
  if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
  return !__builtin_mul_overflow(n, static_cast<uint64_t>(dtype_size(dt)), nbytes);
}

struct Entry {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

/// Parses and validates one tensor entry of a header.
Entry parse_entry(const std::string& path, const std::string& name, const json& v,
                  uint64_t data_size) {
  Entry e;
  e.name = name;
  if (!v.is_object()) fail_tensor(path, name, "header entry is not a JSON object");

  auto dt = v.find("dtype");
  if (dt == v.end()) fail_tensor(path, name, "missing \"dtype\"");
  if (!dt->is_string()) fail_tensor(path, name, "\"dtype\" is not a string");
  const std::string& dts = dt->get_ref<const std::string&>();
  if (!parse_dtype(dts, &e.dtype))
    fail_tensor(path, name, "unsupported dtype " + sq(dts) + " (supported: F32, F16, BF16)");

  auto sh = v.find("shape");
  if (sh == v.end()) fail_tensor(path, name, "missing \"shape\"");
  if (!sh->is_array()) fail_tensor(path, name, "\"shape\" is not an array");
  e.shape.reserve(sh->size());
  for (const json& d : *sh) {
    uint64_t x = 0;
    switch (as_u64(d, &x)) {
      case IntKind::kNegative:
        fail_tensor(path, name, "negative dimension " + d.dump() + " in \"shape\"");
      case IntKind::kNotInteger:
        fail_tensor(path, name, "\"shape\" must be an array of non-negative integers");
      case IntKind::kOk:
        break;
    }
    if (x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail_tensor(path, name, "dimension " + std::to_string(x) + " in \"shape\" is too large");
    e.shape.push_back(static_cast<int64_t>(x));
  }
  uint64_t nbytes = 0;
  if (!checked_nbytes(e.shape, e.dtype, &nbytes))
    fail_tensor(path, name, "element count of shape " + shape_to_string(e.shape) + " overflows");

  auto off = v.find("data_offsets");
  if (off == v.end()) fail_tensor(path, name, "missing \"data_offsets\"");
  if (!off->is_array() || off->size() != 2 || as_u64((*off)[0], &e.begin) != IntKind::kOk ||
      as_u64((*off)[1], &e.end) != IntKind::kOk)
    fail_tensor(path, name, "\"data_offsets\" must be an array of two non-negative integers");
  const std::string offs =
      "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
  if (e.begin > e.end) fail_tensor(path, name, offs + ": begin > end");
  if (e.end > data_size)
    fail_tensor(path, name,
                offs + " extend beyond the data buffer (" + std::to_string(data_size) + " bytes)");
  if (e.end - e.begin != nbytes)
    fail_tensor(path, name,
                offs + " hold " + std::to_string(e.end - e.begin) + " bytes but " +
                    dtype_name(e.dtype) + " " + shape_to_string(e.shape) + " needs " +
                    std::to_string(nbytes));
  return e;
}

/// Parses and validates the header of a mapped safetensors file. On success *data_start is the
/// file offset of the data buffer and every entry lies inside it.
std::vector<Entry> parse_header(const MappedFile& mf, size_t* data_start) {
  const std::string& path = mf.path();
  const size_t size = mf.size();
  if (size < 8)
    fail(path, "file too short for a safetensors header (" + std::to_string(size) + " bytes)");
  const uint64_t n = read_le64(mf.data());
  if (n == 0) fail(path, "safetensors header length is 0");
  if (n > kMaxHeaderBytes)
    fail(path, "safetensors header length " + std::to_string(n) + " is too large (max " +
                   std::to_string(kMaxHeaderBytes) + ")");
  if (n > size - 8)
    fail(path, "safetensors header length " + std::to_string(n) +
                   " runs past the end of the file (" + std::to_string(size) + " bytes)");
  *data_start = static_cast<size_t>(8 + n);
  const uint64_t data_size = size - *data_start;

  const char* hb = reinterpret_cast<const char*>(mf.data() + 8);
  json header;
  try {
    header = json::parse(hb, hb + n);
  } catch (const json::exception& e) {
    fail(path, "safetensors header is not valid JSON: " + printable(e.what(), 300));
  }
  if (!header.is_object()) fail(path, "safetensors header is not a JSON object");

  std::vector<Entry> entries;
  entries.reserve(header.size());
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      const json& m = it.value();
      bool ok = m.is_object();
      if (ok) {
        for (const json& v : m) ok = ok && v.is_string();
      }
      if (!ok) fail(path, "\"__metadata__\" must be an object whose values are strings");
      continue;
    }
    entries.push_back(parse_entry(path, it.key(), it.value(), data_size));
  }

  // Like the reference reader: sorted by offsets, tensors must tile the buffer from 0 with no
  // overlap and no gap. Unlike it, bytes after the last tensor (padding) are tolerated.
  std::vector<const Entry*> order;
  order.reserve(entries.size());
  for (const Entry& e : entries) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) {
    if (a->begin != b->begin) return a->begin < b->begin;
    if (a->end != b->end) return a->end < b->end;
    return a->name < b->name;
  });
  uint64_t expected = 0;
  const Entry* prev = nullptr;
  for (const Entry* e : order) {
    if (e->begin < expected) fail_tensor(path, e->name, "data overlaps tensor " + sq(prev->name));
    if (e->begin > expected)
      fail_tensor(path, e->name,
                  std::to_string(e->begin - expected) + " unused bytes before its data at offset " +
                      std::to_string(e->begin) + " (tensor data must be contiguous)");
    expected = e->end;
    prev = e;
  }
  return entries;
}

bool is_dir(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
bool path_exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

/// A shard file name from an index must stay inside the model directory.
bool is_safe_relative(const std::string& f) {
  if (f.empty() || f.find('\0') != std::string::npos) return false;
  const fs::path p(f);
  if (p.is_absolute() || p.has_root_name() || p.has_root_directory()) return false;
  for (const auto& part : p) {
    if (part == "..") return false;
  }
  return true;
}

}  // namespace

int64_t TensorInfo::numel() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);  // validated on load: no overflow
  return static_cast<int64_t>(n);
}

std::string TensorInfo::shape_str() const { return shape_to_string(shape); }

const TensorInfo* TensorStore::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

size_t TensorStore::total_bytes() const {
  size_t total = 0;
  for (const auto& kv : tensors_) total += kv.second.nbytes;
  return total;
}

void TensorStore::add_file(const std::string& path,
                           const std::vector<std::string>* expected_names) {
  std::shared_ptr<MappedFile> mf = MappedFile::open(path);
  size_t data_start = 0;
  std::vector<Entry> entries = parse_header(*mf, &data_start);

  if (expected_names) {
    std::unordered_set<std::string_view> present;
    for (const Entry& e : entries) present.insert(e.name);
    for (const std::string& want : *expected_names) {
      if (!present.count(want))
        fail_tensor(path, want, "listed in the index's weight_map but not found in this shard");
    }
  }
  for (const Entry& e : entries) {
    if (auto it = tensors_.find(e.name); it != tensors_.end()) {
      std::string other = "another shard";
      for (const auto& f : files_) {
        if (it->second.data >= f->data() && it->second.data <= f->data() + f->size()) {
          other = f->path();
          break;
        }
      }
      fail_tensor(path, e.name, "also present in " + other);
    }
  }
  const uint8_t* base = mf->data() + data_start;
  for (Entry& e : entries) {
    TensorInfo t;
    t.name = e.name;
    t.dtype = e.dtype;
    t.shape = std::move(e.shape);
    t.data = base + e.begin;
    t.nbytes = static_cast<size_t>(e.end - e.begin);
    names_.push_back(e.name);
    tensors_.emplace(std::move(e.name), std::move(t));
  }
  std::sort(names_.begin(), names_.end());
  files_.push_back(std::move(mf));
}

void TensorStore::add_external(TensorInfo t, std::shared_ptr<const void> owner) {
  if (tensors_.count(t.name)) fail_tensor("tensor store", t.name, "duplicate tensor name");
  // A scalar (shape []) holds one element of a non-block type.
  const int64_t last = t.shape.empty() ? 1 : t.shape.back();
  uint64_t nb = dtype_row_bytes(t.dtype, last);
  for (size_t d = 0; d + 1 < t.shape.size(); ++d) nb *= static_cast<uint64_t>(t.shape[d]);
  if (!row_fits_blocks(t.dtype, last) || (t.shape.empty() && is_quantized(t.dtype)) || nb != t.nbytes)
    fail_tensor("tensor store", t.name, "byte size does not match its shape and dtype");
  names_.insert(std::upper_bound(names_.begin(), names_.end(), t.name), t.name);
  std::string name = t.name;
  tensors_.emplace(std::move(name), std::move(t));
  if (owner && (owners_.empty() || owners_.back() != owner)) owners_.push_back(std::move(owner));
}

TensorStore TensorStore::open_file(const std::string& path) {
  TensorStore store;
  store.add_file(path, nullptr);
  return store;
}

TensorStore TensorStore::open_dir(const std::string& dir) {
  if (!path_exists(dir))
    throw Error("cannot open model directory " + dir + ": " + std::strerror(ENOENT));
  if (!is_dir(dir)) throw Error("cannot open model directory " + dir + ": not a directory");
  const std::string index_path = (fs::path(dir) / "model.safetensors.index.json").string();
  const std::string single_path = (fs::path(dir) / "model.safetensors").string();

  if (!path_exists(index_path)) {
    if (!path_exists(single_path))
      throw Error(dir + ": no model.safetensors or model.safetensors.index.json");
    return open_file(single_path);
  }

  std::shared_ptr<MappedFile> mf = MappedFile::open(index_path);
  if (mf->size() == 0) fail(index_path, "file is empty");
  if (mf->size() > kMaxIndexBytes) fail(index_path, "file is too large for an index");
  json index;
  try {
    const char* p = reinterpret_cast<const char*>(mf->data());
    index = json::parse(p, p + mf->size());
  } catch (const json::exception& e) {
    fail(index_path, "not valid JSON: " + printable(e.what(), 300));
  }
  mf.reset();
  if (!index.is_object()) fail(index_path, "not a JSON object");
  auto wm = index.find("weight_map");
  if (wm == index.end()) fail(index_path, "missing \"weight_map\"");
  if (!wm->is_object()) fail(index_path, "\"weight_map\" is not an object");
  if (wm->empty()) fail(index_path, "\"weight_map\" lists no tensors");

  std::map<std::string, std::vector<std::string>> by_shard;  // sorted: deterministic order
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it.value().is_string())
      fail(index_path, "weight_map entry for tensor " + sq(it.key()) + " is not a string");
    const std::string& shard = it.value().get_ref<const std::string&>();
    if (!is_safe_relative(shard))
      fail(index_path, "shard " + sq(shard) + " of tensor " + sq(it.key()) +
                           " is not a file name inside the model directory");
    by_shard[shard].push_back(it.key());
  }

  TensorStore store;
  for (const auto& [shard, names] : by_shard) {
    const std::string shard_path = (fs::path(dir) / shard).string();
    if (!path_exists(shard_path))
      fail(index_path, "shard " + sq(shard) + " (" + shard_path + ") is missing");
    store.add_file(shard_path, &names);
  }
  return store;
}

namespace {


}  // namespace

SafetensorsWriter::SafetensorsWriter(const std::string& path, const std::vector<TensorSpec>& tensors,
                                     const std::unordered_map<std::string, std::string>& metadata)
    : path_(path) {
  // Validate and build the header (ordered: "__metadata__" first, then tensors in the given order).
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    std::map<std::string, std::string> sorted(metadata.begin(), metadata.end());
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : sorted) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  std::unordered_set<std::string> seen;
  names_.reserve(tensors.size());
  ends_.reserve(tensors.size());
  uint64_t offset = 0;
  for (const TensorSpec& t : tensors) {
    if (t.name == "__metadata__") fail(path, "\"__metadata__\" cannot be a tensor name");
    if (!seen.insert(t.name).second) fail_tensor(path, t.name, "duplicate tensor name");
    for (int64_t d : t.shape) {
      if (d < 0)
        fail_tensor(path, t.name, "negative dimension in shape " + shape_to_string(t.shape));
    }
    uint64_t nbytes = 0;
    if (!checked_nbytes(t.shape, t.dtype, &nbytes))
      fail_tensor(path, t.name,
                  "element count of shape " + shape_to_string(t.shape) + " overflows");
    if (__builtin_add_overflow(offset, nbytes, &offset)) fail(path, "total data size overflows");
    nlohmann::ordered_json e = nlohmann::ordered_json::object();
    e["dtype"] = dtype_name(t.dtype);
    e["shape"] = t.shape;
    e["data_offsets"] = {offset - nbytes, offset};
    header[t.name] = std::move(e);
    names_.push_back(t.name);
    ends_.push_back(offset);
  }
  total_ = offset;
  std::string hs;
  try {
    hs = header.dump();
  } catch (const nlohmann::ordered_json::exception& e) {
    fail(path, "cannot encode the header (names and metadata must be UTF-8): " +
                   printable(e.what(), 300));
  }
  hs.append((8 - hs.size() % 8) % 8, ' ');
  if (hs.size() > kMaxHeaderBytes) fail(path, "safetensors header would be too large");
  uint8_t len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<uint8_t>(uint64_t{hs.size()} >> (8 * i));

  // Write a temporary file next to the target; finish() renames it into place.
  const fs::path target(path);
  fs::path dir = target.parent_path();
  if (dir.empty()) dir = ".";
  tmp_ = (dir / ("." + target.filename().string() + ".tmp-XXXXXX")).string();
  fd_ = ::mkstemp(tmp_.data());
  if (fd_ < 0) throw Error("cannot write " + path + ": " + std::strerror(errno));
  if (!write_all(fd_, len_bytes, 8) || !write_all(fd_, hs.data(), hs.size())) io_fail("write");
}

SafetensorsWriter::~SafetensorsWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void SafetensorsWriter::io_fail(const char* what) {
  const int err = errno;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_.c_str());
  throw Error("cannot write " + path_ + ": " + what + ": " + std::strerror(err));
}

size_t SafetensorsWriter::current_tensor() const {
  return static_cast<size_t>(std::upper_bound(ends_.begin(), ends_.end(), written_) - ends_.begin());
}

void SafetensorsWriter::append(const void* data, size_t n) {
  if (fd_ < 0) throw Error("cannot write " + path_ + ": the writer is closed");
  if (n > total_ - written_) {
    const size_t i = current_tensor();
    if (i < names_.size())
      fail_tensor(path_, names_[i], "more data than its shape and dtype hold (" + std::to_string(n) +
                                        " bytes given, " + std::to_string(total_ - written_) +
                                        " left in the file)");
    fail(path_, "more tensor data than the header announces");
  }
  if (n > 0 && data == nullptr) fail(path_, "data is null");
  if (!write_all(fd_, data, n)) io_fail("write");
  written_ += n;
}

void SafetensorsWriter::finish() {
  if (fd_ < 0) throw Error("cannot write " + path_ + ": the writer is closed");
  if (written_ != total_) {
    const size_t i = current_tensor();
    const int fd = fd_;
    fd_ = -1;
    ::close(fd);
    ::unlink(tmp_.c_str());
    fail_tensor(path_, names_[i], "data incomplete (" + std::to_string(total_ - written_) +
                                      " bytes of the file missing)");
  }
  if (::fchmod(fd_, 0644) != 0) io_fail("fchmod");
  if (::fsync(fd_) != 0) io_fail("fsync");
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    throw Error("cannot write " + path_ + ": close: " + std::strerror(err));
  }
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    throw Error("cannot write " + path_ + ": rename: " + std::strerror(err));
  }
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::unordered_map<std::string, std::string>& metadata) {
  std::vector<TensorSpec> specs;
  specs.reserve(tensors.size());
  for (const TensorToWrite& t : tensors) specs.push_back({t.name, t.dtype, t.shape});
  // Checked before anything is written: a null buffer for a non-empty tensor.
  for (const TensorToWrite& t : tensors) {
    uint64_t nbytes = 0;
    if (t.data == nullptr && checked_nbytes(t.shape, t.dtype, &nbytes) && nbytes > 0)
      fail_tensor(path, t.name, "data is null");
  }
  SafetensorsWriter w(path, specs, metadata);
  for (const TensorToWrite& t : tensors) {
    uint64_t nbytes = 0;
    checked_nbytes(t.shape, t.dtype, &nbytes);  // validated by the writer
    w.append(t.data, static_cast<size_t>(nbytes));
  }
  w.finish();
}

}  // namespace eg
