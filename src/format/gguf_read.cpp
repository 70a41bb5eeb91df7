// GGUF reader: parsing and validation (format in gguf.h; ggml/src/gguf.cpp gguf_init_from_file_impl
// was read for the checks llama.cpp applies, the code here is our own).
#include <algorithm>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "format/gguf.h"

namespace eg {

namespace {

constexpr uint64_t kMaxStringBytes = uint64_t{1} << 30;  // no key/value/name is anywhere near 1 GiB
constexpr int kMaxArrayDepth = 8;

std::string printable(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < 120; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > 120) out += "...";
  return out;
}

/// Bounds-checked little-endian cursor over the file.
struct Cursor {
  const uint8_t* p;
  size_t size;
  size_t pos = 0;
  const std::string& origin;

  [[noreturn]] void fail(const std::string& msg) const { throw Error(origin + ": " + msg); }
  void need(uint64_t n, const char* what) const {
    if (n > size - pos)
      fail(std::string("truncated file: ") + what + " at byte " + std::to_string(pos) + " needs " +
           std::to_string(n) + " bytes, " + std::to_string(size - pos) + " left");
  }
  template <class T>
  T get(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  std::string str(const char* what) {
    const uint64_t n = get<uint64_t>(what);
    if (n > kMaxStringBytes) fail(std::string(what) + ": string length " + std::to_string(n) + " is too large");
    need(n, what);
    std::string s(reinterpret_cast<const char*>(p + pos), static_cast<size_t>(n));
    pos += static_cast<size_t>(n);
    return s;
  }
};

size_t scalar_size(GGUFType t) {
  switch (t) {
    case GGUFType::U8: case GGUFType::I8: case GGUFType::BOOL: return 1;
    case GGUFType::U16: case GGUFType::I16: return 2;
    case GGUFType::U32: case GGUFType::I32: case GGUFType::F32: return 4;
    case GGUFType::U64: case GGUFType::I64: case GGUFType::F64: return 8;
    default: return 0;
  }
}

bool valid_type(uint32_t t) { return t <= 12; }

int64_t read_int(Cursor& c, GGUFType t, const char* what) {
  switch (t) {
    case GGUFType::U8: return c.get<uint8_t>(what);
    case GGUFType::I8: return c.get<int8_t>(what);
    case GGUFType::U16: return c.get<uint16_t>(what);
    case GGUFType::I16: return c.get<int16_t>(what);
    case GGUFType::U32: return c.get<uint32_t>(what);
    case GGUFType::I32: return c.get<int32_t>(what);
    case GGUFType::U64: return static_cast<int64_t>(c.get<uint64_t>(what));
    case GGUFType::I64: return c.get<int64_t>(what);
    case GGUFType::BOOL: {
      const uint8_t b = c.get<uint8_t>(what);
      if (b > 1) c.fail(std::string(what) + ": bool value " + std::to_string(b) + " is not 0 or 1");
      return b;
    }
    default: return 0;
  }
}

double read_float(Cursor& c, GGUFType t, const char* what) {
  if (t == GGUFType::F32) return c.get<float>(what);
  return c.get<double>(what);
}

void read_value(Cursor& c, GGUFType t, GGUFValue& v, const std::string& key, int depth) {
  v.type = t;
  const std::string what_s = "value of '" + printable(key) + "'";
  const char* what = what_s.c_str();
  if (t == GGUFType::STRING) {
    v.s = c.str(what);
  } else if (t == GGUFType::F32 || t == GGUFType::F64) {
    v.f = read_float(c, t, what);
  } else if (t != GGUFType::ARRAY) {
    v.i = read_int(c, t, what);
  } else {
    if (depth >= kMaxArrayDepth) c.fail("metadata '" + printable(key) + "': arrays nested too deeply");
    const uint32_t et = c.get<uint32_t>(what);
    if (!valid_type(et))
      c.fail("metadata '" + printable(key) + "': unknown array element type " + std::to_string(et));
    v.elem = static_cast<GGUFType>(et);
    const uint64_t n = c.get<uint64_t>(what);
    // Every element takes at least one byte (strings: 8), so a count beyond the bytes left is
    // impossible: reject before allocating.
    const size_t min_elem = v.elem == GGUFType::STRING ? 8 : v.elem == GGUFType::ARRAY ? 12
                                                                                   : scalar_size(v.elem);
    if (n > (c.size - c.pos) / min_elem)
      c.fail("metadata '" + printable(key) + "': array count " + std::to_string(n) +
             " passes the end of the file");
    const size_t count = static_cast<size_t>(n);
    if (v.elem == GGUFType::STRING) {
      v.strs.resize(count);
      for (size_t k = 0; k < count; ++k) v.strs[k] = c.str(what);
    } else if (v.elem == GGUFType::ARRAY) {
      v.arrs.resize(count);
      for (size_t k = 0; k < count; ++k) read_value(c, GGUFType::ARRAY, v.arrs[k], key, depth + 1);
    } else if (v.elem == GGUFType::F32 || v.elem == GGUFType::F64) {
      v.floats.resize(count);
      for (size_t k = 0; k < count; ++k) v.floats[k] = read_float(c, v.elem, what);
    } else {
      v.ints.resize(count);
      for (size_t k = 0; k < count; ++k) v.ints[k] = read_int(c, v.elem, what);
    }
  }
}

}  // namespace

const char* gguf_type_name(GGUFType t) {
  switch (t) {
    case GGUFType::U8: return "u8";
    case GGUFType::I8: return "i8";
    case GGUFType::U16: return "u16";
    case GGUFType::I16: return "i16";
    case GGUFType::U32: return "u32";
    case GGUFType::I32: return "i32";
    case GGUFType::F32: return "f32";
    case GGUFType::BOOL: return "bool";
    case GGUFType::STRING: return "string";
    case GGUFType::ARRAY: return "array";
    case GGUFType::U64: return "u64";
    case GGUFType::I64: return "i64";
    case GGUFType::F64: return "f64";
  }
  return "?";
}

uint32_t ggml_type_id(DType t) {
  switch (t) {
    case DType::F32: return 0;
    case DType::F16: return 1;
    case DType::Q4_0: return 2;
    case DType::Q4_1: return 3;
    case DType::Q5_0: return 6;
    case DType::Q5_1: return 7;
    case DType::Q8_0: return 8;
    case DType::Q4_K: return 12;
    case DType::Q5_K: return 13;
    case DType::Q6_K: return 14;
    case DType::Q8_K: return 15;
    case DType::BF16: return 30;
    case DType::EG_Q4_G128: return kGgmlTypeEgQ4G128;
  }
  return 0;
}

bool dtype_from_ggml(uint32_t id, DType* out) {
  static const DType kAll[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0,
                               DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q4_K, DType::Q5_K,
                               DType::Q6_K, DType::Q8_K, DType::EG_Q4_G128};
  for (DType t : kAll)
    if (ggml_type_id(t) == id) {
      *out = t;
      return true;
    }
  return false;
}

bool GGUFValue::is_int() const {
  return !is_float() && type != GGUFType::STRING && type != GGUFType::ARRAY;
}

size_t GGUFValue::array_size() const {
  if (!is_array()) return 0;
  return ints.size() + floats.size() + strs.size() + arrs.size();
}

int64_t GGUFTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

std::shared_ptr<GGUFFile> GGUFFile::open(const std::string& path) {
  auto mf = MappedFile::open(path);
  auto g = std::shared_ptr<GGUFFile>(new GGUFFile());
  g->origin_ = path;
  g->file_ = mf;
  g->parse_all(mf->data(), mf->size());
  return g;
}

std::shared_ptr<GGUFFile> GGUFFile::parse(const uint8_t* data, size_t size, const std::string& origin) {
  auto g = std::shared_ptr<GGUFFile>(new GGUFFile());
  g->origin_ = origin;
  g->parse_all(data, size);
  return g;
}

void GGUFFile::parse_all(const uint8_t* data, size_t size) {
  Cursor c{data, size, 0, origin_};
  if (size < 4 || std::memcmp(data, "GGUF", 4) != 0) c.fail("not a GGUF file (bad magic)");
  c.pos = 4;
  version_ = c.get<uint32_t>("version");
  if (version_ == 1) c.fail("GGUF version 1 is not supported (only versions 2 and 3)");
  if (version_ != 2 && version_ != 3)
    c.fail("unsupported GGUF version " + std::to_string(version_) + " (only versions 2 and 3)");
  const uint64_t n_tensors = c.get<uint64_t>("tensor count");
  const uint64_t n_kv = c.get<uint64_t>("metadata count");
  // A metadata entry takes >= 8 + 4 + 1 bytes, a tensor info >= 8 + 4 + 8 + 4 + 8.
  if (n_kv > (size - c.pos) / 13)
    c.fail("metadata count " + std::to_string(n_kv) + " passes the end of the file");
  if (n_tensors > (size - c.pos) / 32)
    c.fail("tensor count " + std::to_string(n_tensors) + " passes the end of the file");

  kv_.reserve(static_cast<size_t>(n_kv));
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key = c.str("metadata key");
    if (kv_index_.count(key)) c.fail("duplicate metadata key '" + printable(key) + "'");
    const uint32_t t = c.get<uint32_t>("metadata type");
    if (!valid_type(t)) c.fail("metadata '" + printable(key) + "': unknown value type " + std::to_string(t));
    GGUFValue v;
    read_value(c, static_cast<GGUFType>(t), v, key, 0);
    kv_index_[key] = kv_.size();
    kv_.emplace_back(std::move(key), std::move(v));
  }

