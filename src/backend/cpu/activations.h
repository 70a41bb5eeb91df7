// Element-wise activation kernels (CPU, Highway runtime dispatch).
#pragma once
#include <cstddef>

namespace eg::cpu {

/// out[i] = gelu_tanh(gate[i]) · up[i] for i < n, with gelu_tanh(z) = 0.5·z·(1 + tanh(u)),
/// u = √(2/π)·(z + 0.044715·z³) (PyTorch gelu(approximate="tanh")), computed as the identical
/// z / (1 + exp(−2u)) with Highway's vector exp (a few ulp from the libm formula; the argument of
/// exp is capped at 88, where the result is 0 to within 1e-38·|z|). out may alias gate or up.
/// Element-wise: the value of an element does not depend on n or on how the rows are split.
void gelu_tanh_mul(const float* gate, const float* up, size_t n, float* out);

/// x[i] = cap·tanh(x[i]/cap) in place (soft-capping), tanh computed as expm1(2y)/(expm1(2y) + 2)
/// with Highway's vector expm1 (a few ulp from libm's tanhf; |2y| capped at 20, where tanh is ±1
/// in f32). cap > 0. Element-wise.
void softcap(float* x, size_t n, float cap);

}  // namespace eg::cpu
