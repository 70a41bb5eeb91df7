#include "server/image_input.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "server/api_error.h"

namespace eg::server {

namespace {

int b64_value(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

bool supported_image_mime(const std::string& mime) {
  static const char* kTypes[] = {"image/png", "image/jpeg", "image/jpg", "image/webp", "image/gif", "image/bmp"};
  const std::string m = lower(mime);
  return std::any_of(std::begin(kTypes), std::end(kTypes), [&](const char* t) { return m == t; });
}

std::vector<uint8_t> base64_decode(const std::string& s, size_t max_bytes) {
  size_t n = s.size();
  while (n > 0 && s[n - 1] == '=') --n;
  if (s.size() - n > 2 || (s.size() % 4 != 0 && s.size() != n)) throw Error("bad base64 padding");
  if (n % 4 == 1) throw Error("bad base64 length");
  if (n / 4 * 3 + (n % 4 ? n % 4 - 1 : 0) > max_bytes)
    throw Error("the data is larger than " + std::to_string(max_bytes >> 20) + " MiB");
  std::vector<uint8_t> out;
  out.reserve(n / 4 * 3 + 2);
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < n; ++i) {
    const int v = b64_value(static_cast<unsigned char>(s[i]));
    if (v < 0) throw Error("invalid base64 character at offset " + std::to_string(i));
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<uint8_t>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

vision::RgbImage image_from_url(const std::string& url, const std::string& param, size_t max_bytes) {
  const std::string head = lower(url.substr(0, std::min<size_t>(url.size(), 16)));
  if (head.rfind("http://", 0) == 0 || head.rfind("https://", 0) == 0)
    throw ApiError(400,
                   "remote image URLs are not supported: the server is offline by design and never fetches "
                   "anything; send the image inline as a data: URL (data:image/png;base64,...)",
                   param, "unsupported_image_url");
  if (head.rfind("data:", 0) != 0)
    throw ApiError(400, "an image_url must be a data: URL (data:image/png;base64,...)", param, "invalid_image_url");
  const size_t comma = url.find(',');
  if (comma == std::string::npos) throw ApiError(400, "malformed data: URL (no ',')", param, "invalid_image_url");
  const std::string meta = url.substr(5, comma - 5);  // "image/png;base64"
  const size_t semi = meta.find(';');
  const std::string mime = meta.substr(0, semi);
  if (semi == std::string::npos || lower(meta.substr(semi + 1)) != "base64")
    throw ApiError(400, "the image data: URL must be base64 (data:image/png;base64,...)", param, "invalid_image_url");
  if (!supported_image_mime(mime))
    throw ApiError(400, "unsupported image type '" + mime + "' (image/png, image/jpeg, image/webp, image/gif, image/bmp)",
                   param, "invalid_image_url");
  std::vector<uint8_t> bytes;
  try {
    bytes = base64_decode(url.substr(comma + 1), max_bytes);
  } catch (const Error& e) {
    throw ApiError(400, std::string("the image data: URL: ") + e.what(), param, "invalid_image_url");
  }
  try {
    return vision::decode_image(bytes.data(), bytes.size(), "image");
  } catch (const Error& e) {
    throw ApiError(400, e.what(), param, "invalid_image");
  }
}

}  // namespace eg::server
