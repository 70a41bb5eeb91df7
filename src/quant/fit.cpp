#include "quant/fit.h"

#include <algorithm>
#include <cmath>

namespace eg::quant {

int round_int(float v) { return static_cast<int>(std::nearbyint(v)); }

float fit_asymmetric(const float* x, const float* w, int n, int nmax, bool offset_le_zero,
                     uint8_t* L, float* offset) {
  float mn = x[0], mx = x[0];
  for (int i = 1; i < n; ++i) {
    mn = std::min(mn, x[i]);
    mx = std::max(mx, x[i]);
  }
  if (offset_le_zero && mn > 0.0f) mn = 0.0f;
  if (mx <= mn) {
    std::fill(L, L + n, 0);
    *offset = mn;
    return 0.0f;
  }
  double best_err = -1.0;
  float best_scale = (mx - mn) / static_cast<float>(nmax), best_off = mn;
  uint8_t cand[256];
  // Candidate 0 is the plain range fit; then 20 inverse scales in [nmax − 1, nmax + 0.9].
  for (int step = -1; step <= 19; ++step) {
    const float iscale =
        step < 0 ? static_cast<float>(nmax) / (mx - mn)
                 : (static_cast<float>(nmax) - 1.0f + 0.1f * static_cast<float>(step)) / (mx - mn);
    double sw = 0, sl = 0, sl2 = 0, sx = 0, slx = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(round_int(iscale * (x[i] - mn)), 0, nmax);
      cand[i] = static_cast<uint8_t>(l);
      sw += w[i];
      sl += w[i] * l;
      sl2 += w[i] * l * l;
      sx += w[i] * x[i];
      slx += w[i] * l * x[i];
    }
    // Weighted least squares for (scale, off): [sl2 sl; sl sw] [s; o] = [slx; sx].
    const double det = sw * sl2 - sl * sl;
    double s, o;
    if (det > 0) {
      s = (sw * slx - sl * sx) / det;
      o = (sl2 * sx - sl * slx) / det;
    } else {
      s = (mx - mn) / nmax;
      o = mn;
    }
    if (offset_le_zero && o > 0) {
      o = 0;
      s = sl2 > 0 ? slx / sl2 : 0;
    }
    if (s < 0) continue;
    double err = 0;
    for (int i = 0; i < n; ++i) {
      const double d = s * cand[i] + o - x[i];
      err += w[i] * d * d;
    }
    if (best_err < 0 || err < best_err) {
      best_err = err;
      best_scale = static_cast<float>(s);
      best_off = static_cast<float>(o);
      std::copy(cand, cand + n, L);
    }
  }
  if (best_err < 0) {  // every candidate had a negative slope (cannot happen for mx > mn)
    for (int i = 0; i < n; ++i) {
      L[i] = static_cast<uint8_t>(std::clamp(round_int((x[i] - mn) / best_scale), 0, nmax));
    }
  }
  *offset = best_off;
  return best_scale;
}

float fit_symmetric(const float* x, const float* w, int n, int nmax, int8_t* L) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (amax == 0.0f) {
    std::fill(L, L + n, 0);
    return 0.0f;
  }
  double best = -1.0;
  float best_scale = 0.0f;
  int8_t cand[256];
  for (int step = -10; step <= 10; ++step) {
    const float iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(step)) / max;
    double slx = 0, sl2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(round_int(iscale * x[i]), -nmax, nmax - 1);
      cand[i] = static_cast<int8_t>(l);
      slx += w[i] * x[i] * l;
      sl2 += w[i] * l * l;
    }
    // With the LS scale s = slx/sl2 the error is Σw x² − slx²/sl2: maximise slx²/sl2.
    if (sl2 <= 0) continue;
    const double score = slx * slx / sl2;
    if (score > best) {
      best = score;
      best_scale = static_cast<float>(slx / sl2);
      std::copy(cand, cand + n, L);
    }
  }
  return best_scale;
}

}  // namespace eg::quant
