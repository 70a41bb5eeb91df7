// Helpers of the audio tests: WAV files written byte by byte (independent of libsndfile) and the
// tiny-gemma4-mm clips.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "vision_test_util.h"

namespace egtest {

inline void put_le(std::string& s, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

/// A RIFF/WAVE file: fmt (PCM = 1 or IEEE float = 3) + data. `data` is the raw sample bytes.
inline std::string wav_bytes(int rate, int channels, int bits, int format, const std::string& data) {
  std::string s = "RIFF";
  put_le(s, 36 + data.size(), 4);
  s += "WAVEfmt ";
  put_le(s, 16, 4);
  put_le(s, static_cast<uint64_t>(format), 2);
  put_le(s, static_cast<uint64_t>(channels), 2);
  put_le(s, static_cast<uint64_t>(rate), 4);
  put_le(s, static_cast<uint64_t>(rate) * channels * bits / 8, 4);
  put_le(s, static_cast<uint64_t>(channels * bits / 8), 2);
  put_le(s, static_cast<uint64_t>(bits), 2);
  s += "data";
  put_le(s, data.size(), 4);
  return s + data;
}

/// 16-bit PCM WAV of int16 samples (interleaved).
inline std::string wav16(int rate, int channels, const std::vector<int16_t>& v) {
  std::string d;
  for (int16_t x : v) put_le(d, static_cast<uint16_t>(x), 2);
  return wav_bytes(rate, channels, 16, 1, d);
}

inline std::string clip_path(const std::string& id) { return g4mm_dir() + "/inputs/" + id + ".wav"; }

}  // namespace egtest

#include <sndfile.h>

namespace egtest {

/// The int16 mono samples written to `path` as `format` (SF_FORMAT_FLAC | SF_FORMAT_PCM_16,
/// SF_FORMAT_OGG | SF_FORMAT_VORBIS, SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III) by libsndfile's
/// encoder. Returns false when this libsndfile cannot write the format.
inline bool write_encoded(const std::string& path, int format, int rate, const std::vector<int16_t>& v) {
  SF_INFO info{};
  info.samplerate = rate;
  info.channels = 1;
  info.format = format;
  SNDFILE* f = sf_open(path.c_str(), SFM_WRITE, &info);
  if (!f) return false;
  const bool ok = sf_write_short(f, v.data(), static_cast<sf_count_t>(v.size())) == static_cast<sf_count_t>(v.size());
  sf_close(f);
  return ok;
}

}  // namespace egtest
