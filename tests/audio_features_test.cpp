// Audio decoding and the Gemma 4 feature extractor against transformers 5.17 (tiny-gemma4-mm:
// aud.<clip>.input_features / _mask; tolerance 1e-3 on valid frames, invalid frames exactly 0 —
// the README's), our FFT against a float64 DFT, resampling, and bad input.
#include <gtest/gtest.h>

#include <random>

#include "audio/audio.h"
#include "audio/features.h"
#include "audio/fft.h"
#include "audio_test_util.h"
#include "core/error.h"

using namespace eg;

namespace {

const std::map<std::string, egtest::RefArray>& arrays() {
  static const auto a = egtest::read_ref_arrays(egtest::g4mm_dir() + "/reference_arrays.safetensors");
  return a;
}

}  // namespace

TEST(AudioFft, MatchesDft) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int n : {2, 4, 8, 64, 512}) {
    std::vector<double> x(n);
    for (double& v : x) v = u(rng);
    audio::RealFft f(n);
    std::vector<std::complex<double>> X;
    f.forward(x.data(), X);
    ASSERT_EQ(X.size(), static_cast<size_t>(n / 2 + 1));
    const double pi = std::acos(-1.0);
    for (int k = 0; k <= n / 2; ++k) {
      std::complex<double> want = 0;
      for (int t = 0; t < n; ++t) want += x[t] * std::polar(1.0, -2 * pi * k * t / n);
      EXPECT_NEAR(X[k].real(), want.real(), 1e-12 * n) << n << " " << k;
      EXPECT_NEAR(X[k].imag(), want.imag(), 1e-12 * n) << n << " " << k;
    }
  }
  EXPECT_THROW(audio::RealFft(320), Error);
  EXPECT_THROW(audio::RealFft(1), Error);
}

TEST(AudioFeatures, MatchTransformers) {
  const auto cfg = audio::load_feature_config(egtest::g4mm_dir());
  const audio::FeatureExtractor fe(cfg);
  const auto ref = egtest::read_json(egtest::g4mm_dir() + "/reference.json");
  int n = 0;
  for (const char* id : {"aud_chirp_1p3s", "aud_tone_noise_4p7s"}) {
    SCOPED_TRACE(id);
    const auto& r = ref["audio"][id];
    const audio::Pcm p = audio::load_audio_file(egtest::clip_path(id));
    ASSERT_EQ(p.rate, 16000);
    ASSERT_EQ(static_cast<int64_t>(p.samples.size()), r["num_samples"].get<int64_t>());
    const audio::Features F = fe.extract(p.samples.data(), static_cast<int64_t>(p.samples.size()));
    EXPECT_EQ(F.frames, r["num_frames_padded"].get<int>());
    EXPECT_EQ(F.valid, r["num_valid_frames"].get<int>());
    EXPECT_EQ(audio::valid_frames(static_cast<int64_t>(p.samples.size()), cfg), F.valid);
    const auto want = arrays().at(std::string("aud.") + id + ".input_features").f32();
    const auto& m = arrays().at(std::string("aud.") + id + ".input_features_mask");
    ASSERT_EQ(want.size(), F.values.size());
    ASSERT_EQ(m.bytes.size(), F.mask.size());
    for (size_t i = 0; i < F.mask.size(); ++i) EXPECT_EQ(F.mask[i], static_cast<uint8_t>(m.bytes[i])) << i;
    double worst = 0;
    for (int i = 0; i < F.frames; ++i)
      for (int j = 0; j < F.mel; ++j) {
        const size_t k = static_cast<size_t>(i) * F.mel + j;
        if (F.mask[i])
          worst = std::max(worst, std::abs(static_cast<double>(F.values[k]) - want[k]));
        else
          EXPECT_EQ(F.values[k], 0.0f);
      }
    EXPECT_LE(worst, 1e-3);
    std::printf("%s: input_features max|d| %.3g over %d valid frames\n", id, worst, F.valid);
    ++n;
  }
  EXPECT_EQ(n, 2);
}

// The test above can fail: a float-rounded mel scale (slaney instead of HTK) or a symmetric
// window moves the features far beyond 1e-3. Here: a wrong mel_floor.
TEST(AudioFeatures, WrongConfigIsFarOff) {
  auto cfg = audio::load_feature_config(egtest::g4mm_dir());
  cfg.mel_floor = 1e-5;
  const audio::FeatureExtractor fe(cfg);
  const audio::Pcm p = audio::load_audio_file(egtest::clip_path("aud_chirp_1p3s"));
  const auto F = fe.extract(p.samples.data(), static_cast<int64_t>(p.samples.size()));
  const auto want = arrays().at("aud.aud_chirp_1p3s.input_features").f32();
  EXPECT_GT(egtest::diff(F.values.data(), want.data(), want.size()).max_abs, 1e-2);
}

