#include "server/audio_input.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "server/api_error.h"
#include "server/image_input.h"

namespace eg::server {

std::string input_audio_format(const nlohmann::json& ia, const std::string& param) {
  if (!ia.is_object())
    throw ApiError(400, "an input_audio part needs 'input_audio': {\"data\": \"<base64>\", \"format\": \"wav\"}", param,
                   "invalid_input_audio");
  const auto data = ia.find("data");
  const auto fmt = ia.find("format");
  if (data == ia.end() || !data->is_string())
    throw ApiError(400, "input_audio needs a 'data' string (base64 of the audio file)", param, "invalid_input_audio");
  if (fmt == ia.end() || !fmt->is_string())
    throw ApiError(400, "input_audio needs a 'format' string (\"wav\" or \"mp3\")", param, "invalid_input_audio");
  std::string f = fmt->get<std::string>();
  std::transform(f.begin(), f.end(), f.begin(), [](unsigned char c) { return std::tolower(c); });
  if (f != "wav" && f != "mp3" && f != "flac" && f != "ogg")
    throw ApiError(400, "unsupported input_audio format '" + fmt->get<std::string>() + "' (wav, mp3, flac, ogg)", param,
                   "invalid_input_audio");
  return f;
}

audio::Pcm audio_from_part(const nlohmann::json& ia, const std::string& param, size_t max_bytes) {
  const std::string f = input_audio_format(ia, param);
  const auto data = ia.find("data");
  std::vector<uint8_t> bytes;
  try {
    bytes = base64_decode(data->get<std::string>(), max_bytes);
  } catch (const Error& e) {
    throw ApiError(400, std::string("input_audio data: ") + e.what(), param, "invalid_input_audio");
  }
  try {
    return audio::to_model_rate(
        audio::decode_audio(std::string(bytes.begin(), bytes.end()), "input_audio (" + f + ")"));
  } catch (const Error& e) {
    throw ApiError(400, e.what(), param, "invalid_audio");
  }
}

}  // namespace eg::server
