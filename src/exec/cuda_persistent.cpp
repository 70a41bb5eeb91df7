// PersistentStep (cuda_persistent.h): the device tables of the persistent decode step.
#include "exec/cuda_persistent.h"

#include "backend/cuda/decode_kernels.h"
#include "core/error.h"

namespace eg {

void PersistentStep::enqueue(const cuda::Stream& s, const PersistentShape& sh, const PersistentBuffers& b,
                             int32_t token, int pos, const std::vector<cuda::DeviceBuffer>& k,
                             const std::vector<cuda::DeviceBuffer>& v, uint64_t kv_serial, cuda::KVElem elem) {
  const int L = static_cast<int>(sh.layers.size());
  if (static_cast<int>(k.size()) != L || static_cast<int>(v.size()) != L) throw Error("persistent step: KV layers differ");
  if (!barrier_.data()) {
    barrier_ = cuda::DeviceBuffer(256);
    barrier_.zero();
    dyn_ = cuda::DeviceBuffer(sizeof(cuda::StepDynamic));
    partial_ = cuda::DeviceBuffer(static_cast<size_t>(cuda::attention_partial_floats(sh.n_heads, sh.head_dim, sh.n_splits)) * 4);
  }
  if (!layers_built_ || layers_elem_ != elem) {
    std::vector<cuda::StepLayer> t = sh.layers;
    for (cuda::StepLayer& l : t) {
      l.qa.kv = elem;
      l.aa.kv = elem;
    }
    if (!layers_.data()) layers_ = cuda::DeviceBuffer(t.size() * sizeof(cuda::StepLayer));
    s.sync();  // the upload is synchronous on another stream: no earlier step may still read it
    layers_.upload(t.data(), t.size() * sizeof(cuda::StepLayer));
    layers_built_ = true;
    layers_elem_ = elem;
  }
  if (kv_serial_ != kv_serial) {
    std::vector<cuda::StepKV> t(static_cast<size_t>(L));
    for (int li = 0; li < L; ++li) t[li] = {k[li].data(), v[li].data()};
    if (!kv_.data()) kv_ = cuda::DeviceBuffer(t.size() * sizeof(cuda::StepKV));
    s.sync();  // an earlier step may still read the old table
    kv_.upload(t.data(), t.size() * sizeof(cuda::StepKV));
    kv_serial_ = kv_serial;
  }
  const cuda::StepDynamic d{token, pos, count_};
  cuda::copy_to_device_async(s, dyn_.data(), &d, sizeof d);
  cuda::StepPlan p;
  p.n_layers = L;
  p.layers_dev = layers_.as<const cuda::StepLayer>();
  p.kv_dev = kv_.as<const cuda::StepKV>();
  p.dyn_dev = dyn_.as<const cuda::StepDynamic>();
  p.embed = sh.embed;
  p.embed_scale = sh.embed_scale;
  p.hidden = sh.hidden;
  p.max_act = sh.max_act;
  p.w_offset = sh.w_offset;
  p.eps = sh.eps;
  p.head_dim = sh.head_dim;
  p.kv = elem;
  p.x = b.x;
  p.x2 = b.x2;
  p.proj = b.proj;
  p.qkv = b.qkv;
  p.partial = partial_.as<float>();
  p.act = b.act;
  p.counters = b.counters;
  p.barrier = barrier_.as<uint64_t>();
  p.result = b.result;
  p.probe = sh.probe;
  p.barrier_mode = sh.barrier_mode;
  cuda::step_layers(s, p, sh.grid);
  count_ += static_cast<uint64_t>(cuda::step_barriers(L)) * static_cast<uint64_t>(sh.grid);
}

}  // namespace eg
