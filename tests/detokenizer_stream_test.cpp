// StreamingDetokenizer: the concatenated streamed text equals the one-shot decode, which follows
// Hugging Face's ByteFallback rule (tokenizers' decoders/byte_fallback.rs: consecutive <0xNN>
// pieces are gathered; String::from_utf8 of the run, or one U+FFFD per byte of the run when it
// fails), for any id sequence, and only what is still undecided is held back.
//
// The expected strings come from hand-computed cases and from an oracle written here from the
// rule above and the vocabulary's piece strings (not from the code under test).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace {

using Ids = std::vector<int32_t>;
const std::string R = "\xEF\xBF\xBD";  // U+FFFD

const eg::Tokenizer& tiny() {
  static const eg::Tokenizer tok = eg::Tokenizer::load_dir(egtest::shared_dir() + "/tokenizers/tiny-gemma");
  return tok;
}

// Strict UTF-8 (what Rust's String::from_utf8 accepts).
bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n;
    unsigned lo = 0x80, hi = 0xBF;
    if (c < 0x80) { ++i; continue; }
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c >= 0xE0 && c <= 0xEF) { n = 3; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
    else if (c >= 0xF0 && c <= 0xF4) { n = 4; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
    else return false;
    if (i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return false;
    }
    i += n;
  }
  return true;
}

// Some continuation of `run` by up to 3 bytes is valid UTF-8 (brute force over the bytes that
// bound every lead byte's allowed second-byte range).
bool may_become_valid(const std::string& run) {
  static const unsigned char cont[] = {0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF};
  if (valid_utf8(run)) return true;
  for (unsigned char a : cont) {
    if (valid_utf8(run + char(a))) return true;
    for (unsigned char b : cont) {
      if (valid_utf8(run + char(a) + char(b))) return true;
      for (unsigned char c : cont)
        if (valid_utf8(run + char(a) + char(b) + char(c))) return true;
    }
  }
  return false;
}

int byte_of(const std::string& piece) {  // "<0xNN>" -> NN, else -1
  if (piece.size() != 6 || piece.compare(0, 3, "<0x") != 0 || piece[5] != '>') return -1;
  return static_cast<int>(std::stoul(piece.substr(3, 2), nullptr, 16));
}

std::string spaces(std::string s) {  // the decoder's Replace("▁" -> " ")
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, 3, "\xE2\x96\x81") == 0) {
      out += ' ';
      i += 3;
    } else {
      out += s[i++];
    }
  }
  return out;
}

// HF decode of `ids` for Gemma's decoder (Replace, ByteFallback, Fuse). held_back (optional):
// the text of a trailing run that may still become valid is left out (what a streaming decoder
// cannot know yet).
std::string oracle(const eg::Tokenizer& tok, const Ids& ids, bool skip_special, bool held_back = false) {
  std::string out, run;
  auto end_run = [&] {
    if (valid_utf8(run)) out += run;
    else for (size_t i = 0; i < run.size(); ++i) out += R;
    run.clear();
  };
  for (int32_t id : ids) {
    if (id < 0 || id >= tok.vocab_size()) continue;  // HF drops unknown ids
    if (skip_special && tok.is_special(id)) continue;
    const std::string& p = tok.piece(id);
    const int b = byte_of(p);
    if (b >= 0) {
      run.push_back(static_cast<char>(b));
      continue;
    }
    end_run();
    out += spaces(p);
  }
  if (!(held_back && may_become_valid(run))) end_run();
  return out;
}

int32_t byte_id(const eg::Tokenizer& tok, int b) {
  char name[8];
  std::snprintf(name, sizeof name, "<0x%02X>", b);
  const int32_t id = tok.token_id(name);
  EXPECT_GE(id, 0) << name;
  return id;
}

Ids bytes(const eg::Tokenizer& tok, std::initializer_list<int> bs) {
  Ids ids;
  for (int b : bs) ids.push_back(byte_id(tok, b));
  return ids;
}

