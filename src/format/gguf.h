// GGUF reading (memory-mapped, strictly validated) and streaming writing.
//
// Format (ggml docs/gguf.md, ggml/src/gguf.cpp): little-endian
//   u32 magic "GGUF", u32 version (2 or 3), u64 tensor count, u64 metadata count;
//   metadata: string key, u32 value type, value   (string = u64 length + UTF-8 bytes, no NUL;
//             array = u32 element type + u64 count + elements; arrays may nest);
//   tensor infos: string name, u32 n_dims (1..4), u64 ne[n_dims] (ne[0] = innermost = row length),
//             u32 ggml type, u64 offset (relative to the data section, a multiple of the alignment);
//   padding to `general.alignment` (u32, default 32), then the data section.
// A tensor's bytes: dtype_row_bytes(type, ne[0]) · ne[1] · ne[2] · ne[3].
// Every structural property is checked before use; any violation throws eg::Error naming the file
// and the key/tensor ("model.gguf: tensor 'blk.0.attn_q.weight': offset 123 is not a multiple of
// the alignment 32").
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "format/mapped_file.h"

namespace eg {

/// GGUF metadata value types (gguf.h: GGUF_TYPE_*).
enum class GGUFType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STRING = 8, ARRAY = 9,
  U64 = 10, I64 = 11, F64 = 12,
};
const char* gguf_type_name(GGUFType t);

/// ggml tensor type ids (ggml.h: GGML_TYPE_*) of the types edgegemma supports. EG_Q4_G128 is our
/// own extension; its id (1024) is far outside ggml's range, so llama.cpp rejects such files
/// instead of misreading them.
constexpr uint32_t kGgmlTypeEgQ4G128 = 1024;
/// DType -> ggml type id.
uint32_t ggml_type_id(DType t);
/// ggml type id -> DType; false for types we do not support (IQ*, Q2_K, Q3_K, Q8_1, ...).
bool dtype_from_ggml(uint32_t id, DType* out);

/// One metadata value. Scalars: integers (and bool) in `i` (u64 bit pattern for U64), floats in
/// `f`, strings in `s`. Arrays: `elem` is the element type and exactly one of ints / floats /
/// strs / arrs holds the elements (ints for integer and bool elements, floats for F32/F64).
struct GGUFValue {
  GGUFType type = GGUFType::U32;
  int64_t i = 0;
  double f = 0.0;
  std::string s;
  GGUFType elem = GGUFType::U8;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strs;
  std::vector<GGUFValue> arrs;

  bool is_int() const;        // integer or bool scalar
  bool is_float() const { return type == GGUFType::F32 || type == GGUFType::F64; }
  bool is_array() const { return type == GGUFType::ARRAY; }
  size_t array_size() const;  // 0 for scalars

  static GGUFValue u32(uint32_t v);
  static GGUFValue i32(int32_t v);
  static GGUFValue u64(uint64_t v);
  static GGUFValue f32(float v);
  static GGUFValue boolean(bool v);
  static GGUFValue str(std::string v);
  static GGUFValue str_array(std::vector<std::string> v);
  static GGUFValue f32_array(std::vector<double> v);
  static GGUFValue i32_array(std::vector<int64_t> v);
  static GGUFValue bool_array(std::vector<int64_t> v);
};

/// One tensor of a GGUF file. `ne` is ggml order (ne[0] = row length); shape() is PyTorch order.
struct GGUFTensor {
  std::string name;
  DType dtype = DType::F32;
  uint32_t ggml_type = 0;
  std::vector<int64_t> ne;
  uint64_t offset = 0;          // relative to the data section
  const uint8_t* data = nullptr;  // into the mapping
  size_t nbytes = 0;
  std::vector<int64_t> shape() const { return std::vector<int64_t>(ne.rbegin(), ne.rend()); }
  int64_t numel() const;
};

/// A parsed, validated, memory-mapped GGUF file.
class GGUFFile {
 public:
  /// Maps and parses `path`. Throws eg::Error (see the header comment).
  static std::shared_ptr<GGUFFile> open(const std::string& path);
  /// Parses a buffer already in memory (for tests and fuzzing); `origin` names it in errors.
  /// The buffer must outlive the returned object.
  static std::shared_ptr<GGUFFile> parse(const uint8_t* data, size_t size, const std::string& origin);

  const std::string& path() const { return origin_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  size_t data_offset() const { return data_offset_; }

  /// Metadata in file order.
  const std::vector<std::pair<std::string, GGUFValue>>& metadata() const { return kv_; }
  const GGUFValue* find(const std::string& key) const;
  /// Typed getters; the required forms throw "<file>: missing metadata key '<key>'" or
  /// "<file>: metadata '<key>' is <type>, expected <what>".
  int64_t get_int(const std::string& key) const;
  int64_t get_int(const std::string& key, int64_t def) const;
  double get_float(const std::string& key, double def) const;   // accepts ints too
  bool get_bool(const std::string& key, bool def) const;
  std::string get_string(const std::string& key) const;
  std::string get_string(const std::string& key, const std::string& def) const;

  /// Tensors in file order.
  const std::vector<GGUFTensor>& tensors() const { return tensors_; }
  const GGUFTensor* find_tensor(const std::string& name) const;
  /// The mapping (null for parse()).
  const std::shared_ptr<MappedFile>& mapping() const { return file_; }

 private:
  void parse_all(const uint8_t* data, size_t size);
  std::string origin_;
  std::shared_ptr<MappedFile> file_;
  uint32_t version_ = 0, alignment_ = 32;
  size_t data_offset_ = 0;
  std::vector<std::pair<std::string, GGUFValue>> kv_;
  std::map<std::string, size_t> kv_index_;
  std::vector<GGUFTensor> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

/// A tensor to write: name, type, ggml-order dims (ne[0] = row length).
struct GGUFTensorSpec {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> ne;
  size_t nbytes() const;
};

/// Streaming GGUF v3 writer. Metadata and the tensor list are given up front (the constructor
/// validates and writes the header; general.alignment, if present, must be a power of two, else
/// 32 is used); then each tensor's bytes are appended in order, in pieces of any size
/// (append() pads to the alignment between tensors by itself); finish() checks completeness,
/// fsyncs and renames the temporary file into place. If finish() is never reached the temporary
/// file is removed and `path` is untouched. Throws eg::Error naming the file/tensor.
class GGUFWriter {
 public:
  GGUFWriter(const std::string& path, const std::vector<std::pair<std::string, GGUFValue>>& metadata,
             const std::vector<GGUFTensorSpec>& tensors);
  ~GGUFWriter();
  GGUFWriter(const GGUFWriter&) = delete;
  GGUFWriter& operator=(const GGUFWriter&) = delete;

  void append(const void* data, size_t n);
  /// Bytes of tensor data still expected in total.
  uint64_t remaining() const { return total_ - written_; }
  void finish();

 private:
  void write_raw(const void* p, size_t n);
  void pad_to(uint64_t pos);
  [[noreturn]] void io_fail(const char* what);
  std::string path_, tmp_;
  int fd_ = -1;
  uint32_t alignment_ = 32;
  std::vector<uint64_t> begins_, sizes_;  // per tensor, relative to the data section
  size_t cur_ = 0;                        // tensor being written
  uint64_t cur_done_ = 0;                 // its bytes written
  uint64_t pos_ = 0;                      // current position in the data section
  uint64_t total_ = 0, written_ = 0;
  std::vector<uint8_t> buf_;              // write buffer
};

}  // namespace eg
