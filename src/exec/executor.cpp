// Device names, the device choice, and the host-side defaults of StepExecutor (executor.h).
#include "exec/executor.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "core/error.h"

#ifdef EG_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "exec/cuda_executor.h"
#endif

namespace eg {

const char* device_name(Device d) {
  switch (d) {
    case Device::CPU: return "cpu";
    case Device::CUDA: return "cuda";
  }
  return "?";
}

DeviceRequest parse_device(const std::string& s) {
  std::string v = s;
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  if (v == "auto") return DeviceRequest{true, Device::CPU};
  if (v == "cpu") return DeviceRequest{false, Device::CPU};
  if (v == "cuda") return DeviceRequest{false, Device::CUDA};
  throw Error("unknown device '" + s + "' (choose auto, cpu or cuda)");
}

DeviceRequest device_for_media(DeviceRequest r, bool may_have_media) {
  (void)may_have_media;  // every executor takes media embeddings now (prefill_media)
  return r;
}

bool device_compiled_in(Device d) {
  switch (d) {
    case Device::CPU: return true;
    case Device::CUDA:
#ifdef EG_HAVE_CUDA
      return true;
#else
      return false;
#endif
  }
  return false;
}

int32_t argmax_row(const float* x, int64_t n) {
  int64_t best = 0;
  float bv = -INFINITY;
  bool found = false;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) continue;
    if (!found || x[i] > bv) {
      bv = x[i];
      best = i;
      found = true;
    }
  }
  return static_cast<int32_t>(best);
}

void StepExecutor::decode_argmax(const int32_t* tokens, int B, KVCache* const* kvs, StepWorkspace& ws,
                                 int32_t* out) const {
  std::vector<float> logits;
  decode(tokens, B, kvs, ws, logits);
  const int64_t V = config().vocab_size;
  for (int b = 0; b < B; ++b) out[b] = argmax_row(logits.data() + b * V, V);
}

std::unique_ptr<StepExecutor> make_executor(const Model& model, DeviceRequest request) {
  if (request.automatic) {
#ifdef EG_HAVE_CUDA
    // A GPU and a model the CUDA executor runs: CUDA; anything else: the CPU.
    if (cuda::device_available() && cuda_unsupported_reason(model).empty()) return make_cuda_executor(model);
#endif
    return make_cpu_executor(model);
  }
  if (!device_compiled_in(request.device))
    throw Error(std::string("--device ") + device_name(request.device) + ": this build has no " +
                device_name(request.device) + " executor (use --device cpu)");
#ifdef EG_HAVE_CUDA
  if (request.device == Device::CUDA) return make_cuda_executor(model);
#endif
  return make_cpu_executor(model);
}

void StepExecutor::prefill_media(const int32_t* tokens, int T, const std::vector<EmbedSpan>& media, KVCache& kv,
                                 StepWorkspace& ws, LogitsMode mode, std::vector<float>& logits) const {
  if (!media.empty())
    throw Error(std::string("images are not supported on the ") + device_name(device()) + " device yet (use --device cpu)");
  prefill(tokens, T, kv, ws, mode, logits);
}

}  // namespace eg