TEST(AudioFeatures, FrameAndTokenCounts) {
  const audio::FeatureConfig c;
  EXPECT_EQ(audio::valid_frames(0, c), 0);
  EXPECT_EQ(audio::valid_frames(160, c), 0);
  EXPECT_EQ(audio::valid_frames(161, c), 1);
  EXPECT_EQ(audio::valid_frames(16000, c), 99);
  EXPECT_EQ(audio::valid_frames(480000, c), 2999);
  const audio::FeatureExtractor fe(c);
  std::vector<float> x(480001, 0.0f);
  EXPECT_THROW(fe.extract(x.data(), 480001), Error);
  EXPECT_THROW(fe.extract(x.data(), 0), Error);
  x[5] = std::nanf("");
  EXPECT_THROW(fe.extract(x.data(), 1000), Error);
  // Silence is valid input: every valid frame is ln(mel_floor).
  x[5] = 0;
  const auto F = fe.extract(x.data(), 16000);
  EXPECT_EQ(F.valid, 99);
  EXPECT_FLOAT_EQ(F.values[0], static_cast<float>(std::log(1e-3)));
}

TEST(AudioDecode, FormatsAgree) {
  // The same samples as PCM16, PCM24, PCM32, float32 and stereo (L = R) decode to the same floats.
  std::vector<int16_t> v;
  for (int i = 0; i < 4000; ++i) v.push_back(static_cast<int16_t>(8000 * std::sin(i * 0.05)));
  const audio::Pcm a = audio::decode_audio(egtest::wav16(16000, 1, v), "pcm16");
  ASSERT_EQ(a.samples.size(), v.size());
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(a.samples[i], v[i] / 32768.0f);
  std::string d24, d32, df;
  for (int16_t x : v) {
    egtest::put_le(d24, static_cast<uint32_t>(static_cast<int32_t>(x) * 256), 3);
    egtest::put_le(d32, static_cast<uint32_t>(static_cast<int32_t>(x) * 65536), 4);
    const float f = x / 32768.0f;
    uint32_t u;
    std::memcpy(&u, &f, 4);
    egtest::put_le(df, u, 4);
  }
  for (const auto& [name, bytes] : {std::pair{"pcm24", egtest::wav_bytes(16000, 1, 24, 1, d24)},
                                    std::pair{"pcm32", egtest::wav_bytes(16000, 1, 32, 1, d32)},
                                    std::pair{"float", egtest::wav_bytes(16000, 1, 32, 3, df)}}) {
    const audio::Pcm b = audio::decode_audio(bytes, name);
    ASSERT_EQ(b.samples.size(), v.size()) << name;
    for (size_t i = 0; i < v.size(); ++i) ASSERT_NEAR(b.samples[i], a.samples[i], 1e-7) << name << " " << i;
  }
  std::vector<int16_t> st;
  for (int16_t x : v) st.insert(st.end(), {x, x});
  const audio::Pcm s = audio::decode_audio(egtest::wav16(16000, 2, st), "stereo");
  ASSERT_EQ(s.samples, a.samples);
  // Opposite channels cancel in the mean.
  for (size_t i = 1; i < st.size(); i += 2) st[i] = static_cast<int16_t>(-st[i]);
  const audio::Pcm z = audio::decode_audio(egtest::wav16(16000, 2, st), "stereo");
  for (float x : z.samples) ASSERT_EQ(x, 0.0f);
}

TEST(AudioDecode, Resample44k1To16k) {
  const audio::Pcm p = audio::load_audio_file(egtest::clip_path("aud_tone_44k1_2p0s"));
  ASSERT_EQ(p.rate, 44100);
  ASSERT_EQ(p.samples.size(), 88200u);
  const audio::Pcm r = audio::to_model_rate(p);
  EXPECT_EQ(r.rate, 16000);
  EXPECT_NEAR(static_cast<double>(r.samples.size()), 32000.0, 1.0);
  // 660 Hz survives: correlate with the tone at 16 kHz away from the edges.
  double best = 0;
  for (double ph = 0; ph < 6.283; ph += 0.05) {
    double c = 0, e = 0;
    for (size_t i = 2000; i < 30000; ++i) {
      const double s = std::sin(2 * 3.14159265358979 * 660.0 * i / 16000.0 + ph);
      c += r.samples[i] * s;
      e += r.samples[i] * r.samples[i];
    }
    best = std::max(best, c / std::sqrt(e * 14000.0));
  }
  EXPECT_GT(best, 0.99);
  const audio::FeatureExtractor fe(audio::FeatureConfig{});
  EXPECT_EQ(fe.extract(r.samples.data(), static_cast<int64_t>(r.samples.size())).valid, 199);
}

