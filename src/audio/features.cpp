#include "audio/features.h"

#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_util.h"

namespace eg::audio {

FeatureConfig load_feature_config(const std::string& dir) {
  FeatureConfig c;
  const std::string path = dir + "/processor_config.json";
  if (!std::filesystem::exists(path)) return c;
  const auto j = nlohmann::json::parse(read_file(path), nullptr, false);
  if (!j.is_object()) throw Error(path + ": not valid JSON");
  if (!j.contains("feature_extractor") || !j["feature_extractor"].is_object()) return c;
  const auto& f = j["feature_extractor"];
  auto num = [&](const char* k, auto& dst) {
    if (f.contains(k) && f[k].is_number()) dst = f[k].get<std::decay_t<decltype(dst)>>();
  };
  num("feature_size", c.feature_size);
  num("sampling_rate", c.sampling_rate);
  num("frame_length", c.frame_length);
  num("hop_length", c.hop_length);
  num("fft_length", c.fft_length);
  num("min_frequency", c.min_frequency);
  num("max_frequency", c.max_frequency);
  num("mel_floor", c.mel_floor);
  num("input_scale_factor", c.input_scale_factor);
  auto nonzero = [&](const char* k) { return f.contains(k) && f[k].is_number() && f[k].get<double>() != 0.0; };
  auto present = [&](const char* k) { return f.contains(k) && !f[k].is_null(); };
  for (const char* k : {"preemphasis", "dither"})
    if (nonzero(k)) throw Error(path + ": feature_extractor." + k + " != 0 is not supported");
  for (const char* k : {"per_bin_mean", "per_bin_stddev"})
    if (present(k)) throw Error(path + std::string(": feature_extractor.") + k + " is not supported");
  if (f.contains("fft_overdrive") && f["fft_overdrive"].is_boolean() && f["fft_overdrive"].get<bool>())
    throw Error(path + ": feature_extractor.fft_overdrive is not supported");
  return c;
}

int valid_frames(int64_t n, const FeatureConfig& c) {
  const int64_t num = n + c.frame_length / 2 - (c.frame_length + 1);
  if (num < 0) return 0;
  return static_cast<int>(num / c.hop_length + 1);
}

FeatureExtractor::FeatureExtractor(const FeatureConfig& c) : c_(c), fft_(c.fft_length) {
  if (c.frame_length < 2 || c.hop_length < 1 || c.fft_length < c.frame_length || c.feature_size < 1 ||
      c.pad_to_multiple_of < 1 || !(c.max_frequency > c.min_frequency) || c.min_frequency < 0 ||
      c.max_frequency > c.sampling_rate / 2.0 + 1e-9 || !(c.mel_floor > 0))
    throw Error("audio feature extractor: inconsistent processor_config feature_extractor sizes");
  const double pi = std::acos(-1.0);
  window_.resize(c.frame_length);
  for (int n = 0; n < c.frame_length; ++n)
    window_[n] = static_cast<float>(0.5 - 0.5 * std::cos(2.0 * pi * n / c.frame_length));  // periodic Hann
  // HTK mel filterbank: triangles between mel-spaced edges, over the rfft bin frequencies.
  const int bins = c.fft_length / 2 + 1, M = c.feature_size;
  auto mel = [](double f) { return 2595.0 * std::log10(1.0 + f / 700.0); };
  auto hz = [](double m) { return 700.0 * (std::pow(10.0, m / 2595.0) - 1.0); };
  std::vector<double> edges(M + 2);
  const double m0 = mel(c.min_frequency), m1 = mel(c.max_frequency);
  for (int j = 0; j < M + 2; ++j) edges[j] = hz(m0 + (m1 - m0) * j / (M + 1));
  filters_.assign(static_cast<size_t>(bins) * M, 0.0);
  for (int k = 0; k < bins; ++k) {
    const double f = (c.sampling_rate / 2.0) * k / (bins - 1);
    for (int j = 0; j < M; ++j) {
      const double up = (f - edges[j]) / (edges[j + 1] - edges[j]);
      const double down = (edges[j + 2] - f) / (edges[j + 2] - edges[j + 1]);
      filters_[static_cast<size_t>(k) * M + j] = std::max(0.0, std::min(up, down));
    }
  }
}

Features FeatureExtractor::extract(const float* x, int64_t n) const {
  if (n <= 0) throw Error("audio: the clip has no samples");
  if (n > c_.max_samples)
    throw Error("audio: a clip of " + std::to_string(n) + " samples is longer than the extractor's " +
                std::to_string(c_.max_samples));
  const int fl = c_.frame_length, hop = c_.hop_length, half = fl / 2, M = c_.feature_size;
  const int bins = c_.fft_length / 2 + 1;
  const int64_t L = (n + c_.pad_to_multiple_of - 1) / c_.pad_to_multiple_of * c_.pad_to_multiple_of;
  std::vector<float> padded(static_cast<size_t>(L + half), 0.0f);
  const float scale = static_cast<float>(c_.input_scale_factor);
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) throw Error("audio: sample " + std::to_string(i) + " is not a finite number");
    padded[static_cast<size_t>(half + i)] = c_.input_scale_factor == 1.0 ? x[i] : x[i] * scale;
  }
  Features F;
  F.mel = M;
  F.frames = static_cast<int>((L + half - (fl + 1)) / hop + 1);
  if (F.frames < 1) F.frames = 0;
  F.values.assign(static_cast<size_t>(F.frames) * M, 0.0f);
  F.mask.assign(static_cast<size_t>(F.frames), 0);
  std::vector<double> frame(static_cast<size_t>(c_.fft_length), 0.0);
  std::vector<std::complex<double>> X;
  std::vector<double> mag(static_cast<size_t>(bins));
  for (int i = 0; i < F.frames; ++i) {
    if (static_cast<int64_t>(hop) * i + fl >= half + n) continue;  // the sample after the window is padding
    F.mask[i] = 1;
    F.valid = i + 1;
    const float* s = padded.data() + static_cast<size_t>(hop) * i;
    for (int t = 0; t < fl; ++t) frame[t] = static_cast<double>(s[t] * window_[t]);  // float32 product
    fft_.forward(frame.data(), X);
    for (int k = 0; k < bins; ++k) mag[k] = std::abs(X[k]);
    float* out = F.values.data() + static_cast<size_t>(i) * M;
    for (int j = 0; j < M; ++j) {
      double acc = 0;
      for (int k = 0; k < bins; ++k) acc += mag[k] * filters_[static_cast<size_t>(k) * M + j];
      out[j] = static_cast<float>(std::log(acc + c_.mel_floor));
    }
  }
  return F;
}

}  // namespace eg::audio