Ids cat(std::initializer_list<Ids> parts) {
  Ids out;
  for (const Ids& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

std::string stream(eg::StreamingDetokenizer& sd, const Ids& ids) {
  std::string all;
  for (int32_t id : ids) {
    const std::string piece = sd.push(id);
    EXPECT_TRUE(valid_utf8(piece)) << "a piece splits a character";
    all += piece;
  }
  const std::string tail = sd.flush();
  EXPECT_TRUE(valid_utf8(tail));
  return all + tail;
}

std::string stream(const eg::Tokenizer& tok, const Ids& ids, bool skip_special = false) {
  eg::StreamingDetokenizer sd(tok, skip_special);
  return stream(sd, ids);
}

TEST(DetokenizerStream, HandComputedByteFallbackCases) {
  const eg::Tokenizer& t = tiny();
  const Ids a = {t.token_id("a")}, the = {t.token_id("\xE2\x96\x81the")};
  ASSERT_GE(a[0], 0);
  ASSERT_GE(the[0], 0);
  const std::string jiao = "\xE5\x8F\xAB";  // 叫 = E5 8F AB
  struct Case {
    Ids ids;
    std::string want;
  };
  const std::vector<Case> cases = {
      {bytes(t, {0xE5, 0x8F, 0xAB}), jiao},
      {bytes(t, {0x80, 0xE5, 0x8F, 0xAB}), R + R + R + R},  // a stray byte before a complete character
      {bytes(t, {0xE5, 0x8F, 0xAB, 0x80}), R + R + R + R},  // ... and after it
      {cat({bytes(t, {0x80}), a, bytes(t, {0xE5, 0x8F, 0xAB})}), R + "a" + jiao},  // split runs
      {cat({bytes(t, {0xE5, 0x8F, 0xAB}), a, bytes(t, {0x80})}), jiao + "a" + R},
      {bytes(t, {0x41, 0xE5, 0x8F, 0xAB}), "A" + jiao},
      {cat({the, bytes(t, {0xE5, 0x8F, 0xAB})}), " the" + jiao},
      {cat({bytes(t, {0xE5, 0x8F}), a}), R + R + "a"},  // truncated character
      {bytes(t, {0xE5, 0x8F}), R + R},                  // dangling at the end of the stream
      {cat({a, bytes(t, {0xF0, 0x9F})}), "a" + R + R},
      {bytes(t, {0xF0, 0x9F, 0x98, 0x80}), "\xF0\x9F\x98\x80"},
      {bytes(t, {0xF0, 0x9F, 0x98, 0x80, 0xF0, 0x9F}), R + R + R + R + R + R},
      {bytes(t, {0xC0, 0x80}), R + R},              // overlong
      {bytes(t, {0xED, 0xA0, 0x80}), R + R + R},    // surrogate
      {bytes(t, {0xF4, 0x90, 0x80, 0x80}), R + R + R + R},  // above U+10FFFF
      {bytes(t, {0xFF}), R},
      {cat({bytes(t, {0xE4, 0xB8}), a, bytes(t, {0xAD})}), R + R + "a" + R},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    EXPECT_EQ(t.decode(cases[i].ids), cases[i].want);
    EXPECT_EQ(stream(t, cases[i].ids), cases[i].want);
    EXPECT_EQ(oracle(t, cases[i].ids, false), cases[i].want);  // the oracle itself
  }
  // A skipped special token does not end a run (decode drops it before the decoder).
  const Ids split = cat({bytes(t, {0xE5}), Ids{1}, bytes(t, {0x8F, 0xAB})});
  ASSERT_TRUE(t.is_special(1));
  EXPECT_EQ(t.decode(split, true), jiao);
  EXPECT_EQ(stream(t, split, true), jiao);
  EXPECT_EQ(t.decode(split, false), R + "<eos>" + R + R);
  EXPECT_EQ(stream(t, split, false), R + "<eos>" + R + R);
}

TEST(DetokenizerStream, HoldsBackOnlyWhatIsUndecided) {
  const eg::Tokenizer& t = tiny();
  eg::StreamingDetokenizer sd(t);
  EXPECT_EQ(sd.push(byte_id(t, 0xE5)), "");
  EXPECT_EQ(sd.push(byte_id(t, 0x8F)), "");
  EXPECT_EQ(sd.push(byte_id(t, 0xAB)), "");  // 叫 is complete, but a stray byte may still follow
  EXPECT_EQ(sd.push(byte_id(t, 0x80)), R + R + R + R);  // now the run can never be valid
  EXPECT_EQ(sd.push(byte_id(t, 0xE5)), R);  // every further byte of the run: one U+FFFD at once
  EXPECT_EQ(sd.push(t.token_id("a")), "a");
  EXPECT_EQ(sd.push(byte_id(t, 0xE5)), "");
  EXPECT_EQ(sd.push(byte_id(t, 0x8F)), "");
  EXPECT_EQ(sd.push(byte_id(t, 0xAB)), "");
  EXPECT_EQ(sd.push(t.token_id("a")), "\xE5\x8F\xAB" "a");
  EXPECT_EQ(sd.push(byte_id(t, 0xC3)), "");
  EXPECT_EQ(sd.flush(), R);
  EXPECT_EQ(sd.flush(), "");  // reusable
  EXPECT_EQ(sd.push(byte_id(t, 0x41)), "");
  EXPECT_EQ(sd.flush(), "A");
}

// Random id sequences: byte pieces of valid characters, truncated characters, stray and random
// bytes, normal pieces, special tokens, unknown ids.
Ids random_ids(const eg::Tokenizer& t, std::mt19937& rng) {
  static const std::vector<std::string> normal = {"a", "\xE2\x96\x81the", "\xE2\x96\x81", "ing", ".", "<unused0>"};
  Ids ids;
  const int n = 1 + static_cast<int>(rng() % 24);
  for (int k = 0; k < n; ++k) {
    switch (rng() % 8) {
      case 0:
      case 1: {  // a whole character as bytes (1-4 bytes)
        static const uint32_t ranges[][2] = {{0x20, 0x7E}, {0x80, 0x7FF}, {0x800, 0xD7FF}, {0xE000, 0xFFFD}, {0x10000, 0x10FFFF}};
        const auto& rg = ranges[rng() % 5];
        const uint32_t cp = rg[0] + rng() % (rg[1] - rg[0] + 1);
        std::string u;
        if (cp < 0x80) u = std::string(1, char(cp));
        else if (cp < 0x800) u = {char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))};
        else if (cp < 0x10000) u = {char(0xE0 | (cp >> 12)), char(0x80 | ((cp >> 6) & 0x3F)), char(0x80 | (cp & 0x3F))};
        else u = {char(0xF0 | (cp >> 18)), char(0x80 | ((cp >> 12) & 0x3F)), char(0x80 | ((cp >> 6) & 0x3F)), char(0x80 | (cp & 0x3F))};
        const bool truncate = u.size() > 1 && rng() % 4 == 0;
        const size_t len = truncate ? 1 + rng() % (u.size() - 1) : u.size();
        for (size_t i = 0; i < len; ++i) ids.push_back(byte_id(t, static_cast<unsigned char>(u[i])));
        break;
      }
      case 2:  // a stray continuation byte or any byte
        ids.push_back(byte_id(t, rng() % 2 ? 0x80 + rng() % 64 : rng() % 256));
        break;
      case 3:
      case 4:
        ids.push_back(t.token_id(normal[rng() % normal.size()]));
        break;
      case 5:  // any vocabulary id
        ids.push_back(static_cast<int32_t>(rng() % t.vocab_size()));
        break;
      case 6:  // special tokens (<eos>, <bos>)
        ids.push_back(1 + static_cast<int32_t>(rng() % 2));
        break;
      default:  // an id decode() drops
        ids.push_back(rng() % 2 ? -1 : t.vocab_size() + 5);
        break;
    }
  }
  return ids;
}

