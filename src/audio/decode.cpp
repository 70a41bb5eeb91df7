#include <sndfile.h>
#include <soxr.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "audio/audio.h"
#include "core/error.h"

namespace eg::audio {

namespace {

constexpr int kMinRate = 1000, kMaxRate = 384000;

// libsndfile's virtual I/O over an in-memory buffer.
struct Mem {
  const std::string* bytes;
  sf_count_t pos = 0;
};
sf_count_t mem_len(void* u) { return static_cast<sf_count_t>(static_cast<Mem*>(u)->bytes->size()); }
sf_count_t mem_seek(sf_count_t off, int whence, void* u) {
  Mem* m = static_cast<Mem*>(u);
  const sf_count_t n = mem_len(u);
  sf_count_t p = whence == SEEK_SET ? off : whence == SEEK_CUR ? m->pos + off : n + off;
  m->pos = std::clamp<sf_count_t>(p, 0, n);
  return m->pos;
}
sf_count_t mem_read(void* dst, sf_count_t count, void* u) {
  Mem* m = static_cast<Mem*>(u);
  const sf_count_t k = std::max<sf_count_t>(0, std::min(count, mem_len(u) - m->pos));
  std::memcpy(dst, m->bytes->data() + m->pos, static_cast<size_t>(k));
  m->pos += k;
  return k;
}
sf_count_t mem_write(const void*, sf_count_t, void*) { return 0; }
sf_count_t mem_tell(void* u) { return static_cast<Mem*>(u)->pos; }

std::string rate_str(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", s);
  return b;
}

// A RIFF/WAVE whose data chunk declares more bytes than the file holds (libsndfile silently reads
// what is there). Streaming writers' placeholder sizes (0, 0xFFFFFFFF) are not judged.
bool wav_truncated(const std::string& b, uint64_t& declared, uint64_t& present) {
  if (b.size() < 12 || b.compare(0, 4, "RIFF") != 0 || b.compare(8, 4, "WAVE") != 0) return false;
  auto le32 = [&](size_t at) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<unsigned char>(b[at + i])) << (8 * i);
    return v;
  };
  for (size_t at = 12; at + 8 <= b.size();) {
    const uint32_t size = le32(at + 4);
    if (b.compare(at, 4, "data") == 0) {
      declared = size;
      present = b.size() - (at + 8);
      return size != 0 && size != 0xFFFFFFFFu && declared > present;
    }
    at += 8 + static_cast<size_t>(size) + (size & 1);
  }
  return false;
}

}  // namespace

Pcm downmix(const float* x, size_t n, int channels, int rate) {
  if (channels < 1 || n % static_cast<size_t>(channels) != 0)
    throw Error("audio: " + std::to_string(n) + " values do not split into " + std::to_string(channels) + " channel(s)");
  Pcm p;
  p.rate = rate;
  const size_t frames = n / channels;
  p.samples.resize(frames);
  for (size_t i = 0; i < frames; ++i) {
    float s = 0;
    for (int c = 0; c < channels; ++c) {
      const float v = x[i * channels + c];
      if (!std::isfinite(v)) throw Error("audio: sample " + std::to_string(i) + " is not a finite number");
      s += v;
    }
    p.samples[i] = channels == 1 ? s : s / static_cast<float>(channels);
  }
  return p;
}

Pcm decode_audio(const std::string& bytes, const std::string& what, double max_seconds) {
  if (bytes.empty()) throw Error(what + ": empty audio file");
  uint64_t declared = 0, present = 0;
  if (wav_truncated(bytes, declared, present))
    throw Error(what + ": truncated WAV file (the data chunk declares " + std::to_string(declared) + " bytes, " +
                std::to_string(present) + " are present)");
  Mem mem{&bytes};
  SF_VIRTUAL_IO io{mem_len, mem_seek, mem_read, mem_write, mem_tell};
  SF_INFO info{};
  SNDFILE* f = sf_open_virtual(&io, SFM_READ, &info, &mem);
  if (!f)
    throw Error(what + ": not a readable audio file (WAV, FLAC, OGG or MP3): " + sf_strerror(nullptr));
  struct Closer {
    SNDFILE* f;
    ~Closer() { sf_close(f); }
  } closer{f};
  if (info.channels < 1 || info.channels > 64)
    throw Error(what + ": " + std::to_string(info.channels) + " channels (1 to 64 are accepted)");
  if (info.samplerate < kMinRate || info.samplerate > kMaxRate)
    throw Error(what + ": sample rate " + std::to_string(info.samplerate) + " Hz is outside [1000, 384000]");
  // MP3 (and some OGG) report no frame count up front; then the limit is enforced while reading.
  const bool known = info.frames > 0 && info.frames < (sf_count_t{1} << 40);
  const auto max_frames = static_cast<sf_count_t>(max_seconds * info.samplerate);
  if (known && info.frames > max_frames)
    throw Error(what + ": " + rate_str(static_cast<double>(info.frames) / info.samplerate) +
                " s of audio is longer than the limit of " + rate_str(max_seconds) + " s");
  std::vector<float> inter;
  std::vector<float> buf(static_cast<size_t>(4096) * info.channels);
  sf_count_t got_total = 0;
  for (;;) {
    const sf_count_t got = sf_readf_float(f, buf.data(), 4096);
    if (got <= 0) break;
    got_total += got;
    if (got_total > max_frames)
      throw Error(what + ": the audio is longer than the limit of " + rate_str(max_seconds) + " s");
    inter.insert(inter.end(), buf.begin(), buf.begin() + got * info.channels);
  }
  if (sf_error(f) != SF_ERR_NO_ERROR) throw Error(what + ": corrupt audio data: " + sf_strerror(f));
  if (known && got_total < info.frames)
    throw Error(what + ": truncated audio file (" + std::to_string(got_total) + " of " + std::to_string(info.frames) +
                " frames)");
  if (got_total == 0) throw Error(what + ": the audio file has no samples");
  return downmix(inter.data(), inter.size(), info.channels, info.samplerate);
}

Pcm load_audio_file(const std::string& path, double max_seconds) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) throw Error("audio file not found: " + path);
  const auto size = fs::file_size(path, ec);
  if (ec) throw Error("cannot read audio file " + path + ": " + ec.message());
  if (size > (uint64_t{1} << 30)) throw Error(path + ": audio file over 1 GiB");
  std::ifstream in(path, std::ios::binary);
  std::string bytes(static_cast<size_t>(size), '\0');
  if (!in.read(bytes.data(), static_cast<std::streamsize>(size))) throw Error("cannot read audio file " + path);
  return decode_audio(bytes, path, max_seconds);
}

Pcm resample(const Pcm& in, int rate) {
  for (int r : {in.rate, rate})
    if (r < kMinRate || r > kMaxRate)
      throw Error("audio: sample rate " + std::to_string(r) + " Hz is outside [1000, 384000]");
  if (in.rate == rate) return in;
  Pcm out;
  out.rate = rate;
  if (in.samples.empty()) return out;
  const double ratio = static_cast<double>(rate) / in.rate;
  out.samples.resize(static_cast<size_t>(std::ceil(in.samples.size() * ratio)) + 16);
  size_t odone = 0;
  const soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
  const soxr_quality_spec_t q = soxr_quality_spec(SOXR_HQ, 0);
  const soxr_error_t err = soxr_oneshot(in.rate, rate, 1, in.samples.data(), in.samples.size(), nullptr,
                                        out.samples.data(), out.samples.size(), &odone, &io, &q, nullptr);
  if (err) throw Error(std::string("audio: resampling failed: ") + err);
  out.samples.resize(odone);
  return out;
}

}  // namespace eg::audio
