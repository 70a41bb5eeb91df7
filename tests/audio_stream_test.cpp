// Streaming audio, the parts without a model: audio::StreamResampler equals audio::resample of the
// whole clip bit for bit whatever the chunking, and AudioStream cuts the resampled clip into the
// segments AudioEncoder would (consecutive segment_samples pieces, then the rest), rejecting bad
// chunks without keeping any part of them.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "audio/audio.h"
#include "audio/stream_resampler.h"
#include "core/error.h"
#include "engine/audio_stream.h"

using namespace eg;

namespace {

// Deterministic non-trivial signal: a chirp plus LCG noise.
std::vector<float> signal(size_t n, int rate, uint32_t seed = 7) {
  std::vector<float> v(n);
  uint32_t s = seed;
  for (size_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    const double t = static_cast<double>(i) / rate;
    v[i] = static_cast<float>(0.5 * std::sin(2 * M_PI * (200 + 300 * t) * t) + 0.2 * ((s >> 8) / 16777216.0 - 0.5));
  }
  return v;
}

std::vector<float> stream_resample(const std::vector<float>& x, int rate, size_t chunk) {
  audio::StreamResampler rs(rate);
  std::vector<float> out;
  for (size_t at = 0; at < x.size(); at += chunk) rs.push(x.data() + at, std::min(chunk, x.size() - at), out);
  rs.finish(out);
  return out;
}

}  // namespace

TEST(StreamResampler, EqualsOneShotResamplingBitForBit) {
  for (int rate : {44100, 48000, 8000, 22050, 16000}) {
    SCOPED_TRACE(rate);
    const std::vector<float> x = signal(static_cast<size_t>(rate) * 3 + 123, rate);
    const audio::Pcm want = audio::resample(audio::Pcm{x, rate});
    ASSERT_GT(want.samples.size(), 47000u);
    for (size_t chunk : {size_t{1}, size_t{37}, static_cast<size_t>(rate / 10), x.size()}) {
      SCOPED_TRACE(chunk);
      if (chunk == 1 && rate > 22050) continue;  // slow, and 8000/22050 already cover it
      const std::vector<float> got = stream_resample(x, rate, chunk);
      ASSERT_EQ(got.size(), want.samples.size());
      EXPECT_EQ(got, want.samples);
    }
  }
}

TEST(StreamResampler, BadRateAndPushAfterFinish) {
  EXPECT_THROW(audio::StreamResampler(500), Error);
  EXPECT_THROW(audio::StreamResampler(400000), Error);
  audio::StreamResampler rs(44100);
  std::vector<float> out;
  const float x[4] = {0.1f, 0.2f, 0.3f, 0.4f};
  rs.push(x, 4, out);
  rs.finish(out);
  EXPECT_THROW(rs.push(x, 4, out), Error);
}

TEST(AudioStream, SegmentsAndRestEqualTheWholeClipCut) {
  const int rate = 44100;
  const int64_t seg = 16000;  // 1 s segments at 16 kHz: small, same logic as 30 s
  const std::vector<float> x = signal(static_cast<size_t>(rate) * 3.4, rate, 11);
  const std::vector<float> whole = audio::resample(audio::Pcm{x, rate}).samples;
  AudioStream st(rate, seg, 600);
  std::vector<float> got;
  int taken = 0;
  for (size_t at = 0; at < x.size(); at += 4410) {
    st.append(x.data() + at, std::min<size_t>(4410, x.size() - at));
    while (st.has_segment()) {
      const std::vector<float> s = st.take_segment();
      ASSERT_EQ(static_cast<int64_t>(s.size()), seg);
      got.insert(got.end(), s.begin(), s.end());
      ++taken;
    }
  }
  EXPECT_EQ(taken, 3);  // the segments complete while the clip arrives (the filter delay is small)
  const std::vector<float> rest = st.finish();
  EXPECT_FALSE(st.has_segment());
  EXPECT_LT(static_cast<int64_t>(rest.size()), seg);
  got.insert(got.end(), rest.begin(), rest.end());
  EXPECT_EQ(st.segments_taken(), 3);
  EXPECT_EQ(got, whole);
  EXPECT_NEAR(st.seconds(), 3.4, 1e-4);
}

TEST(AudioStream, BadChunksKeepNothing) {
  AudioStream st(16000, 16000, 2.0);
  const std::vector<float> x = signal(16000, 16000);
  st.append(x.data(), 16000);
  std::vector<float> bad(100, 0.1f);
  bad[50] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(st.append(bad.data(), bad.size()), Error);
  const std::vector<float> big = signal(16001, 16000);
  EXPECT_THROW(st.append(big.data(), big.size()), Error);  // over the 2 s limit
  EXPECT_NEAR(st.seconds(), 1.0, 1e-9);
  st.append(x.data(), 16000);  // exactly the limit
  ASSERT_TRUE(st.has_segment());
  EXPECT_EQ(st.take_segment(), x);
  EXPECT_EQ(st.take_segment(), x);
  EXPECT_TRUE(st.finish().empty());
  EXPECT_THROW(AudioStream(100, 16000, 600), Error);
}
