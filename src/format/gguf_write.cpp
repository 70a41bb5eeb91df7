// GGUF v3 streaming writer (format in gguf.h). Header first, then tensor data padded to the
// alignment, written through a buffer into a temporary file renamed into place by finish().
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "core/file_util.h"
#include "format/gguf.h"

namespace eg {

GGUFValue GGUFValue::u32(uint32_t v) { GGUFValue x; x.type = GGUFType::U32; x.i = v; return x; }
GGUFValue GGUFValue::i32(int32_t v) { GGUFValue x; x.type = GGUFType::I32; x.i = v; return x; }
GGUFValue GGUFValue::u64(uint64_t v) { GGUFValue x; x.type = GGUFType::U64; x.i = static_cast<int64_t>(v); return x; }
GGUFValue GGUFValue::f32(float v) { GGUFValue x; x.type = GGUFType::F32; x.f = v; return x; }
GGUFValue GGUFValue::boolean(bool v) { GGUFValue x; x.type = GGUFType::BOOL; x.i = v; return x; }
GGUFValue GGUFValue::str(std::string v) { GGUFValue x; x.type = GGUFType::STRING; x.s = std::move(v); return x; }
GGUFValue GGUFValue::str_array(std::vector<std::string> v) {
  GGUFValue x; x.type = GGUFType::ARRAY; x.elem = GGUFType::STRING; x.strs = std::move(v); return x;
}
GGUFValue GGUFValue::f32_array(std::vector<double> v) {
  GGUFValue x; x.type = GGUFType::ARRAY; x.elem = GGUFType::F32; x.floats = std::move(v); return x;
}
GGUFValue GGUFValue::i32_array(std::vector<int64_t> v) {
  GGUFValue x; x.type = GGUFType::ARRAY; x.elem = GGUFType::I32; x.ints = std::move(v); return x;
}
GGUFValue GGUFValue::bool_array(std::vector<int64_t> v) {
  GGUFValue x; x.type = GGUFType::ARRAY; x.elem = GGUFType::BOOL; x.ints = std::move(v); return x;
}

size_t GGUFTensorSpec::nbytes() const {
  if (ne.empty()) return 0;
  size_t n = dtype_row_bytes(dtype, ne[0]);
  for (size_t d = 1; d < ne.size(); ++d) n *= static_cast<size_t>(ne[d]);
  return n;
}

namespace {

void put_bytes(std::vector<uint8_t>& out, const void* p, size_t n) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  out.insert(out.end(), b, b + n);
}
template <class T>
void put(std::vector<uint8_t>& out, T v) { put_bytes(out, &v, sizeof v); }
void put_str(std::vector<uint8_t>& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  put_bytes(out, s.data(), s.size());
}

void put_int(std::vector<uint8_t>& out, GGUFType t, int64_t v) {
  switch (t) {
    case GGUFType::U8: case GGUFType::I8: case GGUFType::BOOL: put<uint8_t>(out, static_cast<uint8_t>(v)); break;
    case GGUFType::U16: case GGUFType::I16: put<uint16_t>(out, static_cast<uint16_t>(v)); break;
    case GGUFType::U32: case GGUFType::I32: put<uint32_t>(out, static_cast<uint32_t>(v)); break;
    default: put<uint64_t>(out, static_cast<uint64_t>(v)); break;
  }
}

void put_value(std::vector<uint8_t>& out, const GGUFValue& v, const std::string& path, const std::string& key) {
  switch (v.type) {
    case GGUFType::STRING: put_str(out, v.s); return;
    case GGUFType::F32: put<float>(out, static_cast<float>(v.f)); return;
    case GGUFType::F64: put<double>(out, v.f); return;
    case GGUFType::ARRAY: {
      put<uint32_t>(out, static_cast<uint32_t>(v.elem));
      put<uint64_t>(out, v.array_size());
      if (v.elem == GGUFType::STRING) {
        for (const auto& s : v.strs) put_str(out, s);
      } else if (v.elem == GGUFType::ARRAY) {
        for (const auto& a : v.arrs) put_value(out, a, path, key);
      } else if (v.elem == GGUFType::F32) {
        for (double f : v.floats) put<float>(out, static_cast<float>(f));
      } else if (v.elem == GGUFType::F64) {
        for (double f : v.floats) put<double>(out, f);
      } else {
        for (int64_t x : v.ints) put_int(out, v.elem, x);
      }
      if (v.array_size() != (v.elem == GGUFType::STRING ? v.strs.size()
                             : v.elem == GGUFType::ARRAY ? v.arrs.size()
                             : (v.elem == GGUFType::F32 || v.elem == GGUFType::F64) ? v.floats.size()
                                                                                  : v.ints.size()))
        throw Error("cannot write " + path + ": metadata '" + key + "': array elements do not match its element type");
      return;
    }
    default: put_int(out, v.type, v.i); return;
  }
}


constexpr size_t kBufBytes = size_t{4} << 20;

}  // namespace

