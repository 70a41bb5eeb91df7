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
