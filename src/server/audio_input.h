// Audio of OpenAI chat requests: `input_audio` content parts,
//   {"type": "input_audio", "input_audio": {"data": "<base64>", "format": "wav" | "mp3"}}
// (also flac / ogg, which the decoder reads as well). The bytes are decoded here (audio/audio.h:
// the container is sniffed from the bytes, the format field must name a supported one) and
// resampled to 16 kHz mono. Limits: kMaxAudioPerRequest clips per request, kMaxAudioBytes of
// encoded data per clip, and the decoder's 10-minute duration limit (checked from the header).
#pragma once
#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

#include "audio/audio.h"

namespace eg::server {

inline constexpr int kMaxAudioPerRequest = 8;
inline constexpr size_t kMaxAudioBytes = size_t{20} << 20;  // 20 MiB of encoded audio

/// Validates an input_audio object's shape ('data' string, 'format' one of wav/mp3/flac/ogg) and
/// returns the format in lower case. Throws ApiError(400) as audio_from_part does.
std::string input_audio_format(const nlohmann::json& ia, const std::string& param);

/// The input_audio object of a content part → 16 kHz mono samples. Throws ApiError(400, param)
/// for a missing / non-string data or format, a format other than wav / mp3 / flac / ogg, bad
/// base64, data above max_bytes, and audio that does not decode (the decoder's message).
audio::Pcm audio_from_part(const nlohmann::json& input_audio, const std::string& param,
                           size_t max_bytes = kMaxAudioBytes);

}  // namespace eg::server
