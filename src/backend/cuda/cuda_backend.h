// The CUDA backend's C++ API (decode at batch 1). No CUDA types appear here, so CPU-only code can
// include it; the library edgegemma_cuda (src/backend/cuda/*.cu, built when EDGEGEMMA_CUDA is on)
// implements it. docs/cuda.md describes the build, the weight layout and the kernels.
//
// Conventions
//  - Every pointer named *_dev is device memory (a DeviceBuffer's data()). Kernels are enqueued on
//    the given Stream and return at once: nothing here synchronises except Stream::sync, the
//    DeviceBuffer copies and the Graph/EventTimer calls that say so. So a sequence of calls can be
//    captured into a Graph (one launch per decode step).
//  - Errors (no device, a failed CUDA call, unsupported dtype/shape) throw eg::Error.
//  - Activations are f32. For block-quantized weights (Q4_0, Q8_0) the matvec reads the input as
//    int8 blocks of 32 (ActQ8 below), quantized exactly as the CPU does it
//    (cpu::quantize_act_row: d = amax/127, q = round-half-even(x·(1/d))), so the integer block
//    sums equal the CPU's and y differs from ops::matmul only by the f32 summation order.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace eg::cuda {

/// True if a CUDA device can be used (driver loaded, at least one device). Never throws.
bool device_available();

struct DeviceInfo {
  std::string name;
  int cc_major = 0, cc_minor = 0;  // compute capability (9.0 for the H100/H200)
  int sm_count = 0;
  size_t global_mem_bytes = 0;
  size_t l2_bytes = 0;
};
/// Properties of device `device`; throws eg::Error if there is none.
DeviceInfo device_info(int device = 0);

/// A CUDA stream on one device (makes that device current on construction). Move-only.
class Stream {
 public:
  explicit Stream(int device = 0);
  ~Stream();
  Stream(Stream&& o) noexcept;
  Stream& operator=(Stream&& o) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  /// Waits until all work enqueued on the stream has finished; throws if a kernel failed.
  void sync() const;
  void* handle() const { return stream_; }  // the cudaStream_t
  int device() const { return device_; }
  int sm_count() const { return sm_count_; }

 private:
  void* stream_ = nullptr;
  int device_ = 0;
  int sm_count_ = 0;
};

/// Device memory (cudaMalloc). Move-only. Copies are synchronous.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  template <class T>
  T* as() const { return static_cast<T*>(ptr_); }
  /// Host → device, `n` bytes at byte `offset` (offset + n ≤ bytes()).
  void upload(const void* host, size_t n, size_t offset = 0);
  /// Device → host.
  void download(void* host, size_t n, size_t offset = 0) const;
  void zero();

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

/// Page-locked host memory (cudaHostAlloc), for staging host → device copies: a copy from it is
/// truly asynchronous (copy_to_device_async returns before the bytes are read, unlike one from
/// pageable memory, and it runs at the full link rate), so the host must not rewrite the bytes
/// until the copy has run (Event::wait on an event recorded after it). Move-only.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& o) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

/// A CUDA event (timing enabled). record(s) marks the point the work enqueued on s so far will
/// reach; wait() blocks the host until it is reached (at once if never recorded). Move-only.
class Event {
 public:
  Event();
  ~Event();
  Event(Event&& o) noexcept;
  Event& operator=(Event&& o) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(const Stream& s);
  void wait() const;
  /// Device milliseconds from a to b (both recorded on one stream; waits for b).
  static float ms_between(const Event& a, const Event& b);

 private:
  void* ev_ = nullptr;
};

// ---- Weights --------------------------------------------------------------------------------

/// Rows per tile of the GPU weight layout.
inline constexpr int kTileRows = 8;

/// A weight matrix [rows, cols] (nn.Linear layout, y = W·x) in the GPU layout ("tiled"):
/// rows are grouped into tiles of kTileRows (the last tile padded with zero rows). A row is cut
/// into chunks: Q4_0 — one block's 16 nibble bytes; Q8_0 — one block's 32 int8; F16/BF16 — 8
/// elements (16 bytes). Inside a tile, chunk c of row r lives at
///     data + (tile · n_chunks + c) · kTileRows · chunk_bytes + r · chunk_bytes
/// i.e. the chunks of the 8 rows for one column range are adjacent, so lanes that read chunks
/// (c..c+3) of rows 0..7 read one contiguous 512 B (Q4_0/F16/BF16) or 1 KB (Q8_0) span.
/// Block scales (Q4_0, Q8_0: the f16 d) are in a second array in the same tile order:
///     scales + (tile · n_chunks + c) · kTileRows + r      (uint16 f16 bits)
/// The bytes are the GGUF block's, only rearranged (no requantization): exact.
struct DeviceWeight {
  DType dtype = DType::F32;
  int64_t rows = 0, cols = 0;
  DeviceBuffer data;    // chunks, tiled as above
  DeviceBuffer scales;  // Q4_0/Q8_0 only
  /// Bytes of the weight in its GGUF layout (what a matvec must read at least).
  size_t gguf_bytes() const;
};

