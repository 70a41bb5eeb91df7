// Looking up a tower's tensors in a checkpoint (shared by the vision towers): a tensor of an
// exact shape, and which of several name prefixes a checkpoint uses.
#pragma once
#include <string>
#include <vector>

#include "core/error.h"
#include "format/safetensors.h"

namespace eg::vision {

/// The tensor `name` with exactly `shape` ([] = a scalar). Throws eg::Error naming the tensor when
/// it is missing or its shape differs ("…fc1.weight: shape [512, 128], expected [256, 128] from
/// config.json").
inline const TensorInfo& need_tensor(const TensorStore& st, const std::string& name, const std::vector<int64_t>& shape) {
  const TensorInfo* t = st.find(name);
  if (!t) throw Error("vision tower: checkpoint is missing tensor '" + name + "'");
  if (t->shape != shape) {
    std::string want = "[";
    for (size_t i = 0; i < shape.size(); ++i) want += (i ? ", " : "") + std::to_string(shape[i]);
    throw Error(name + ": shape " + t->shape_str() + ", expected " + want + "] from config.json");
  }
  return *t;
}

/// The first of `candidates` for which `prefix + probe` exists. Throws eg::Error "this model has
/// no vision tower (no <what> tensors such as '<candidates[0] + probe>')" when none does.
inline std::string find_tensor_prefix(const TensorStore& st, const std::vector<std::string>& candidates,
                                      const std::string& probe, const char* what) {
  for (const std::string& p : candidates)
    if (st.find(p + probe)) return p;
  throw Error(std::string("this model has no vision tower (no ") + what + " tensors such as '" + candidates[0] + probe +
              "')");
}

}  // namespace eg::vision
