#include "audio/stream_resampler.h"

#include <soxr.h>

#include <string>

#include "core/error.h"

namespace eg::audio {

namespace {
constexpr int kMinRate = 1000, kMaxRate = 384000;
}

StreamResampler::StreamResampler(int rate, int out_rate) : rate_(rate), out_rate_(out_rate) {
  for (int r : {rate, out_rate})
    if (r < kMinRate || r > kMaxRate)
      throw Error("audio: sample rate " + std::to_string(r) + " Hz is outside [1000, 384000]");
  if (rate == out_rate) return;
  const soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
  const soxr_quality_spec_t q = soxr_quality_spec(SOXR_HQ, 0);
  soxr_error_t err = nullptr;
  s_ = soxr_create(rate, out_rate, 1, &err, &io, &q, nullptr);
  if (err || s_ == nullptr) throw Error(std::string("audio: resampler: ") + (err ? err : "soxr_create failed"));
  buf_.resize(8192);
}

StreamResampler::~StreamResampler() {
  if (s_ != nullptr) soxr_delete(s_);
}

void StreamResampler::push(const float* x, size_t n, std::vector<float>& out) {
  if (finished_) throw Error("audio: resampler: push after finish");
  if (s_ == nullptr) {
    out.insert(out.end(), x, x + n);
    return;
  }
  while (n > 0) {
    size_t idone = 0, odone = 0;
    const soxr_error_t err = soxr_process(s_, x, n, &idone, buf_.data(), buf_.size(), &odone);
    if (err) throw Error(std::string("audio: resampling failed: ") + err);
    out.insert(out.end(), buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(odone));
    x += idone;
    n -= idone;
    if (idone == 0 && odone == 0) throw Error("audio: resampling failed: no progress");
  }
}

void StreamResampler::finish(std::vector<float>& out) {
  if (finished_) return;
  finished_ = true;
  if (s_ == nullptr) return;
  for (;;) {
    size_t odone = 0;
    const soxr_error_t err = soxr_process(s_, nullptr, 0, nullptr, buf_.data(), buf_.size(), &odone);
    if (err) throw Error(std::string("audio: resampling failed: ") + err);
    if (odone == 0) break;
    out.insert(out.end(), buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(odone));
  }
}

}  // namespace eg::audio