TEST(AudioDecode, BadInput) {
  const std::string good = egtest::read_file(egtest::clip_path("aud_chirp_1p3s"));
  EXPECT_THROW(audio::decode_audio("", "empty"), Error);
  EXPECT_THROW(audio::decode_audio(good.substr(0, 30), "header cut"), Error);
  EXPECT_THROW(audio::decode_audio(good.substr(0, good.size() / 2), "truncated"), Error);
  EXPECT_THROW(audio::decode_audio(std::string(5000, '\x7f'), "garbage"), Error);
  std::string bad = good;
  bad.replace(0, 4, "RIFX");
  EXPECT_THROW(audio::decode_audio(bad, "corrupt magic"), Error);
  EXPECT_THROW(audio::decode_audio(egtest::wav16(16000, 1, {}), "no samples"), Error);
  EXPECT_THROW(audio::decode_audio(egtest::wav16(500, 1, {1, 2, 3}), "rate 500"), Error);
  EXPECT_THROW(audio::decode_audio(egtest::wav_bytes(16000, 1, 16, 0x1234, std::string(300, '\0')), "format 0x1234"), Error);
  EXPECT_THROW(audio::load_audio_file("/nonexistent.wav"), Error);
  EXPECT_THROW(audio::decode_audio(good, "limit", 1.0), Error);  // 1.3 s over a 1 s limit
  // 11 minutes (8-bit, 1 kHz: 660 kB) over the default 10-minute limit, refused from the header.
  EXPECT_THROW(audio::decode_audio(egtest::wav_bytes(1000, 1, 8, 1, std::string(660000, '\x80')), "long"), Error);
  // Non-finite float samples.
  const float nan = std::nanf("");
  std::string d(8, '\0');
  std::memcpy(d.data() + 4, &nan, 4);
  EXPECT_THROW(audio::decode_audio(egtest::wav_bytes(16000, 1, 32, 3, d), "nan"), Error);
  const float ok[2] = {0.5f, 0.25f};
  EXPECT_THROW(audio::downmix(ok, 2, 3, 16000), Error);
  EXPECT_THROW(audio::resample(audio::Pcm{{0.1f}, 100}, 16000), Error);
}

// FLAC (lossless: the same samples), OGG Vorbis and MP3 (lossy: the same length, close samples),
// written by libsndfile's encoders and read back through decode_audio.
TEST(AudioDecode, FlacOggMp3) {
  std::vector<int16_t> v;
  for (int i = 0; i < 16000; ++i) v.push_back(static_cast<int16_t>(9000 * std::sin(i * 0.07)));
  const std::string dir = egtest::make_temp_dir();
  struct F {
    const char* name;
    int format;
    double tol;
  };
  for (const F f : {F{"a.flac", SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 0.0}, F{"a.ogg", SF_FORMAT_OGG | SF_FORMAT_VORBIS, 0.05},
                    F{"a.mp3", SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III, 0.05}}) {
    SCOPED_TRACE(f.name);
    const std::string path = dir + "/" + f.name;
    ASSERT_TRUE(egtest::write_encoded(path, f.format, 16000, v)) << sf_strerror(nullptr);
    const audio::Pcm p = audio::load_audio_file(path);
    EXPECT_EQ(p.rate, 16000);
    if (f.tol == 0.0) {
      ASSERT_EQ(p.samples.size(), v.size());
      for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(p.samples[i], v[i] / 32768.0f) << i;
      continue;
    }
    // Lossy codecs add priming delay / padding: compare energy, and the best-aligned correlation.
    ASSERT_GT(p.samples.size(), v.size() * 9 / 10);
    double best = 0;
    for (int lag = 0; lag < 3000; ++lag) {
      double c = 0, e1 = 0, e2 = 0;
      for (size_t i = 2000; i < 12000 && i + lag < p.samples.size(); ++i) {
        c += p.samples[i + lag] * (v[i] / 32768.0);
        e1 += p.samples[i + lag] * p.samples[i + lag];
        e2 += (v[i] / 32768.0) * (v[i] / 32768.0);
      }
      if (e1 > 0) best = std::max(best, c / std::sqrt(e1 * e2));
    }
    EXPECT_GT(best, 0.99);
    // A truncated lossy file is refused or decodes to fewer samples, never crashes.
    const std::string bytes = egtest::read_file(path);
    try {
      const audio::Pcm t = audio::decode_audio(bytes.substr(0, bytes.size() / 3), "cut");
      EXPECT_LT(t.samples.size(), p.samples.size());
    } catch (const Error&) {
    }
  }
}

// A brief fuzz: random byte flips and cuts of a WAV, FLAC and random bytes never crash the
// decoder (they decode or throw eg::Error).
TEST(AudioDecode, Fuzz) {
  std::vector<int16_t> v(3000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int16_t>(i * 37);
  std::vector<std::string> seeds = {egtest::wav16(16000, 1, v)};
  const std::string path = egtest::make_temp_dir() + "/f.flac";
  ASSERT_TRUE(egtest::write_encoded(path, SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 16000, v));
  seeds.push_back(egtest::read_file(path));
  std::mt19937 rng(11);
  int ok = 0, refused = 0;
  for (const std::string& seed : seeds)
    for (int it = 0; it < 300; ++it) {
      std::string b = seed;
      const int flips = 1 + static_cast<int>(rng() % 8);
      for (int k = 0; k < flips; ++k) b[rng() % b.size()] = static_cast<char>(rng());
      if (rng() % 3 == 0) b.resize(rng() % b.size());
      try {
        audio::decode_audio(b, "fuzz");
        ++ok;
      } catch (const Error&) {
        ++refused;
      }
    }
  EXPECT_EQ(ok + refused, 600);
  std::printf("fuzz: %d decoded, %d refused\n", ok, refused);
}
