// Error-minimising scale searches shared by the K-quant and EG_Q4_G128 quantizers (internal).
// The idea follows llama.cpp's make_qkx2_quants / make_qx_quants (try a grid of inverse scales
// around the range-based one, refit scale (and offset) by weighted least squares for each
// candidate rounding, keep the best weighted squared error); the code is our own.
#pragma once
#include <cstdint>

namespace eg::quant {

/// Asymmetric fit x_i ≈ scale·L_i + offset with L_i ∈ [0, nmax], minimising Σ w_i (x_i − x̂_i)².
/// If offset_le_zero, offset is constrained to ≤ 0 (K-quants store −offset as an unsigned min).
/// Writes L[0..n); returns scale (≥ 0) and *offset. All-equal input gives scale 0, offset = x.
float fit_asymmetric(const float* x, const float* w, int n, int nmax, bool offset_le_zero,
                     uint8_t* L, float* offset);

/// Symmetric fit x_i ≈ scale·L_i with L_i ∈ [−nmax, nmax−1] (the sign of scale is chosen so the
/// largest-|x| element maps to −nmax, ggml's convention). Writes L (signed); returns scale.
float fit_symmetric(const float* x, const float* w, int n, int nmax, int8_t* L);

/// Round to nearest, ties to even (the FPU's default mode).
int round_int(float v);

}  // namespace eg::quant
