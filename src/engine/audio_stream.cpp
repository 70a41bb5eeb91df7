#include "engine/audio_stream.h"

#include <cmath>
#include <string>

#include "core/error.h"

namespace eg {

AudioStream::AudioStream(int rate, int64_t segment_samples, double max_seconds)
    : rs_(rate), seg_(segment_samples), max_seconds_(max_seconds) {
  if (segment_samples < 1) throw Error("internal: audio stream segments must be positive");
}

void AudioStream::append(const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) throw Error("audio: sample " + std::to_string(in_samples_ + static_cast<int64_t>(i)) +
                                          " of the streamed clip is not finite");
  if (static_cast<double>(in_samples_ + static_cast<int64_t>(n)) > max_seconds_ * rs_.rate())
    throw Error("audio: the streamed clip would be longer than the limit of " +
                std::to_string(static_cast<int>(max_seconds_)) + " s");
  const size_t before = pending_.size();
  try {
    rs_.push(x, n, pending_);
  } catch (...) {
    pending_.resize(before);
    throw;
  }
  in_samples_ += static_cast<int64_t>(n);
}

std::vector<float> AudioStream::take_segment() {
  if (!has_segment()) throw Error("internal: no completed audio segment");
  std::vector<float> s(pending_.begin(), pending_.begin() + seg_);
  pending_.erase(pending_.begin(), pending_.begin() + seg_);
  ++taken_;
  return s;
}

std::vector<float> AudioStream::finish() {
  rs_.finish(pending_);
  std::vector<float> rest;
  const int64_t full = static_cast<int64_t>(pending_.size()) / seg_ * seg_;
  rest.assign(pending_.begin() + full, pending_.end());
  pending_.resize(static_cast<size_t>(full));
  return rest;
}

}  // namespace eg
