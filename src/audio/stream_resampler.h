// Incremental resampling to 16 kHz for audio that arrives in chunks (Session::append_audio).
//
// The same libsoxr filter as audio::resample (high quality, linear phase), driven with
// soxr_process chunk by chunk and flushed at the end. libsoxr's output does not depend on how the
// input is chunked: the concatenated output of push() + finish() equals resample() of the whole
// clip bit for bit (tests/audio_stream_test.cpp checks chunk sizes from 1 sample to whole
// seconds). At 16 kHz input the samples are passed through unchanged.
#pragma once
#include <cstddef>
#include <vector>

struct soxr;

namespace eg::audio {

class StreamResampler {
 public:
  /// From `rate` Hz to `out_rate` Hz. Throws eg::Error for a rate outside [1000, 384000] or a
  /// libsoxr failure.
  explicit StreamResampler(int rate, int out_rate = 16000);
  ~StreamResampler();
  StreamResampler(const StreamResampler&) = delete;
  StreamResampler& operator=(const StreamResampler&) = delete;

  /// Consumes n mono samples; appends the output samples available so far to `out`.
  void push(const float* x, size_t n, std::vector<float>& out);
  /// Flushes the filter (the clip has ended); appends the remaining output to `out`. Further
  /// push() calls are an eg::Error.
  void finish(std::vector<float>& out);
  int rate() const { return rate_; }

 private:
  int rate_, out_rate_;
  soxr* s_ = nullptr;  // null when the rates are equal
  bool finished_ = false;
  std::vector<float> buf_;
};

}  // namespace eg::audio
