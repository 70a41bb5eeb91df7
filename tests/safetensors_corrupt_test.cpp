// safetensors robustness: crafted corrupt files, every truncation of the real model, and random
// mutations. Each bad input must give a one-line eg::Error, never a crash.
#include "format/safetensors.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "core/error.h"
#include "format/mapped_file.h"
#include "safetensors_helpers.h"
#include "test_util.h"

namespace fs = std::filesystem;
using json = nlohmann::json;


namespace {

using namespace sttest;

// ---------------------------------------------------------------------------------------------
// Crafted corrupt files: each gives a one-line eg::Error naming the file (and the tensor).

TEST(SafetensorsCorrupt, FramingErrors) {
  const std::string dir = egtest::make_temp_dir();
  auto err_bytes = [&](const std::string& bytes) {
    const std::string path = dir + "/f.safetensors";
    egtest::write_file(path, bytes);
    const std::string m = error_of([&] { eg::TensorStore::open_file(path); });
    EXPECT_NE(m.find(path), std::string::npos) << m;
    EXPECT_TRUE(one_line(m)) << m;
    return m;
  };
  EXPECT_NE(err_bytes("").find("too short"), std::string::npos);
  EXPECT_NE(err_bytes("1234567").find("too short"), std::string::npos);
  EXPECT_NE(err_bytes(le64(0)).find("header length is 0"), std::string::npos);
  EXPECT_NE(err_bytes(le64(0) + "{}").find("header length is 0"), std::string::npos);
  EXPECT_NE(err_bytes(le64(100'000'001) + "{}").find("too large"), std::string::npos);
  EXPECT_NE(err_bytes(le64(UINT64_MAX) + "{}").find("too large"), std::string::npos);
  EXPECT_NE(err_bytes(le64(3) + "{}").find("past the end"), std::string::npos);
  EXPECT_NE(err_bytes(le64(1000) + "{}").find("past the end"), std::string::npos);
  EXPECT_NE(err_bytes(le64(2) + "{]").find("not valid JSON"), std::string::npos);
  EXPECT_NE(err_bytes(le64(4) + "{}{}").find("not valid JSON"), std::string::npos);
  EXPECT_NE(err_bytes(le64(2) + "[]").find("not a JSON object"), std::string::npos);
  EXPECT_NE(err_bytes(le64(4) + "\"x\"\n").find("not a JSON object"), std::string::npos);
  EXPECT_NE(err_bytes(le64(4) + "null").find("not a JSON object"), std::string::npos);
  // Invalid UTF-8 inside a string and control characters are rejected with a one-line message.
  EXPECT_NE(err_bytes(le64(8) + "{\"\xff\xfe\":1}").find("not valid JSON"), std::string::npos);
  EXPECT_NE(err_bytes(le64(8) + "{\"a\n\":1}").find("not valid JSON"), std::string::npos);
  // Numbers out of range are a JSON error, not a crash.
  EXPECT_NE(err_bytes(le64(11) + "{\"a\":1e999}").find("not valid JSON"), std::string::npos);
  // An empty header object is a valid (empty) file; so is trailing padding.
  const std::string path = dir + "/ok.safetensors";
  egtest::write_file(path, le64(8) + "{}      ");
  EXPECT_TRUE(eg::TensorStore::open_file(path).names().empty());
}

TEST(SafetensorsCorrupt, EntryErrors) {
  struct Case {
    std::string header;
    size_t data;
    std::string expect;  // substring of the message
  };
  const std::string ok_meta = R"("__metadata__":{"format":"pt"},)";
  const std::vector<Case> cases = {
      {R"({"__metadata__":[]})", 0, "\"__metadata__\" must be an object"},
      {R"({"__metadata__":"pt"})", 0, "\"__metadata__\" must be an object"},
      {R"({"__metadata__":{"format":1}})", 0, "\"__metadata__\" must be an object"},
      {R"({"__metadata__":{"a":"b","c":null}})", 0, "\"__metadata__\" must be an object"},
      {R"({"t":[1,2]})", 0, "tensor 't': header entry is not a JSON object"},
      {R"({"t":"F32"})", 0, "tensor 't': header entry is not a JSON object"},
      {R"({"t":{"shape":[1],"data_offsets":[0,4]}})", 4, "tensor 't': missing \"dtype\""},
      {R"({"t":{"dtype":32,"shape":[1],"data_offsets":[0,4]}})", 4,
       "tensor 't': \"dtype\" is not a string"},
      {R"({"t":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", 8,
       "tensor 't': unsupported dtype 'I64'"},
      {R"({"t":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})", 1,
       "unsupported dtype 'F8_E4M3'"},
      {R"({"t":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}})", 4, "unsupported dtype 'f32'"},
      {R"({"t":{"dtype":"F32","data_offsets":[0,4]}})", 4, "tensor 't': missing \"shape\""},
      {R"({"t":{"dtype":"F32","shape":4,"data_offsets":[0,4]}})", 4, "\"shape\" is not an array"},
      {R"({"t":{"dtype":"F32","shape":{"a":1},"data_offsets":[0,4]}})", 4,
       "\"shape\" is not an array"},
      {R"({"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4,
       "tensor 't': negative dimension -1"},
      {R"({"t":{"dtype":"F32","shape":[2,-3],"data_offsets":[0,4]}})", 4, "negative dimension -3"},
      {R"({"t":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4, "non-negative integers"},
      {R"({"t":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})", 4, "non-negative integers"},
      {R"({"t":{"dtype":"F32","shape":["1"],"data_offsets":[0,4]}})", 4, "non-negative integers"},
      {R"({"t":{"dtype":"F32","shape":[true],"data_offsets":[0,4]}})", 4, "non-negative integers"},
      {R"({"t":{"dtype":"F32","shape":[[1]],"data_offsets":[0,4]}})", 4, "non-negative integers"},
      {R"({"t":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,4]}})", 4,
       "too large"},
      {R"({"t":{"dtype":"F32","shape":[99999999999999999999999],"data_offsets":[0,4]}})", 4,
       "non-negative integers"},
      {R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", 4,
       "overflows"},
      {R"({"t":{"dtype":"F32","shape":[3037000500,3037000500],"data_offsets":[0,4]}})", 4,
       "overflows"},
      {R"({"t":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,4]}})", 4,
       "overflows"},
      {R"({"t":{"dtype":"F32","shape":[1]}})", 4, "tensor 't': missing \"data_offsets\""},
      {R"({"t":{"dtype":"F32","shape":[1],"data_offsets":0}})", 4,
       "\"data_offsets\" must be an array"},
      {R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4,
       "\"data_offsets\" must be an array"},
      {R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", 8,
       "\"data_offsets\" must be an array"},
      {R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", 4,
       "\"data_offsets\" must be an array"},
      {R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,"4"]}})", 4,
       "\"data_offsets\" must be an array"},
      {R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4.0]}})", 4,
       "\"data_offsets\" must be an array"},
      {R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}})", 4,
       "tensor 't': data_offsets [4, 0]: begin > end"},
      {R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4,
       "beyond the data buffer (4 bytes)"},
      {R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[18446744073709551611,18446744073709551615]}})",
       4, "beyond the data buffer"},
      {R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 8,
       "hold 4 bytes but F32 [2] needs 8"},
      {R"({"t":{"dtype":"BF16","shape":[2],"data_offsets":[0,8]}})", 8,
       "hold 8 bytes but BF16 [2] needs 4"},
      {R"({"t":{"dtype":"F16","shape":[],"data_offsets":[0,4]}})", 4, "needs 2"},
      // Layout: must tile the buffer from 0, no overlap, no gap (like the reference reader).
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       12, "tensor 'b': data overlaps tensor 'a'"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
       4, "tensor 'b': data overlaps tensor 'a'"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8,
       "tensor 'a': 4 unused bytes before"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[6,10]}})",
       10, "tensor 'b': 2 unused bytes before"},
  };
  for (const Case& c : cases) {
    std::string path;
    const std::string m = open_error(c.header, c.data, &path);
    EXPECT_NE(m.find(c.expect), std::string::npos) << "header: " << c.header << "\nmessage: " << m;
    EXPECT_EQ(m.rfind(path + ": ", 0), 0u) << m;
    EXPECT_TRUE(one_line(m)) << m;
    // With the metadata first it fails the same way.
    if (c.header.rfind("{\"__metadata__\"", 0) != 0) {
      const std::string m2 = open_error("{" + ok_meta + c.header.substr(1), c.data);
      EXPECT_NE(m2.find(c.expect), std::string::npos) << m2;
    }
  }
}

