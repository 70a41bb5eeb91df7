// safetensors reading (memory-mapped) and writing.
//
// Format (https://github.com/huggingface/safetensors): u64 little-endian header length N, then N
// bytes of UTF-8 JSON {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, ...,
// optional "__metadata__": {str: str}}, then the data buffer; offsets are relative to the buffer.
// Supported dtypes: F32, F16, BF16. Every header is validated before use: JSON syntax, field types,
// dtype, offsets inside the file, end - begin == numel * dtype size. Any violation throws eg::Error
// naming the file and the tensor.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "format/mapped_file.h"

namespace eg {

/// One tensor inside a mapped file. Shape is in PyTorch order (outermost first, row-major).
/// F32/F16/BF16 from safetensors; block-quantized dtypes come from GGUF files (rows of
/// shape.back() elements, dtype_row_bytes each).
struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // points into the mapping (valid while the store lives)
  size_t nbytes = 0;
  int64_t numel() const;
  std::string shape_str() const;  // "[256, 1024]"
};

/// The named tensors of one checkpoint: a single model.safetensors, or the shards listed by
/// model.safetensors.index.json ({"weight_map": {name: shard file}}). Shards are mapped, not read.
class TensorStore {
 public:
  /// Opens <dir>/model.safetensors.index.json if present, else <dir>/model.safetensors.
  /// Throws eg::Error when neither exists or any file is invalid (a tensor listed in the index
  /// but missing from its shard, duplicate names, bad headers...).
  static TensorStore open_dir(const std::string& dir);
  /// Opens one .safetensors file.
  static TensorStore open_file(const std::string& path);

  /// nullptr if absent.
  const TensorInfo* find(const std::string& name) const;
  /// All tensor names, sorted.
  const std::vector<std::string>& names() const { return names_; }
  /// Sum of all tensors' data bytes.
  size_t total_bytes() const;

  /// Adds a tensor whose bytes live elsewhere (e.g. in a GGUF mapping); `owner` keeps them alive
  /// as long as the store. Block dtypes are allowed: t.nbytes must equal
  /// dtype_row_bytes(dtype, shape.back()) · (product of the other dims); a scalar (shape []) is
  /// one element of F32/F16/BF16. Throws eg::Error on a duplicate name or an inconsistent size.
  void add_external(TensorInfo t, std::shared_ptr<const void> owner);

 private:
  void add_file(const std::string& path, const std::vector<std::string>* expected_names);
  std::vector<std::shared_ptr<MappedFile>> files_;
  std::vector<std::shared_ptr<const void>> owners_;  // keep external tensor data alive
  std::unordered_map<std::string, TensorInfo> tensors_;
  std::vector<std::string> names_;
};

/// A tensor to write: `data` must hold numel(shape) * dtype_size(dtype) bytes.
struct TensorToWrite {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
};

/// Writes a safetensors file (tensors in the given order, header padded to 8 bytes with spaces).
/// `metadata` goes into "__metadata__". Throws eg::Error on I/O failure.
/// Implemented with SafetensorsWriter.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::unordered_map<std::string, std::string>& metadata = {});

/// Name, dtype and shape of a tensor to write (its bytes come later).
struct TensorSpec {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
};

/// Streaming safetensors writer, for files larger than memory: the tensor list is given up front
/// (the header is validated and written by the constructor), then the tensors' bytes are appended
/// in the listed order, in pieces of any size (append() may cross tensor boundaries), and
/// finish() checks that every byte came, fsyncs and renames the temporary file (created next to
/// `path`, mode 0644) into place. If finish() is never reached (an exception, a destructor run
/// early) the temporary file is removed and `path` is left untouched. Throws eg::Error naming the
/// file (and the tensor) on invalid input, on more bytes than announced, and on I/O failure.
class SafetensorsWriter {
 public:
  SafetensorsWriter(const std::string& path, const std::vector<TensorSpec>& tensors,
                    const std::unordered_map<std::string, std::string>& metadata = {});
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  /// Appends the next n bytes of tensor data.
  void append(const void* data, size_t n);
  /// Index of the tensor the next appended byte belongs to (== number of tensors when complete).
  size_t current_tensor() const;
  /// Bytes still expected in total.
  uint64_t remaining() const { return total_ - written_; }
  /// Completes the file (see above).
  void finish();

 private:
  [[noreturn]] void io_fail(const char* what);
  std::string path_, tmp_;
  int fd_ = -1;
  std::vector<std::string> names_;
  std::vector<uint64_t> ends_;  // cumulative end offset of each tensor
  uint64_t total_ = 0, written_ = 0;
};

}  // namespace eg