/// True for the dtypes the matvec kernels take: Q4_0, Q8_0, F16, BF16.
bool matvec_supports(DType t);

/// The tiled layout built on the host (what upload_weight copies to the device): `data` and
/// `scales` as described at DeviceWeight. Exposed for tests. `src` holds `rows` rows of
/// dtype_row_bytes(t, cols) bytes. Throws eg::Error for an unsupported dtype or a cols that is not
/// a multiple of the chunk size (32 for Q4_0/Q8_0, 8 for F16/BF16).
struct HostTiledWeight {
  std::string data;
  std::string scales;
};
HostTiledWeight tile_weight(const void* src, DType t, int64_t rows, int64_t cols);

/// Uploads a weight (GGUF/safetensors layout at `src`) once, in the tiled layout.
DeviceWeight upload_weight(const void* src, DType t, int64_t rows, int64_t cols);

// ---- Activations ----------------------------------------------------------------------------

/// Bytes of a quantized activation vector of K elements (K a multiple of 32): K int8 values,
/// then K/32 pairs {float d, int32 s} (s = Σ q of the block), i.e. cpu::ActQ8 split into two
/// arrays so the int8 part is 16-byte aligned.
size_t act_q8_bytes(int64_t K);

/// act_dev ← quantize(x_dev[0..K)) (the CPU's scheme, see the top of this file).
void quantize_act(const Stream& s, const float* x_dev, int64_t K, void* act_dev);

// ---- Kernels (batch 1) ----------------------------------------------------------------------

/// Tuning knob of the matvec: warps that share one tile along K (1, 2, 4 or 8; 0 = chosen from
/// the shape and the multiprocessor count). For benchmarks; results are the same up to f32
/// summation order.
struct MatvecConfig {
  int warps_per_tile = 0;
};

/// y_dev[n] = Σ_k W[n,k]·x[k], n < W.rows. F16/BF16 weights read x_dev (f32, W.cols); Q4_0/Q8_0
/// weights read act_dev (quantize_act of x). The other input may be nullptr.
void matvec(const Stream& s, const DeviceWeight& W, const float* x_dev, const void* act_dev,
            float* y_dev, MatvecConfig cfg = {});

/// Fused LM head: logits = W·x (as matvec), then (softcap > 0) logit = softcap·tanh(logit/softcap),
/// then argmax over all rows (ties: the lowest id, as torch.argmax and eg::argmax). If logits_dev
/// is non-null the (capped) logits are written too. The result is one uint64 at result_dev
/// (8 bytes of device memory): read it with decode_argmax. NaN logits are never chosen.
void lm_head_argmax(const Stream& s, const DeviceWeight& W, const float* x_dev,
                    const void* act_dev, float softcap, uint64_t* result_dev,
                    float* logits_dev = nullptr, MatvecConfig cfg = {});

struct ArgmaxResult {
  int32_t id = -1;
  float value = 0.0f;  // the (capped) logit at id
};
/// Decodes lm_head_argmax's result word (copied to the host).
ArgmaxResult decode_argmax(uint64_t key);

/// RMSNorm of `rows` rows of n f32 (ops::rmsnorm's semantics): y = x·rsqrt(mean(x²)+eps)·(w_offset
/// + w), w_dev: n f32 on the device or nullptr (no scale). y may alias x. If act_dev is non-null
/// (rows == 1, n a multiple of 32) y is also quantized into it (as quantize_act), for a following
/// quantized matvec without another launch.
void rmsnorm(const Stream& s, const float* x_dev, int64_t rows, int64_t n, const float* w_dev,
             float w_offset, float eps, float* y_dev, void* act_dev = nullptr);

/// Programmatic dependent launch (Hopper, built with CUDA ≥ 12): each kernel may be scheduled
/// while the previous one drains; it prefetches its weights into L2, then waits for the previous
/// kernel's results (griddepcontrol.wait). Off by default. Returns whether it is now on (false
/// when requested on a CUDA 11 build). Process-wide; set it before capturing graphs.
bool set_programmatic_launch(bool on);
bool programmatic_launch();

// ---- Graphs and timing ----------------------------------------------------------------------

/// A captured CUDA graph: begin_capture(s), enqueue work on s, end_capture(), then launch() any
/// number of times (each launch replays all captured kernels on s).
class Graph {
 public:
  Graph() = default;
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  void begin_capture(const Stream& s);
  void end_capture();
  void launch();

 private:
  const Stream* stream_ = nullptr;
  void* graph_ = nullptr;
  void* exec_ = nullptr;
};

/// Elapsed device time between start() and stop() on one stream (CUDA events).
class EventTimer {
 public:
  explicit EventTimer(const Stream& s);
  ~EventTimer();
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  void start();
  void stop();
  /// Waits for stop() and returns the milliseconds between the two events.
  float elapsed_ms();

 private:
  const Stream* stream_;
  void* begin_ = nullptr;
  void* end_ = nullptr;
};

}  // namespace eg::cuda
