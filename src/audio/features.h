// The Gemma 4 audio feature extractor (transformers 5.17 Gemma4AudioFeatureExtractor, NumPy path;
// gemma-multimodal.md §3.2, read, not copied), for one clip of 16 kHz mono samples:
//   1. pad with 0 to a multiple of 128 samples (pad_to_multiple_of), prepend frame_length/2 zeros;
//   2. frames i = padded[hop·i, hop·i + frame_length), F = ⌊(L + fl/2 − (fl + 1))/hop⌋ + 1;
//   3. × periodic Hann window (float64 → float32), float32 product, zero-padded to fft_length;
//   4. |rfft| (257 bins; our float64 FFT), × HTK mel filterbank (float64, no area normalisation,
//      min/max frequency), ln(· + mel_floor), cast to float32;
//   5. frame i is valid iff padded-sample index hop·i + frame_length is a real sample; invalid frames
//      are 0. Valid frames of N samples: ⌊(N + fl/2 − (fl + 1))/hop⌋ + 1 (0 if negative).
// transformers truncates a clip to 30 s (480000 samples); the prompt code splits longer clips into
// 30 s segments instead (engine/audio_prompt.h), so `extract` refuses more than max_samples.
// Differences from the reference: our FFT is float64 where numpy's is float32 (the README measured
// that choice at ≤ 6.5e-4 in log-mel; its tolerance is 1e-3).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "audio/fft.h"

namespace eg::audio {

/// processor_config.json "feature_extractor" (the defaults are Gemma 4's released values).
struct FeatureConfig {
  int feature_size = 128;
  int sampling_rate = 16000;
  int frame_length = 320;
  int hop_length = 160;
  int fft_length = 512;
  double min_frequency = 0.0, max_frequency = 8000.0;
  double mel_floor = 1e-3;
  double input_scale_factor = 1.0;
  int pad_to_multiple_of = 128;
  int64_t max_samples = 480000;  // 30 s
};

/// Reads the "feature_extractor" block of `dir`/processor_config.json (defaults when absent).
/// Throws eg::Error for options this extractor does not implement (pre-emphasis, dither,
/// per-bin mean/stddev, fft_overdrive) or for inconsistent sizes.
FeatureConfig load_feature_config(const std::string& dir);

struct Features {
  int frames = 0;             // F (padded)
  int valid = 0;              // valid frames (a prefix)
  int mel = 0;                // feature_size
  std::vector<float> values;  // [frames, mel], invalid frames 0
  std::vector<uint8_t> mask;  // [frames], 1 = valid
};

/// Valid frames for a clip of n samples.
int valid_frames(int64_t n, const FeatureConfig& c);

class FeatureExtractor {
 public:
  /// Throws eg::Error for sizes that do not fit (fft_length < frame_length, not a power of two, ...).
  explicit FeatureExtractor(const FeatureConfig& c);
  /// One clip at c.sampling_rate. Throws eg::Error for 0 samples, more than max_samples, or a
  /// non-finite sample.
  Features extract(const float* samples, int64_t n) const;
  const FeatureConfig& config() const { return c_; }

 private:
  FeatureConfig c_;
  RealFft fft_;
  std::vector<float> window_;    // [frame_length]
  std::vector<double> filters_;  // [fft_length/2 + 1, feature_size]
};

}  // namespace eg::audio