GGUFWriter::GGUFWriter(const std::string& path,
                       const std::vector<std::pair<std::string, GGUFValue>>& metadata,
                       const std::vector<GGUFTensorSpec>& tensors)
    : path_(path) {
  std::vector<uint8_t> h;
  std::set<std::string> keys, names;
  for (const auto& [k, v] : metadata) {
    if (!keys.insert(k).second) throw Error("cannot write " + path + ": duplicate metadata key '" + k + "'");
    if (k == "general.alignment") {
      if (!v.is_int() || v.i <= 0 || (v.i & (v.i - 1)) != 0)
        throw Error("cannot write " + path + ": general.alignment must be a power of two");
      alignment_ = static_cast<uint32_t>(v.i);
    }
  }
  put_bytes(h, "GGUF", 4);
  put<uint32_t>(h, 3);
  put<uint64_t>(h, tensors.size());
  put<uint64_t>(h, metadata.size());
  for (const auto& [k, v] : metadata) {
    put_str(h, k);
    put<uint32_t>(h, static_cast<uint32_t>(v.type));
    put_value(h, v, path, k);
  }
  uint64_t off = 0;
  for (const GGUFTensorSpec& t : tensors) {
    const std::string tn = "cannot write " + path + ": tensor '" + t.name + "'";
    if (!names.insert(t.name).second) throw Error(tn + ": duplicate name");
    if (t.ne.empty() || t.ne.size() > 4) throw Error(tn + ": needs 1..4 dimensions");
    for (int64_t d : t.ne)
      if (d <= 0) throw Error(tn + ": dimensions must be positive");
    if (!row_fits_blocks(t.dtype, t.ne[0]))
      throw Error(tn + ": row length " + std::to_string(t.ne[0]) + " is not a multiple of the " +
                  dtype_name(t.dtype) + " block size");
    put_str(h, t.name);
    put<uint32_t>(h, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) put<int64_t>(h, d);
    put<uint32_t>(h, ggml_type_id(t.dtype));
    put<uint64_t>(h, off);
    begins_.push_back(off);
    sizes_.push_back(t.nbytes());
    total_ += t.nbytes();
    off += t.nbytes();
    off = (off + alignment_ - 1) / alignment_ * alignment_;
  }
  h.resize((h.size() + alignment_ - 1) / alignment_ * alignment_, 0);

  namespace fs = std::filesystem;
  const fs::path target(path);
  fs::path dir = target.parent_path();
  if (dir.empty()) dir = ".";
  tmp_ = (dir / ("." + target.filename().string() + ".tmp-XXXXXX")).string();
  fd_ = ::mkstemp(tmp_.data());
  if (fd_ < 0) throw Error("cannot write " + path + ": " + std::strerror(errno));
  if (!write_all(fd_, h.data(), h.size())) io_fail("write");
  buf_.reserve(kBufBytes);
  while (cur_ < sizes_.size() && sizes_[cur_] == 0) ++cur_;
}

GGUFWriter::~GGUFWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void GGUFWriter::io_fail(const char* what) {
  const int err = errno;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_.c_str());
  throw Error("cannot write " + path_ + ": " + what + ": " + std::strerror(err));
}

void GGUFWriter::write_raw(const void* p, size_t n) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  while (n > 0) {
    const size_t k = std::min(n, kBufBytes - buf_.size());
    buf_.insert(buf_.end(), b, b + k);
    b += k;
    n -= k;
    pos_ += k;
    if (buf_.size() == kBufBytes) {
      if (!write_all(fd_, buf_.data(), buf_.size())) io_fail("write");
      buf_.clear();
    }
  }
}

void GGUFWriter::pad_to(uint64_t pos) {
  static const uint8_t zeros[64] = {};
  while (pos_ < pos) write_raw(zeros, static_cast<size_t>(std::min<uint64_t>(64, pos - pos_)));
}

void GGUFWriter::append(const void* data, size_t n) {
  if (fd_ < 0) throw Error("cannot write " + path_ + ": the writer is closed");
  if (n > total_ - written_) throw Error("cannot write " + path_ + ": more tensor data than announced");
  if (n > 0 && data == nullptr) throw Error("cannot write " + path_ + ": data is null");
  const uint8_t* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    if (cur_done_ == 0) pad_to(begins_[cur_]);
    const size_t k = static_cast<size_t>(std::min<uint64_t>(n, sizes_[cur_] - cur_done_));
    write_raw(p, k);
    p += k;
    n -= k;
    written_ += k;
    cur_done_ += k;
    if (cur_done_ == sizes_[cur_]) {
      cur_done_ = 0;
      ++cur_;
      while (cur_ < sizes_.size() && sizes_[cur_] == 0) ++cur_;
    }
  }
}

void GGUFWriter::finish() {
  if (fd_ < 0) throw Error("cannot write " + path_ + ": the writer is closed");
  if (written_ != total_) {
    const int fd = fd_;
    fd_ = -1;
    ::close(fd);
    ::unlink(tmp_.c_str());
    throw Error("cannot write " + path_ + ": tensor data incomplete (" + std::to_string(total_ - written_) +
                " bytes missing)");
  }
  if (!buf_.empty() && !write_all(fd_, buf_.data(), buf_.size())) io_fail("write");
  buf_.clear();
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

}  // namespace eg
