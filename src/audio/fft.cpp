#include "audio/fft.h"

#include <cmath>

#include "core/error.h"

namespace eg::audio {

RealFft::RealFft(int n) : n_(n) {
  if (n < 2 || n > (1 << 20) || (n & (n - 1)) != 0)
    throw Error("FFT length " + std::to_string(n) + " is not a power of two in [2, 2^20]");
  const double pi = std::acos(-1.0);
  tw_.resize(n / 2);
  for (int k = 0; k < n / 2; ++k) tw_[k] = std::polar(1.0, -2.0 * pi * k / n);
  const int m = n / 2;
  rev_.resize(m);
  int bits = 0;
  while ((1 << bits) < m) ++bits;
  for (int i = 0; i < m; ++i) {
    int r = 0;
    for (int b = 0; b < bits; ++b) r |= ((i >> b) & 1) << (bits - 1 - b);
    rev_[i] = r;
  }
  z_.resize(m);
}

void RealFft::forward(const double* in, std::vector<std::complex<double>>& out) const {
  const int m = n_ / 2;
  // z_j = x_{2j} + i·x_{2j+1}, bit-reversed, then an m-point decimation-in-time FFT.
  for (int j = 0; j < m; ++j) z_[rev_[j]] = {in[2 * j], in[2 * j + 1]};
  for (int len = 2; len <= m; len <<= 1) {
    const int step = n_ / len;  // twiddle stride in tw_ (e^{−2πi/len} = tw_[n/len])
    for (int s = 0; s < m; s += len)
      for (int k = 0; k < len / 2; ++k) {
        const std::complex<double> w = tw_[static_cast<size_t>(k) * step];
        const std::complex<double> a = z_[s + k], b = z_[s + k + len / 2] * w;
        z_[s + k] = a + b;
        z_[s + k + len / 2] = a - b;
      }
  }
  // Z_k = E_k + i·O_k → X_k = E_k + e^{−2πik/n}·O_k, with E_k = (Z_k + conj Z_{m−k})/2,
  // O_k = (Z_k − conj Z_{m−k})/(2i).
  out.resize(static_cast<size_t>(m) + 1);
  for (int k = 0; k <= m; ++k) {
    const std::complex<double> zk = z_[k % m], zc = std::conj(z_[(m - k) % m]);
    const std::complex<double> e = 0.5 * (zk + zc), o = std::complex<double>(0, -0.5) * (zk - zc);
    const std::complex<double> w = k < m ? tw_[k] : std::complex<double>(-1.0, 0.0);
    out[k] = e + w * o;
  }
}

}  // namespace eg::audio