TEST(SafetensorsCorrupt, NamesInMessagesAreSanitized) {
  const std::string m = open_error(
      "{\"bad\\nname\\u0001\":{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1);
  EXPECT_TRUE(one_line(m)) << m;
  EXPECT_NE(m.find("tensor 'bad\\x0aname\\x01'"), std::string::npos) << m;
  const std::string long_name(5000, 'n');
  const std::string m2 = open_error("{\"" + long_name + "\":3}", 0);
  EXPECT_LT(m2.size(), 600u);
}

TEST(SafetensorsCorrupt, LenientCases) {
  const std::string dir = egtest::make_temp_dir();
  const std::string path = dir + "/ok.safetensors";
  // Tensors listed in any order; zero-size tensors anywhere; unknown extra fields; trailing
  // padding after the data; header without padding; an empty "__metadata__".
  const std::string h = R"({"b":{"dtype":"F16","shape":[2],"data_offsets":[4,8],"extra":1},)"
                        R"("e":{"dtype":"F32","shape":[0,5],"data_offsets":[4,4]},)"
                        R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                        R"("z":{"dtype":"F32","shape":[0],"data_offsets":[8,8]},)"
                        R"("__metadata__":{}})";
  egtest::write_file(path, make_file(h, 8 + 3));
  const eg::TensorStore st = eg::TensorStore::open_file(path);
  EXPECT_EQ(st.names(), (std::vector<std::string>{"a", "b", "e", "z"}));
  EXPECT_EQ(st.total_bytes(), 8u);
  EXPECT_EQ(st.find("b")->data - st.find("a")->data, 4);
  EXPECT_EQ(st.find("e")->nbytes, 0u);
}

// Every truncation of the real model gives eg::Error (never a crash). The copy is shrunk in
// place with ftruncate, from long to short, so no cut re-writes the file.
TEST(SafetensorsCorrupt, TruncationsOfRealModel) {
  const std::string src = egtest::read_file(tiny_model_file());
  uint64_t n = 0;
  header_of(src, &n);
  const std::string path = egtest::make_temp_dir() + "/cut.safetensors";
  egtest::write_file(path, src);

  std::vector<size_t> cuts;
  const size_t header_end = 8 + n;
  for (size_t c = 0; c <= header_end + 64; ++c) cuts.push_back(c);  // every cut in the header
  std::mt19937_64 rng(7);
  for (int i = 0; i < 300; ++i) cuts.push_back(header_end + rng() % (src.size() - header_end));
  for (size_t k = 1; k <= 64; ++k) cuts.push_back(src.size() - k);  // just before the end
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());

  int errors = 0;
  for (auto it = cuts.rbegin(); it != cuts.rend(); ++it) {
    ASSERT_EQ(truncate(path.c_str(), static_cast<off_t>(*it)), 0);
    try {
      eg::TensorStore::open_file(path);
      ADD_FAILURE() << "truncation at " << *it << " loaded";
    } catch (const eg::Error& e) {
      ++errors;
      ASSERT_TRUE(one_line(e.what()));
    }
  }
  EXPECT_EQ(errors, static_cast<int>(cuts.size()));
}

