// A small real FFT (ours): radix-2, iterative, float64 twiddles and arithmetic.
//   X_k = Σ_{n<N} x_n · e^{−2πi·kn/N},  k = 0 … N/2  (numpy.fft.rfft's definition, unnormalised)
// N must be a power of two ≥ 2. The real input of length N is packed into N/2 complex values,
// transformed, and split into the spectrum of the real sequence (the standard even/odd identity).
#pragma once
#include <complex>
#include <vector>

namespace eg::audio {

class RealFft {
 public:
  /// Throws eg::Error when n is not a power of two in [2, 2^20].
  explicit RealFft(int n);
  int size() const { return n_; }
  /// in: [n] reals → out: [n/2 + 1] complex (resized).
  void forward(const double* in, std::vector<std::complex<double>>& out) const;

 private:
  int n_;
  std::vector<std::complex<double>> tw_;     // e^{−2πi·k/n}, k < n/2
  std::vector<int> rev_;                     // bit reversal for the n/2-point complex FFT
  mutable std::vector<std::complex<double>> z_;
};

}  // namespace eg::audio
