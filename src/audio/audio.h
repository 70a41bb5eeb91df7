// Audio clips for the Gemma 4 audio tower: decoding, downmixing and resampling to 16 kHz mono.
//
// Decoding is Debian's libsndfile (WAV: PCM 8/16/24/32-bit, float 32/64; FLAC; OGG Vorbis/Opus;
// MP3 through libsndfile's mpg123 backend). Integer PCM becomes float as libsndfile normalises it
// (int16 / 32768, the same as transformers' fixtures: float32 sample = int16 / 32768). Channels are
// averaged to mono. Other rates are resampled to 16 kHz with libsoxr (high quality), because
// transformers 5.17 does not resample: it silently reads a 44.1 kHz clip as 16 kHz
// (gemma-multimodal.md §3.2 item 1). We resample and say so in docs/audio.md.
//
// Errors: eg::Error for an unreadable, truncated, empty or unsupported file, a sample rate outside
// [1 kHz, 384 kHz], a non-finite sample, and a clip longer than `max_seconds` (checked from the
// header before any decoding).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace eg::audio {

/// Mono float samples at `rate` Hz (nominally in [−1, 1]).
struct Pcm {
  std::vector<float> samples;
  int rate = 16000;
  double seconds() const { return rate > 0 ? static_cast<double>(samples.size()) / rate : 0.0; }
};

/// The longest clip accepted by default (seconds): 10 minutes, i.e. 20 segments of 30 s.
constexpr double kDefaultMaxSeconds = 600.0;
/// The sample rate of the feature extractor.
constexpr int kModelRate = 16000;

/// Decodes an encoded clip (WAV / FLAC / OGG / MP3 bytes) to mono at the file's own rate.
/// `what` names the clip in errors (a path, "input_audio part 2"). Throws eg::Error.
Pcm decode_audio(const std::string& bytes, const std::string& what, double max_seconds = kDefaultMaxSeconds);

/// Reads and decodes the file `path` (at most 1 GiB). Throws eg::Error.
Pcm load_audio_file(const std::string& path, double max_seconds = kDefaultMaxSeconds);

/// Interleaved float PCM of `channels` channels → mono (channel mean). Throws eg::Error for
/// channels < 1, a length not divisible by channels, or a non-finite sample.
Pcm downmix(const float* interleaved, size_t n_values, int channels, int rate);

/// The clip resampled to `rate` with libsoxr (high quality, linear phase); a copy when the rates
/// are equal. Throws eg::Error for a rate outside [1000, 384000] or a libsoxr failure.
Pcm resample(const Pcm& in, int rate = kModelRate);

/// decode/resample in one: what the prompt paths use.
inline Pcm to_model_rate(Pcm p) { return p.rate == kModelRate ? p : resample(p, kModelRate); }

}  // namespace eg::audio
