// Device query, streams, device and pinned host buffers, graphs, events and event timers
// (cuda_backend.h).
#include <atomic>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>
#include <utility>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_util.h"

namespace eg::cuda {
using detail::stream_of;

namespace {
std::atomic<bool> g_pdl{false};
}

bool detail::pdl_enabled() { return g_pdl.load(std::memory_order_relaxed); }

void detail::ensure_dynamic_smem(const void* k, size_t dynamic_bytes, const char* what) {
  struct Entry {
    size_t static_bytes = 0, raised_to = 0;
    bool known = false;
  };
  static std::mutex mu;
  // The attribute is per kernel and device: entry [dev] of the kernel's vector. (No std::map:
  // nvcc 11.8's front end rejects libstdc++ 12's map.)
  static std::unordered_map<const void*, std::vector<Entry>> seen;
  int dev = 0;
  EG_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  std::vector<Entry>& per_dev = seen[k];
  if (per_dev.size() <= static_cast<size_t>(dev)) per_dev.resize(static_cast<size_t>(dev) + 1);
  Entry& e = per_dev[static_cast<size_t>(dev)];
  if (!e.known) {
    cudaFuncAttributes fa{};
    EG_CUDA_CHECK(cudaFuncGetAttributes(&fa, k));
    e.static_bytes = fa.sharedSizeBytes;
    e.known = true;
  }
  const size_t total = e.static_bytes + dynamic_bytes;
  if (total <= 48 * 1024 || dynamic_bytes <= e.raised_to) return;
  int optin = 0;
  EG_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  if (total > static_cast<size_t>(optin)) {
    throw Error(std::string("CUDA ") + what + ": needs " + std::to_string(dynamic_bytes) + " bytes of dynamic + " +
                std::to_string(e.static_bytes) + " of static shared memory per block; the device allows " +
                std::to_string(optin));
  }
  EG_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(dynamic_bytes)));
  e.raised_to = dynamic_bytes;
}

bool set_programmatic_launch(bool on) {
#if CUDART_VERSION >= 12000
  g_pdl.store(on, std::memory_order_relaxed);
  return on;
#else
  (void)on;
  return false;
#endif
}

bool programmatic_launch() { return g_pdl.load(std::memory_order_relaxed); }

bool device_available() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver"/"no device" error
    return false;
  }
  return n > 0;
}

DeviceInfo device_info(int device) {
  if (!device_available()) throw Error("CUDA: no CUDA device is available");
  cudaDeviceProp p{};
  EG_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  DeviceInfo d;
  d.name = p.name;
  d.cc_major = p.major;
  d.cc_minor = p.minor;
  d.sm_count = p.multiProcessorCount;
  d.global_mem_bytes = p.totalGlobalMem;
  d.l2_bytes = static_cast<size_t>(p.l2CacheSize);
  return d;
}

Stream::Stream(int device) : device_(device) {
  if (!device_available()) throw Error("CUDA: no CUDA device is available");
  EG_CUDA_CHECK(cudaSetDevice(device));
  EG_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device));
  cudaStream_t st = nullptr;
  EG_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  stream_ = st;
}

Stream::~Stream() {
  if (stream_) cudaStreamDestroy(stream_of(stream_));
}

Stream::Stream(Stream&& o) noexcept
    : stream_(std::exchange(o.stream_, nullptr)), device_(o.device_), sm_count_(o.sm_count_) {}

Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    if (stream_) cudaStreamDestroy(stream_of(stream_));
    stream_ = std::exchange(o.stream_, nullptr);
    device_ = o.device_;
    sm_count_ = o.sm_count_;
  }
  return *this;
}

void Stream::sync() const { EG_CUDA_CHECK(cudaStreamSynchronize(stream_of(stream_))); }

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0) EG_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::upload(const void* host, size_t n, size_t offset) {
  if (offset > bytes_ || n > bytes_ - offset) {
    throw Error("CUDA: upload of " + std::to_string(n) + " bytes at " + std::to_string(offset) +
                " overruns a buffer of " + std::to_string(bytes_));
  }
  if (n) EG_CUDA_CHECK(cudaMemcpy(static_cast<char*>(ptr_) + offset, host, n, cudaMemcpyHostToDevice));
  // A pageable host→device cudaMemcpy may return before its DMA lands, and kernels on the
  // backend's non-blocking streams do not wait for the legacy stream: wait here.
  if (n) EG_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
}

