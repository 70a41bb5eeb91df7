// Conversion of K/V rows into the KV cache's storage types, with the range check (kv_cache.h):
// the cheap per-row flag on the hot path, and the slow path that runs only when a row was flagged
// (classify the values, widen a layer's pages, warn once). Internal to src/kv/.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kv/kv_cache.h"

namespace eg::kvstore {

/// Bytes per stored element (INT8: 1; the scales are separate).
size_t elem_bytes(KVType t);

/// Converts one row of n f32 values into type t at dst and returns the INT8 scale (1 for the
/// other types). Sets `flag` when a stored value is not finite (F16/BF16: inf or NaN bits; INT8:
/// a non-finite input, whose row is then stored with a NaN scale and zero codes so that it reads
/// back as NaN instead of an arbitrary finite value; F32: a non-finite input, stored as is).
/// Never clears `flag`. The check is three integer operations per element (AND, ADD, OR) fused
/// into the conversion loop, and one test per row.
float store_row(KVType t, const float* x, int n, uint8_t* dst, bool& flag);

/// What a flagged write held (a scan of its inputs; the slow path only).
struct InputCheck {
  bool non_finite = false;  // some input is NaN or ±inf
  bool overflow = false;    // some finite input rounds to ±inf in type t
  float max_finite = 0.0f;  // the largest finite |input|
};
InputCheck check_inputs(KVType t, const float* x, size_t n, InputCheck acc = {});

/// The type a layer of type t switches to when a finite value overflows t: BF16 for F16 (same
/// size, f32's exponent range); t itself when there is none (BF16 and F32 hold every finite f32
/// up to ≈3.39e38 / exactly; INT8's per-row scale takes any finite range).
KVType widened(KVType t);

/// Re-encodes n F16 values at p as BF16, in place (each F16 value rounded to the nearest BF16).
void f16_to_bf16_inplace(uint8_t* p, size_t n);

/// The once-per-process warnings (core/warning.h) of the slow path.
void warn_widened(int layer, float magnitude, KVType from, KVType to);
void warn_non_finite(int layer, KVType t, bool overflow_without_remedy);

}  // namespace eg::kvstore
