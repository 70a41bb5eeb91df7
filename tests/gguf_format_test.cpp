// GGUF reader and writer: round trip of every metadata type and several tensor types, the layout
// of llama.cpp's files (alignment, offsets), and corrupt files (hand-built bytes, independent of
// our writer) that must be rejected with a clear eg::Error, never a crash.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>

#include "core/error.h"
#include "format/gguf.h"
#include "test_util.h"

namespace {

using eg::DType;
using eg::GGUFFile;
using eg::GGUFType;
using eg::GGUFValue;

// ---- round trip through our writer ----

TEST(GgufFormat, WriterReaderRoundTrip) {
  const std::string path = egtest::make_temp_dir() + "/rt.gguf";
  std::vector<std::pair<std::string, GGUFValue>> kv;
  kv.emplace_back("general.alignment", GGUFValue::u32(64));
  GGUFValue u8;
  u8.type = GGUFType::U8;
  u8.i = 200;
  kv.emplace_back("t.u8", u8);
  GGUFValue i8;
  i8.type = GGUFType::I8;
  i8.i = -7;
  kv.emplace_back("t.i8", i8);
  GGUFValue u16;
  u16.type = GGUFType::U16;
  u16.i = 65000;
  kv.emplace_back("t.u16", u16);
  GGUFValue i16;
  i16.type = GGUFType::I16;
  i16.i = -30000;
  kv.emplace_back("t.i16", i16);
  kv.emplace_back("t.u32", GGUFValue::u32(4000000000u));
  kv.emplace_back("t.i32", GGUFValue::i32(-2000000000));
  kv.emplace_back("t.u64", GGUFValue::u64(0xFFFFFFFFFFFFFFF0ull));
  GGUFValue i64;
  i64.type = GGUFType::I64;
  i64.i = -(int64_t{1} << 60);
  kv.emplace_back("t.i64", i64);
  kv.emplace_back("t.f32", GGUFValue::f32(1.5f));
  GGUFValue f64;
  f64.type = GGUFType::F64;
  f64.f = 3.141592653589793;
  kv.emplace_back("t.f64", f64);
  kv.emplace_back("t.bool", GGUFValue::boolean(true));
  kv.emplace_back("t.str", GGUFValue::str("héllo\nworld"));
  kv.emplace_back("t.strs", GGUFValue::str_array({"a", "", "▁the", "<0x0A>"}));
  kv.emplace_back("t.f32s", GGUFValue::f32_array({-1000.0, 0.25, 1e30}));
  kv.emplace_back("t.i32s", GGUFValue::i32_array({1, -2, 3}));
  kv.emplace_back("t.bools", GGUFValue::bool_array({1, 0, 1}));
  GGUFValue nested;
  nested.type = GGUFType::ARRAY;
  nested.elem = GGUFType::ARRAY;
  nested.arrs = {GGUFValue::i32_array({1, 2}), GGUFValue::i32_array({}), GGUFValue::i32_array({3})};
  kv.emplace_back("t.nested", nested);

  std::mt19937 rng(42);
  std::uniform_int_distribution<int> byte(0, 255);
  struct T {
    std::string name;
    DType t;
    std::vector<int64_t> ne;
    std::vector<uint8_t> data;
  };
  std::vector<T> ts = {{"a.f32", DType::F32, {3, 5}, {}},
                       {"b.f16", DType::F16, {7}, {}},
                       {"c.q8_0", DType::Q8_0, {64, 3}, {}},
                       {"d.q4_k", DType::Q4_K, {256, 2, 2}, {}},
                       {"e.q6_k", DType::Q6_K, {256}, {}}};
  std::vector<eg::GGUFTensorSpec> specs;
  for (T& t : ts) {
    specs.push_back({t.name, t.t, t.ne});
    t.data.resize(specs.back().nbytes());
    for (auto& b : t.data) b = static_cast<uint8_t>(byte(rng));
  }
  {
    eg::GGUFWriter w(path, kv, specs);
    for (const T& t : ts) {  // in uneven pieces
      size_t done = 0;
      while (done < t.data.size()) {
        const size_t k = std::min<size_t>(t.data.size() - done, 1 + done % 37);
        w.append(t.data.data() + done, k);
        done += k;
      }
    }
    w.finish();
  }
  auto g = GGUFFile::open(path);
  EXPECT_EQ(g->version(), 3u);
  EXPECT_EQ(g->alignment(), 64u);
  EXPECT_EQ(g->data_offset() % 64, 0u);
  ASSERT_EQ(g->metadata().size(), kv.size());
  for (size_t i = 0; i < kv.size(); ++i) {
    const auto& [k, v] = g->metadata()[i];
    EXPECT_EQ(k, kv[i].first);
    EXPECT_EQ(v.type, kv[i].second.type) << k;
  }
  EXPECT_EQ(g->get_int("t.u8"), 200);
  EXPECT_EQ(g->get_int("t.i8"), -7);
  EXPECT_EQ(g->get_int("t.u16"), 65000);
  EXPECT_EQ(g->get_int("t.i16"), -30000);
  EXPECT_EQ(g->get_int("t.u32"), 4000000000ll);
  EXPECT_EQ(g->get_int("t.i32"), -2000000000);
  EXPECT_EQ(static_cast<uint64_t>(g->get_int("t.u64")), 0xFFFFFFFFFFFFFFF0ull);
  EXPECT_EQ(g->get_int("t.i64"), -(int64_t{1} << 60));
  EXPECT_EQ(g->get_float("t.f32", 0), 1.5);
  EXPECT_EQ(g->get_float("t.f64", 0), 3.141592653589793);
  EXPECT_TRUE(g->get_bool("t.bool", false));
  EXPECT_EQ(g->get_string("t.str"), "héllo\nworld");
  EXPECT_EQ(g->find("t.strs")->strs, (std::vector<std::string>{"a", "", "▁the", "<0x0A>"}));
  EXPECT_EQ(g->find("t.f32s")->floats, (std::vector<double>{-1000.0, 0.25, static_cast<double>(1e30f)}));
  EXPECT_EQ(g->find("t.i32s")->ints, (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(g->find("t.bools")->elem, GGUFType::BOOL);
  EXPECT_EQ(g->find("t.bools")->ints, (std::vector<int64_t>{1, 0, 1}));
  const GGUFValue* n = g->find("t.nested");
  ASSERT_EQ(n->arrs.size(), 3u);
  EXPECT_EQ(n->arrs[0].ints, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(n->arrs[1].array_size(), 0u);
  EXPECT_EQ(n->arrs[2].ints, (std::vector<int64_t>{3}));
  EXPECT_THROW(g->get_int("t.str"), eg::Error);
  EXPECT_THROW(g->get_string("missing.key"), eg::Error);

  ASSERT_EQ(g->tensors().size(), ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    const eg::GGUFTensor& t = g->tensors()[i];
    EXPECT_EQ(t.name, ts[i].name);
    EXPECT_EQ(t.dtype, ts[i].t);
    EXPECT_EQ(t.ne, ts[i].ne);
    EXPECT_EQ(t.offset % 64, 0u);
    ASSERT_EQ(t.nbytes, ts[i].data.size());
    EXPECT_EQ(std::memcmp(t.data, ts[i].data.data(), t.nbytes), 0) << t.name;
  }
  EXPECT_EQ(g->find_tensor("d.q4_k")->shape(), (std::vector<int64_t>{2, 2, 256}));
}

TEST(GgufFormat, WriterRejectsBadInputAndLeavesNoFile) {
  const std::string dir = egtest::make_temp_dir();
  const std::string path = dir + "/w.gguf";
  EXPECT_THROW(eg::GGUFWriter(path, {}, {{"x", DType::Q8_0, {33}}}), eg::Error);  // not a block multiple
  EXPECT_THROW(eg::GGUFWriter(path, {}, {{"x", DType::F32, {2}}, {"x", DType::F32, {2}}}), eg::Error);
  EXPECT_THROW(eg::GGUFWriter(path, {}, {{"x", DType::F32, {0}}}), eg::Error);
  {
    eg::GGUFWriter w(path, {}, {{"x", DType::F32, {4}}});
    float v[4] = {1, 2, 3, 4};
    EXPECT_THROW(w.append(v, 20), eg::Error);  // more than announced
    w.append(v, 8);
    EXPECT_THROW(w.finish(), eg::Error);       // incomplete
  }
  EXPECT_FALSE(std::ifstream(path).good());
}

TEST(GgufFormat, ReadsLlamaCppFileLayout) {
  auto g = GGUFFile::open(egtest::shared_dir() + "/models/gguf/tiny-gemma3/tiny-gemma3-q4_k_m.gguf");
  EXPECT_EQ(g->version(), 3u);
  EXPECT_EQ(g->alignment(), 32u);
  EXPECT_EQ(g->get_string("general.architecture"), "gemma3");
  EXPECT_EQ(g->get_int("general.file_type"), 15);
  EXPECT_EQ(g->find("tokenizer.ggml.tokens")->strs.size(), 8192u);
  const eg::GGUFTensor* e = g->find_tensor("token_embd.weight");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->dtype, DType::Q6_K);
  EXPECT_EQ(e->ne, (std::vector<int64_t>{256, 8192}));
  EXPECT_EQ(e->nbytes, 8192u * 210);
}

// ---- corrupt files, built byte by byte ----

struct Bytes {
  std::vector<uint8_t> b;
  template <class T>
  Bytes& put(T v) {
    const uint8_t* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof v);
    return *this;
  }
  Bytes& str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& pad(size_t a) {
    while (b.size() % a) b.push_back(0);
    return *this;
  }
};

/// Header with n_kv metadata entries / n_t tensors (caller appends them).
Bytes header(uint64_t n_t, uint64_t n_kv, uint32_t version = 3) {
  Bytes x;
  x.b = {'G', 'G', 'U', 'F'};
  x.put<uint32_t>(version).put<uint64_t>(n_t).put<uint64_t>(n_kv);
  return x;
}

/// A valid file: one u32 key, one F32 tensor [4] and one Q8_0 tensor [32].
Bytes valid_file() {
  Bytes x = header(2, 1);
  x.str("general.name").put<uint32_t>(8).str("tiny");
  x.str("a").put<uint32_t>(1).put<int64_t>(4).put<uint32_t>(0).put<uint64_t>(0);
  x.str("b").put<uint32_t>(1).put<int64_t>(32).put<uint32_t>(8).put<uint64_t>(32);
  x.pad(32);
  for (int i = 0; i < 32 + 34; ++i) x.b.push_back(static_cast<uint8_t>(i));
  return x;
}

std::string parse_error(const std::vector<uint8_t>& b) {
  try {
    GGUFFile::parse(b.data(), b.size(), "corrupt.gguf");
  } catch (const eg::Error& e) {
    return e.what();
  }
  return "";
}

TEST(GgufCorrupt, ValidBaseParses) {
  const Bytes x = valid_file();
  auto g = GGUFFile::parse(x.b.data(), x.b.size(), "ok.gguf");
  EXPECT_EQ(g->tensors().size(), 2u);
  EXPECT_EQ(g->get_string("general.name"), "tiny");
  EXPECT_EQ(g->find_tensor("b")->nbytes, 34u);
}

TEST(GgufCorrupt, TruncatedAtEveryByte) {
  const Bytes x = valid_file();
  for (size_t n = 0; n < x.b.size(); ++n) {
    std::vector<uint8_t> t(x.b.begin(), x.b.begin() + n);
    const std::string e = parse_error(t);
    EXPECT_NE(e, "") << "truncated to " << n << " bytes was accepted";
    EXPECT_EQ(e.rfind("corrupt.gguf: ", 0), 0u) << e;
  }
}

struct CorruptCase {
  const char* what;
  Bytes bytes;
  const char* expect;  // substring of the message
};

std::vector<CorruptCase> corrupt_cases() {
  std::vector<CorruptCase> c;
  {
    Bytes x = valid_file();
    x.b[0] = 'X';
    c.push_back({"bad magic", x, "bad magic"});
  }
  c.push_back({"version 1", header(0, 0, 1), "version 1"});
  c.push_back({"version 4", header(0, 0, 4), "unsupported GGUF version 4"});
  c.push_back({"huge kv count", header(0, uint64_t{1} << 62), "metadata count"});
  c.push_back({"huge tensor count", header(uint64_t{1} << 62, 0), "tensor count"});
  {
    Bytes x = header(0, 1);
    x.put<uint64_t>(~uint64_t{0}).put<uint64_t>(0).put<uint64_t>(0);
    c.push_back({"key length overflow", x, "string length"});
  }
  {
    Bytes x = header(0, 1);
    x.put<uint64_t>(1000).str("k");
    c.push_back({"key length past end", x, "truncated"});
  }
  {
    Bytes x = header(0, 1);
    x.str("k").put<uint32_t>(13).put<uint32_t>(0);
    c.push_back({"unknown value type", x, "unknown value type 13"});
  }
  {
    Bytes x = header(0, 1);
    x.str("k").put<uint32_t>(9).put<uint32_t>(4).put<uint64_t>(uint64_t{1} << 61);
    c.push_back({"array count overflow", x, "array count"});
  }
  {
    Bytes x = header(0, 1);
    x.str("k").put<uint32_t>(9).put<uint32_t>(8).put<uint64_t>(2).str("a").put<uint64_t>(uint64_t{1} << 40);
    c.push_back({"string in array too long", x, "string length"});
  }
  {
    Bytes x = header(0, 1);
    x.str("k").put<uint32_t>(9).put<uint32_t>(77).put<uint64_t>(1);
    c.push_back({"unknown array element type", x, "unknown array element type"});
  }
  {
    Bytes x = header(0, 1);
    x.str("k").put<uint32_t>(9);  // value type array; each level: element type array, count 1
    for (int d = 0; d < 10; ++d) x.put<uint32_t>(9).put<uint64_t>(1);
    x.put<uint32_t>(4).put<uint64_t>(0);
    c.push_back({"arrays nested too deeply", x, "nested"});
  }
  {
    Bytes x = header(0, 1);
    x.str("k").put<uint32_t>(7).put<uint8_t>(2);
    c.push_back({"bool value 2", x, "bool value"});
  }
  {
    Bytes x = header(0, 2);
    x.str("k").put<uint32_t>(4).put<uint32_t>(1).str("k").put<uint32_t>(4).put<uint32_t>(1);
    c.push_back({"duplicate key", x, "duplicate metadata key"});
  }
  {
    Bytes x = header(0, 1);
    x.str("general.alignment").put<uint32_t>(4).put<uint32_t>(48);
    c.push_back({"alignment not a power of two", x, "general.alignment"});
  }
  auto one_tensor = [](uint32_t nd, std::vector<int64_t> ne, uint32_t type, uint64_t off) {
    Bytes x = header(1, 0);
    x.str("t").put<uint32_t>(nd);
    for (int64_t d : ne) x.put<int64_t>(d);
    x.put<uint32_t>(type).put<uint64_t>(off);
    x.pad(32);
    for (int i = 0; i < 64; ++i) x.b.push_back(0);
    return x;
  };
  c.push_back({"n_dims 0", one_tensor(0, {}, 0, 0), "n_dims 0"});
  c.push_back({"n_dims 5", one_tensor(5, {1, 1, 1, 1, 1}, 0, 0), "n_dims 5"});
  c.push_back({"zero dim", one_tensor(2, {4, 0}, 0, 0), "must be > 0"});
  c.push_back({"negative dim", one_tensor(1, {-4}, 0, 0), "must be > 0"});
  c.push_back({"element count overflow", one_tensor(3, {int64_t{1} << 32, int64_t{1} << 32, int64_t{1} << 32}, 0, 0),
               "element count overflows"});
  c.push_back({"byte size overflow", one_tensor(2, {int64_t{1} << 31, int64_t{1} << 31}, 0, 0), "overflows"});
  c.push_back({"unknown tensor type", one_tensor(1, {4}, 99, 0), "unknown or unsupported ggml type 99"});
  c.push_back({"unsupported tensor type IQ2_XXS", one_tensor(1, {256}, 16, 0), "ggml type 16"});
  c.push_back({"row not a block multiple", one_tensor(1, {33}, 8, 0), "not a multiple of the Q8_0 block size"});
  c.push_back({"misaligned offset", one_tensor(1, {4}, 0, 4), "not a multiple of the alignment"});
  c.push_back({"offset past end", one_tensor(1, {4}, 0, 1024), "passes the end"});
  c.push_back({"offset overflow", one_tensor(1, {4}, 0, ~uint64_t{0} - 31), "passes the end"});
  {
    Bytes x = header(2, 0);
    x.str("t").put<uint32_t>(1).put<int64_t>(4).put<uint32_t>(0).put<uint64_t>(0);
    x.str("t").put<uint32_t>(1).put<int64_t>(4).put<uint32_t>(0).put<uint64_t>(32);
    x.pad(32);
    for (int i = 0; i < 64; ++i) x.b.push_back(0);
    c.push_back({"duplicate tensor", x, "duplicate tensor 't'"});
  }
  {
    Bytes x = header(2, 0);
    x.str("t").put<uint32_t>(1).put<int64_t>(16).put<uint32_t>(0).put<uint64_t>(0);
    x.str("u").put<uint32_t>(1).put<int64_t>(4).put<uint32_t>(0).put<uint64_t>(32);
    x.pad(32);
    for (int i = 0; i < 96; ++i) x.b.push_back(0);
    c.push_back({"overlapping tensors", x, "overlaps"});
  }
  return c;
}

TEST(GgufCorrupt, TableOfBadFiles) {
  for (const CorruptCase& c : corrupt_cases()) {
    const std::string e = parse_error(c.bytes.b);
    EXPECT_NE(e, "") << c.what << ": accepted";
    EXPECT_NE(e.find(c.expect), std::string::npos) << c.what << ": message '" << e << "' lacks '" << c.expect << "'";
    EXPECT_EQ(e.rfind("corrupt.gguf: ", 0), 0u) << c.what << ": " << e;
  }
}

TEST(GgufCorrupt, MissingFileAndEmptyFile) {
  EXPECT_THROW(GGUFFile::open("/nonexistent/x.gguf"), eg::Error);
  const std::string p = egtest::make_temp_dir() + "/empty.gguf";
  egtest::write_file(p, "");
  EXPECT_THROW(GGUFFile::open(p), eg::Error);
}

}  // namespace