void DeviceBuffer::download(void* host, size_t n, size_t offset) const {
  if (offset > bytes_ || n > bytes_ - offset) {
    throw Error("CUDA: download of " + std::to_string(n) + " bytes at " + std::to_string(offset) +
                " overruns a buffer of " + std::to_string(bytes_));
  }
  if (n) EG_CUDA_CHECK(cudaMemcpy(host, static_cast<const char*>(ptr_) + offset, n, cudaMemcpyDeviceToHost));
}

void DeviceBuffer::zero() {
  if (!bytes_) return;
  EG_CUDA_CHECK(cudaMemset(ptr_, 0, bytes_));
  EG_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));  // cudaMemset is asynchronous: as upload
  EG_CUDA_CHECK(cudaDeviceSynchronize());  // synchronous, like the copies (streams are non-blocking)
}

Graph::~Graph() {
  if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  if (graph_) cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
}

void Graph::begin_capture(const Stream& s) {
  if (graph_ || stream_) throw Error("CUDA: Graph::begin_capture on a graph already captured");
  stream_ = &s;
  EG_CUDA_CHECK(cudaStreamBeginCapture(stream_of(s.handle()), cudaStreamCaptureModeThreadLocal));
}

void Graph::end_capture() {
  if (!stream_ || graph_) throw Error("CUDA: Graph::end_capture without begin_capture");
  cudaGraph_t g = nullptr;
  EG_CUDA_CHECK(cudaStreamEndCapture(stream_of(stream_->handle()), &g));
  graph_ = g;
  cudaGraphExec_t e = nullptr;
  // The three-argument form exists in CUDA 11.4+ and 12/13 (the five-argument one is gone in 12).
  EG_CUDA_CHECK(cudaGraphInstantiateWithFlags(&e, g, 0));
  exec_ = e;
}

void Graph::launch() {
  if (!exec_) throw Error("CUDA: Graph::launch before end_capture");
  EG_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), stream_of(stream_->handle())));
}

EventTimer::EventTimer(const Stream& s) : stream_(&s) {
  cudaEvent_t a = nullptr, b = nullptr;
  EG_CUDA_CHECK(cudaEventCreate(&a));
  EG_CUDA_CHECK(cudaEventCreate(&b));
  begin_ = a;
  end_ = b;
}

EventTimer::~EventTimer() {
  cudaEventDestroy(static_cast<cudaEvent_t>(begin_));
  cudaEventDestroy(static_cast<cudaEvent_t>(end_));
}

void EventTimer::start() {
  EG_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(begin_), stream_of(stream_->handle())));
}

void EventTimer::stop() {
  EG_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(end_), stream_of(stream_->handle())));
}

float EventTimer::elapsed_ms() {
  EG_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(end_)));
  float ms = 0.0f;
  EG_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(begin_), static_cast<cudaEvent_t>(end_)));
  return ms;
}

PinnedBuffer::PinnedBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0) EG_CUDA_CHECK(cudaHostAlloc(&ptr_, bytes, cudaHostAllocDefault));
}

PinnedBuffer::~PinnedBuffer() {
  if (ptr_) cudaFreeHost(ptr_);
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cudaFreeHost(ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

Event::Event() {
  cudaEvent_t e = nullptr;
  EG_CUDA_CHECK(cudaEventCreate(&e));
  ev_ = e;
}

Event::~Event() {
  if (ev_) cudaEventDestroy(static_cast<cudaEvent_t>(ev_));
}

Event::Event(Event&& o) noexcept : ev_(std::exchange(o.ev_, nullptr)) {}

Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    if (ev_) cudaEventDestroy(static_cast<cudaEvent_t>(ev_));
    ev_ = std::exchange(o.ev_, nullptr);
  }
  return *this;
}

void Event::record(const Stream& s) {
  EG_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(ev_), stream_of(s.handle())));
}

void Event::wait() const { EG_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(ev_))); }

float Event::ms_between(const Event& a, const Event& b) {
  b.wait();
  float ms = 0.0f;
  EG_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(a.ev_), static_cast<cudaEvent_t>(b.ev_)));
  return ms;
}

}  // namespace eg::cuda