void check_random(const eg::Tokenizer& t, std::string (*expect)(const eg::Tokenizer&, const Ids&, bool, bool),
                  int iterations, uint32_t seed) {
  std::mt19937 rng(seed);
  for (bool skip : {false, true}) {
    eg::StreamingDetokenizer sd(t, skip);  // one detokenizer for every sequence: flush() resets it
    for (int iter = 0; iter < iterations; ++iter) {
      const Ids ids = random_ids(t, rng);
      SCOPED_TRACE("iteration " + std::to_string(iter) + " skip_special " + std::to_string(skip));
      const std::string want = expect(t, ids, skip, false);
      ASSERT_EQ(t.decode(ids, skip), want);
      std::string streamed;
      Ids so_far;
      for (int32_t id : ids) {
        const std::string piece = sd.push(id);
        ASSERT_TRUE(valid_utf8(piece));
        streamed += piece;
        so_far.push_back(id);
        // Exactly the decided text so far: nothing is emitted early, nothing decided is held.
        ASSERT_EQ(streamed, expect(t, so_far, skip, true));
      }
      streamed += sd.flush();
      ASSERT_EQ(streamed, want);
    }
  }
}

std::string gemma_oracle(const eg::Tokenizer& t, const Ids& ids, bool skip, bool held) {
  return oracle(t, ids, skip, held);
}

TEST(DetokenizerStream, RandomSequencesEqualOneShotDecode) {
  check_random(tiny(), gemma_oracle, 3000, 2026);
}

TEST(DetokenizerStream, GgufTokenizerToo) {
  // A tokenizer rebuilt from GGUF metadata (llama.cpp's file) streams the same way.
  const auto g = eg::GGUFFile::open(egtest::shared_dir() + "/models/gguf/tiny-gemma3/tiny-gemma3-q4_0.gguf");
  const eg::Tokenizer t = eg::Tokenizer::from_gguf(*g);
  check_random(t, gemma_oracle, 500, 7);
}

// A decoder other than Gemma's (Llama's: ... Fuse, Strip one leading space) takes the generic
// streaming path; the result must still equal decode().
TEST(DetokenizerStream, GenericDecoderEqualsOneShotDecode) {
  nlohmann::json tj = nlohmann::json::parse(egtest::read_file(egtest::shared_dir() + "/tokenizers/tiny-gemma/tokenizer.json"));
  tj["decoder"]["decoders"].push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  const std::string dir = egtest::make_temp_dir();
  egtest::write_file(dir + "/tokenizer.json", tj.dump());
  const eg::Tokenizer t = eg::Tokenizer::load_files(dir + "/tokenizer.json", "");
  auto strip_oracle = [](const eg::Tokenizer& tk, const Ids& ids, bool skip, bool held) {
    std::string s = oracle(tk, ids, skip, held);
    if (!held && !s.empty() && s[0] == ' ') s.erase(0, 1);
    return s;
  };
  std::mt19937 rng(99);
  for (int iter = 0; iter < 1000; ++iter) {
    const Ids ids = random_ids(t, rng);
    SCOPED_TRACE("iteration " + std::to_string(iter));
    const std::string want = strip_oracle(t, ids, false, false);
    ASSERT_EQ(t.decode(ids), want);
    ASSERT_EQ(stream(t, ids), want);
  }
}

}  // namespace