// Random mutations of a small valid file: each must either throw eg::Error or load a store whose
// tensors are consistent with the (mutated) header, checked independently here.
TEST(SafetensorsCorrupt, RandomMutationsFuzz) {
  const std::string dir = egtest::make_temp_dir();
  const std::string seed_path = dir + "/seed.safetensors";
  std::vector<float> a(6, 1.5f);
  std::vector<uint16_t> b(4, 0x3c00), c(3, 0x3f80);
  eg::write_safetensors(seed_path,
                        {{"a", eg::DType::F32, {2, 3}, a.data()},
                         {"b", eg::DType::F16, {4}, b.data()},
                         {"c", eg::DType::BF16, {3}, c.data()},
                         {"d", eg::DType::F32, {0}, nullptr}},
                        {{"format", "pt"}});
  const std::string seed = egtest::read_file(seed_path);
  const std::string path = dir + "/mut.safetensors";
  std::mt19937 rng(20240601);
  const char interesting[] = "{}[]\",:0123456789-.eE \\ntfu\x00\xff";

  int loaded = 0, rejected = 0, iters = 0;
  const auto start = std::chrono::steady_clock::now();
  for (; iters < 5000; ++iters) {
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(3)) break;
    std::string m = seed;
    const int nmut = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < nmut; ++k) {
      const uint32_t op = rng() % 6;
      // Most mutations hit the header, where the parsing happens.
      const size_t hi = std::min(m.size(), seed.size() - 20);
      const size_t pos = m.empty() ? 0 : rng() % std::max<size_t>(hi, 1);
      if (m.empty()) break;
      if (op == 0) {
        m[pos] = static_cast<char>(m[pos] ^ (1u << (rng() % 8)));
      } else if (op == 1) {
        m[pos] = interesting[rng() % (sizeof interesting - 1)];
      } else if (op == 2) {
        m.resize(rng() % m.size());
      } else if (op == 3) {
        m.erase(pos, 1 + rng() % 4);
      } else if (op == 4) {
        m.insert(pos, 1, interesting[rng() % (sizeof interesting - 1)]);
      } else {
        m[rng() % std::min<size_t>(m.size(), 8)] = static_cast<char>(rng());  // header length
      }
    }
    egtest::write_file(path, m);
    try {
      const eg::TensorStore st = eg::TensorStore::open_file(path);
      ++loaded;
      // Independent check against the mutated header.
      ASSERT_GE(m.size(), 8u);
      uint64_t n = 0;
      const json h = header_of(m, &n);
      ASSERT_TRUE(h.is_object());
      const uint64_t data_size = m.size() - 8 - n;
      const uint8_t* base = nullptr;
      size_t count = 0;
      for (auto it = h.begin(); it != h.end(); ++it) {
        if (it.key() == "__metadata__") continue;
        ++count;
        const eg::TensorInfo* t = st.find(it.key());
        ASSERT_NE(t, nullptr) << it.key();
        const uint64_t b0 = it.value()["data_offsets"][0].get<uint64_t>();
        const uint64_t e0 = it.value()["data_offsets"][1].get<uint64_t>();
        ASSERT_LE(b0, e0);
        ASSERT_LE(e0, data_size);
        ASSERT_EQ(t->nbytes, e0 - b0);
        ASSERT_EQ(t->nbytes, static_cast<size_t>(t->numel()) * eg::dtype_size(t->dtype));
        if (!base) base = t->data - b0;
        ASSERT_EQ(t->data, base + b0);
        ASSERT_EQ(std::memcmp(t->data, m.data() + 8 + n + b0, t->nbytes), 0);
      }
      ASSERT_EQ(st.names().size(), count);
      ASSERT_TRUE(std::is_sorted(st.names().begin(), st.names().end()));
    } catch (const eg::Error& e) {
      ++rejected;
      ASSERT_TRUE(one_line(e.what())) << e.what();
    }
  }
  EXPECT_GT(rejected, 0);
  EXPECT_GT(loaded, 0);
  std::printf("[ fuzz     ] %d mutations: %d loaded, %d rejected\n", iters, loaded, rejected);
}

}  // namespace