  if (const GGUFValue* a = find("general.alignment")) {
    if (!a->is_int() || a->i <= 0 || a->i > (1 << 30) || (a->i & (a->i - 1)) != 0)
      c.fail("general.alignment must be a positive power of two");
    alignment_ = static_cast<uint32_t>(a->i);
  }

  tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GGUFTensor t;
    t.name = c.str("tensor name");
    const std::string tn = "tensor '" + printable(t.name) + "'";
    if (tensor_index_.count(t.name)) c.fail("duplicate " + tn);
    const uint32_t nd = c.get<uint32_t>("tensor n_dims");
    if (nd == 0 || nd > 4) c.fail(tn + ": n_dims " + std::to_string(nd) + " is not in 1..4");
    uint64_t numel = 1;
    for (uint32_t d = 0; d < nd; ++d) {
      const int64_t ne = c.get<int64_t>("tensor dims");
      if (ne <= 0) c.fail(tn + ": dimension " + std::to_string(d) + " is " + std::to_string(ne) + " (must be > 0)");
      if (__builtin_mul_overflow(numel, static_cast<uint64_t>(ne), &numel) ||
          numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        c.fail(tn + ": element count overflows");
      t.ne.push_back(ne);
    }
    t.ggml_type = c.get<uint32_t>("tensor type");
    if (!dtype_from_ggml(t.ggml_type, &t.dtype))
      c.fail(tn + ": unknown or unsupported ggml type " + std::to_string(t.ggml_type));
    if (!row_fits_blocks(t.dtype, t.ne[0]))
      c.fail(tn + ": row length " + std::to_string(t.ne[0]) + " is not a multiple of the " +
             dtype_name(t.dtype) + " block size " + std::to_string(dtype_block_elems(t.dtype)));
    t.offset = c.get<uint64_t>("tensor offset");
    if (t.offset % alignment_ != 0)
      c.fail(tn + ": offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
             std::to_string(alignment_));
    uint64_t nb = dtype_row_bytes(t.dtype, t.ne[0]);
    for (size_t d = 1; d < t.ne.size(); ++d)
      if (__builtin_mul_overflow(nb, static_cast<uint64_t>(t.ne[d]), &nb)) c.fail(tn + ": byte size overflows");
    if (nb > std::numeric_limits<size_t>::max()) c.fail(tn + ": byte size overflows");
    t.nbytes = static_cast<size_t>(nb);
    tensor_index_[t.name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }

  // Data section: aligned after the tensor infos.
  uint64_t ds = c.pos;
  ds = (ds + alignment_ - 1) / alignment_ * alignment_;
  if (ds > size && !tensors_.empty()) c.fail("truncated file: no data section after the tensor infos");
  data_offset_ = static_cast<size_t>(ds);
  for (GGUFTensor& t : tensors_) {
    uint64_t end = 0;
    if (__builtin_add_overflow(ds, t.offset, &end) || __builtin_add_overflow(end, t.nbytes, &end) || end > size)
      c.fail("tensor '" + printable(t.name) + "': data [" + std::to_string(t.offset) + ", +" +
             std::to_string(t.nbytes) + ") passes the end of the file (data section has " +
             std::to_string(size > ds ? size - ds : 0) + " bytes)");
    t.data = data + ds + t.offset;
  }
  // Tensors must not overlap (llama.cpp lays them out back to back; overlap means corruption).
  std::vector<const GGUFTensor*> by_off;
  for (const GGUFTensor& t : tensors_) by_off.push_back(&t);
  std::sort(by_off.begin(), by_off.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t k = 1; k < by_off.size(); ++k)
    if (by_off[k - 1]->offset + by_off[k - 1]->nbytes > by_off[k]->offset && by_off[k - 1]->nbytes > 0)
      c.fail("tensor '" + printable(by_off[k]->name) + "' overlaps tensor '" + printable(by_off[k - 1]->name) + "'");
}

const GGUFValue* GGUFFile::find(const std::string& key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const GGUFTensor* GGUFFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {
[[noreturn]] void wrong_type(const std::string& origin, const std::string& key, const GGUFValue& v,
                             const char* expected) {
  throw Error(origin + ": metadata '" + key + "' is " + gguf_type_name(v.type) + ", expected " + expected);
}
}  // namespace

int64_t GGUFFile::get_int(const std::string& key) const {
  const GGUFValue* v = find(key);
  if (!v) throw Error(origin_ + ": missing metadata key '" + key + "'");
  if (!v->is_int()) wrong_type(origin_, key, *v, "an integer");
  return v->i;
}

int64_t GGUFFile::get_int(const std::string& key, int64_t def) const {
  return find(key) ? get_int(key) : def;
}

double GGUFFile::get_float(const std::string& key, double def) const {
  const GGUFValue* v = find(key);
  if (!v) return def;
  if (v->is_float()) return v->f;
  if (v->is_int()) return static_cast<double>(v->i);
  wrong_type(origin_, key, *v, "a number");
}

bool GGUFFile::get_bool(const std::string& key, bool def) const {
  const GGUFValue* v = find(key);
  if (!v) return def;
  if (!v->is_int()) wrong_type(origin_, key, *v, "a bool");
  return v->i != 0;
}

std::string GGUFFile::get_string(const std::string& key) const {
  const GGUFValue* v = find(key);
  if (!v) throw Error(origin_ + ": missing metadata key '" + key + "'");
  if (v->type != GGUFType::STRING) wrong_type(origin_, key, *v, "a string");
  return v->s;
}

std::string GGUFFile::get_string(const std::string& key, const std::string& def) const {
  return find(key) ? get_string(key) : def;
}

}  // namespace eg
