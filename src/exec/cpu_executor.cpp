// The CPU step executor: today's forward pass (Model::forward, Model::forward_batch) behind the
// StepExecutor boundary (executor.h). Host KV pages; the CPU thread pool
// (backend/cpu/thread_pool.h) at the calling thread's thread count.
#include "backend/cpu/kernels.h"
#include "backend/cpu/thread_pool.h"
#include "exec/executor.h"

namespace eg {
namespace {

struct CpuWorkspace final : StepWorkspace {
  ForwardScratch scratch;
};

ForwardScratch& scratch_of(StepWorkspace& ws) { return static_cast<CpuWorkspace&>(ws).scratch; }

class CpuExecutor final : public StepExecutor {
 public:
  explicit CpuExecutor(const Model& m) : m_(m) {}

  Device device() const override { return Device::CPU; }
  std::string description() const override {
    return std::string("cpu (") + cpu::simd_target_name() + ", " +
           std::to_string(cpu::num_threads()) + " threads)";
  }
  const ModelConfig& config() const override { return m_.config(); }
  std::unique_ptr<StepWorkspace> new_workspace() const override { return std::make_unique<CpuWorkspace>(); }
  std::unique_ptr<KVCache> new_kv_cache(const KVCacheOptions& opt) const override {
    return std::make_unique<KVCache>(m_.config(), opt);
  }
  void prefill(const int32_t* tokens, int T, KVCache& kv, StepWorkspace& ws, LogitsMode mode,
               std::vector<float>& logits) const override {
    m_.forward(tokens, T, kv, scratch_of(ws), mode, logits);
  }
  void prefill_media(const int32_t* tokens, int T, const std::vector<EmbedSpan>& media, KVCache& kv,
                     StepWorkspace& ws, LogitsMode mode, std::vector<float>& logits) const override {
    m_.forward(tokens, T, kv, scratch_of(ws), mode, logits, &media);
  }
  void decode(const int32_t* tokens, int B, KVCache* const* kvs, StepWorkspace& ws,
              std::vector<float>& logits) const override {
    m_.forward_batch(tokens, B, kvs, scratch_of(ws), logits);
  }

 private:
  const Model& m_;
};

}  // namespace

std::unique_ptr<StepExecutor> make_cpu_executor(const Model& model) {
  return std::make_unique<CpuExecutor>(model);
}

}  // namespace eg
