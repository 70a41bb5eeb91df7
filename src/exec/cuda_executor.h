// The CUDA step executor (src/exec/cuda_executor.cpp, built into edgegemma_cuda only when the
// CUDA backend is on; executor.cpp calls it under EG_HAVE_CUDA). docs/cuda.md "The executor".
#pragma once
#include <memory>
#include <string>

#include "exec/executor.h"

namespace eg {

/// Empty when the CUDA executor can run `model` (Gemma 2/3/4 dense, not MoE; every matrix
/// Q4_0/Q8_0/F16/BF16 except Gemma 4's per_layer_model_projection, which may be F32 too; head_dim
/// a multiple of 32 up to 512; a PLE width that is a multiple of 32); otherwise why not.
std::string cuda_unsupported_reason(const Model& model);

/// The executor on GPU 0 (uploads the weights). Throws eg::Error when no GPU is present or the
/// model is not supported (the message names the reason).
std::unique_ptr<StepExecutor> make_cuda_executor(const Model& model);

}  // namespace eg
