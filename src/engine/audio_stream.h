// A clip that arrives in chunks (Session::append_audio): resampled to 16 kHz as it comes
// (audio::StreamResampler, bit-identical to resampling the whole clip) and cut into the segments
// the audio tower encodes one by one (engine/audio_prompt.h: consecutive 30 s segments). A
// completed segment is exactly the samples add_audio of the whole clip would give the tower for
// that segment, so encoding it early changes nothing; the rest (the last, partial segment) is
// known only when the clip ends.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "audio/stream_resampler.h"

namespace eg {

class AudioStream {
 public:
  /// Input at `rate` Hz (mono), segments of `segment_samples` 16 kHz samples, at most
  /// `max_seconds` of input. Throws eg::Error for a rate outside [1000, 384000].
  AudioStream(int rate, int64_t segment_samples, double max_seconds);

  /// Appends n mono samples. Throws eg::Error, keeping nothing of the chunk, for a non-finite
  /// sample or when the clip would exceed max_seconds.
  void append(const float* x, size_t n);
  /// A completed segment is waiting.
  bool has_segment() const { return static_cast<int64_t>(pending_.size()) >= seg_; }
  /// The oldest completed segment (segment_samples samples). Precondition: has_segment().
  std::vector<float> take_segment();
  /// Ends the clip: the samples after the last completed segment (fewer than segment_samples,
  /// possibly none; completed segments still waiting are left for take_segment()).
  std::vector<float> finish();

  int rate() const { return rs_.rate(); }
  int64_t segments_taken() const { return taken_; }
  /// Seconds of input received.
  double seconds() const { return static_cast<double>(in_samples_) / rs_.rate(); }

 private:
  audio::StreamResampler rs_;
  int64_t seg_;
  double max_seconds_;
  int64_t in_samples_ = 0, taken_ = 0;
  std::vector<float> pending_;  // 16 kHz samples not yet taken
};

}  // namespace eg
