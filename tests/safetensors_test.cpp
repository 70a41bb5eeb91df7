// Tests of the safetensors format layer: MappedFile, TensorStore (single file and sharded) and
// the writer. Corrupt-input tests are in safetensors_corrupt_test.cpp.
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
// MappedFile

TEST(MappedFile, MapsWholeFile) {
  const std::string dir = egtest::make_temp_dir();
  egtest::write_file(dir + "/a.bin", "hello world");
  auto mf = eg::MappedFile::open(dir + "/a.bin");
  ASSERT_EQ(mf->size(), 11u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(mf->data()), mf->size()), "hello world");
  EXPECT_EQ(mf->path(), dir + "/a.bin");
}

TEST(MappedFile, EmptyFile) {
  const std::string dir = egtest::make_temp_dir();
  egtest::write_file(dir + "/empty", "");
  auto mf = eg::MappedFile::open(dir + "/empty");
  EXPECT_EQ(mf->data(), nullptr);
  EXPECT_EQ(mf->size(), 0u);
}

TEST(MappedFile, Errors) {
  const std::string dir = egtest::make_temp_dir();
  std::string msg = error_of([&] { eg::MappedFile::open(dir + "/missing"); });
  EXPECT_NE(msg.find("cannot open " + dir + "/missing"), std::string::npos) << msg;
  EXPECT_NE(msg.find("No such file"), std::string::npos) << msg;

  msg = error_of([&] { eg::MappedFile::open(dir); });
  EXPECT_NE(msg.find("cannot open " + dir), std::string::npos) << msg;
  EXPECT_NE(msg.find("directory"), std::string::npos) << msg;

  // A FIFO must be refused without blocking.
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  msg = error_of([&] { eg::MappedFile::open(fifo); });
  EXPECT_NE(msg.find("not a regular file"), std::string::npos) << msg;

  if (geteuid() != 0) {  // root ignores permissions
    egtest::write_file(dir + "/noperm", "x");
    chmod((dir + "/noperm").c_str(), 0);
    msg = error_of([&] { eg::MappedFile::open(dir + "/noperm"); });
    EXPECT_NE(msg.find("Permission denied"), std::string::npos) << msg;
  }
}

// ---------------------------------------------------------------------------------------------
// Reading the real tiny model

TEST(SafetensorsRead, TinyGemma3) {
  const eg::TensorStore st = eg::TensorStore::open_file(tiny_model_file());
  // 1 embedding + 6 layers x 13 + final norm.
  EXPECT_EQ(st.names().size(), 1u + 6u * 13u + 1u);
  EXPECT_TRUE(std::is_sorted(st.names().begin(), st.names().end()));

  const eg::TensorInfo* emb = st.find("model.embed_tokens.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->name, "model.embed_tokens.weight");
  EXPECT_EQ(emb->dtype, eg::DType::BF16);
  EXPECT_EQ(emb->shape, (std::vector<int64_t>{8192, 256}));
  EXPECT_EQ(emb->shape_str(), "[8192, 256]");
  EXPECT_EQ(emb->numel(), 8192 * 256);
  EXPECT_EQ(emb->nbytes, 8192u * 256u * 2u);

  for (int l = 0; l < 6; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    struct Want {
      const char* suffix;
      std::vector<int64_t> shape;
    };
    const Want wants[] = {
        {"self_attn.q_proj.weight", {256, 256}},
        {"self_attn.k_proj.weight", {64, 256}},
        {"self_attn.v_proj.weight", {64, 256}},
        {"self_attn.o_proj.weight", {256, 256}},
        {"self_attn.q_norm.weight", {64}},
        {"self_attn.k_norm.weight", {64}},
        {"mlp.gate_proj.weight", {1024, 256}},
        {"mlp.up_proj.weight", {1024, 256}},
        {"mlp.down_proj.weight", {256, 1024}},
        {"input_layernorm.weight", {256}},
        {"post_attention_layernorm.weight", {256}},
        {"pre_feedforward_layernorm.weight", {256}},
        {"post_feedforward_layernorm.weight", {256}},
    };
    for (const Want& w : wants) {
      const eg::TensorInfo* t = st.find(p + w.suffix);
      ASSERT_NE(t, nullptr) << p + w.suffix;
      EXPECT_EQ(t->dtype, eg::DType::BF16);
      EXPECT_EQ(t->shape, w.shape) << t->name;
      EXPECT_EQ(t->nbytes, static_cast<size_t>(t->numel()) * 2);
    }
  }
  const eg::TensorInfo* norm = st.find("model.norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->shape_str(), "[256]");
  EXPECT_EQ(st.find("lm_head.weight"), nullptr);  // tied embeddings
  EXPECT_EQ(st.find("__metadata__"), nullptr);
  EXPECT_EQ(st.find(""), nullptr);

  // Sum of all tensor bytes = the whole data buffer (the file has no padding after the data).
  const size_t file_size = fs::file_size(tiny_model_file());
  uint64_t n = 0;
  const std::string bytes = egtest::read_file(tiny_model_file());
  header_of(bytes, &n);
  EXPECT_EQ(st.total_bytes(), file_size - 8 - n);

  // Data pointers address the mapping (no copy): contents equal the file bytes at the header's
  // offsets, and the distance between two tensors equals the distance of their offsets.
  const json h = header_of(bytes);
  const uint8_t* base =
      emb->data - h["model.embed_tokens.weight"]["data_offsets"][0].get<uint64_t>();
  for (const std::string& name : st.names()) {
    const eg::TensorInfo* t = st.find(name);
    const uint64_t begin = h[name]["data_offsets"][0].get<uint64_t>();
    EXPECT_EQ(t->data, base + begin) << name;
    ASSERT_EQ(std::memcmp(t->data, bytes.data() + 8 + n + begin, t->nbytes), 0) << name;
  }
  // And the mapping is the file's: /proc/self/maps lists the model file around that address.
  std::ifstream maps("/proc/self/maps");
  if (maps) {
    bool found = false;
    std::string line;
    const auto addr = reinterpret_cast<uintptr_t>(emb->data);
    while (std::getline(maps, line)) {
      uintptr_t lo = 0, hi = 0;
      if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) != 2) continue;
      if (addr >= lo && addr < hi) {
        found = line.find("model.safetensors") != std::string::npos;
        break;
      }
    }
    EXPECT_TRUE(found) << "embedding data is not inside the file mapping";
  }
}

TEST(SafetensorsRead, OpenDirSingleFile) {
  const eg::TensorStore st = eg::TensorStore::open_dir(tiny_model_dir());
  EXPECT_EQ(st.names().size(), 80u);
  ASSERT_NE(st.find("model.layers.5.self_attn.q_proj.weight"), nullptr);
}

TEST(SafetensorsRead, StoreOutlivesMoves) {
  eg::TensorStore a = eg::TensorStore::open_file(tiny_model_file());
  const uint8_t* p = a.find("model.norm.weight")->data;
  const uint16_t first = static_cast<uint16_t>(p[0] | (p[1] << 8));
  eg::TensorStore b = std::move(a);
  const eg::TensorInfo* t = b.find("model.norm.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->data, p);
  EXPECT_EQ(static_cast<uint16_t>(t->data[0] | (t->data[1] << 8)), first);
}

// ---------------------------------------------------------------------------------------------
// Writer round trips

TEST(SafetensorsWrite, RoundTripAllDtypes) {
  const std::string dir = egtest::make_temp_dir();
  std::mt19937 rng(1234);
  std::normal_distribution<float> nd(0.0f, 3.0f);

  std::vector<float> f32(3 * 5 * 7);
  for (float& v : f32) v = nd(rng);
  f32[0] = 0.0f;
  f32[1] = -0.0f;
  f32[2] = std::numeric_limits<float>::infinity();
  f32[3] = std::numeric_limits<float>::denorm_min();
  std::vector<uint16_t> f16(11 * 13), bf16(17);
  for (uint16_t& v : f16) v = eg::f32_to_f16(nd(rng));
  for (uint16_t& v : bf16) v = eg::f32_to_bf16(nd(rng));
  const float scalar = 42.5f;

  std::vector<eg::TensorToWrite> ts = {
      {"w.f16", eg::DType::F16, {11, 13}, f16.data()},
      {"a.f32", eg::DType::F32, {3, 5, 7}, f32.data()},
      {"z.bf16", eg::DType::BF16, {17}, bf16.data()},
      {"scalar", eg::DType::F32, {}, &scalar},
      {"empty", eg::DType::BF16, {4, 0}, nullptr},
  };
  const std::string path = dir + "/rt.safetensors";
  eg::write_safetensors(path, ts, {{"format", "pt"}, {"note", "hé \"quoted\"\n"}});

  // File layout: header padded with spaces to 8 bytes, tensors contiguous in the given order.
  const std::string bytes = egtest::read_file(path);
  uint64_t n = 0;
  const json h = header_of(bytes, &n);
  EXPECT_EQ(n % 8, 0u);
  const std::string hdr = bytes.substr(8, n);
  EXPECT_EQ(hdr.back() == ' ' || hdr.back() == '}', true);
  EXPECT_EQ(hdr.find_last_not_of(' '), hdr.rfind('}'));
  EXPECT_EQ(h["__metadata__"]["format"], "pt");
  EXPECT_EQ(h["__metadata__"]["note"], "hé \"quoted\"\n");
  uint64_t off = 0;
  for (const auto& t : ts) {
    const uint64_t nb = (t.name == "w.f16")    ? f16.size() * 2
                        : (t.name == "a.f32")  ? f32.size() * 4
                        : (t.name == "z.bf16") ? bf16.size() * 2
                        : (t.name == "scalar") ? 4
                                               : 0;
    EXPECT_EQ(h[t.name]["data_offsets"][0].get<uint64_t>(), off) << t.name;
    EXPECT_EQ(h[t.name]["data_offsets"][1].get<uint64_t>(), off + nb) << t.name;
    EXPECT_EQ(h[t.name]["dtype"], eg::dtype_name(t.dtype));
    off += nb;
  }
  EXPECT_EQ(bytes.size(), 8 + n + off);

  const eg::TensorStore st = eg::TensorStore::open_file(path);
  EXPECT_EQ(st.names(), (std::vector<std::string>{"a.f32", "empty", "scalar", "w.f16", "z.bf16"}));
  EXPECT_EQ(st.total_bytes(), off);

  const eg::TensorInfo* a = st.find("a.f32");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, eg::DType::F32);
  EXPECT_EQ(a->shape_str(), "[3, 5, 7]");
  ASSERT_EQ(a->nbytes, f32.size() * 4);
  for (size_t i = 0; i < f32.size(); ++i) {
    float v;
    std::memcpy(&v, a->data + 4 * i, 4);
    ASSERT_EQ(f32_bits(v), f32_bits(f32[i])) << i;
  }
  const eg::TensorInfo* w = st.find("w.f16");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, eg::DType::F16);
  ASSERT_EQ(w->nbytes, f16.size() * 2);
  EXPECT_EQ(std::memcmp(w->data, f16.data(), w->nbytes), 0);
  const eg::TensorInfo* z = st.find("z.bf16");
  ASSERT_NE(z, nullptr);
  EXPECT_EQ(z->dtype, eg::DType::BF16);
  EXPECT_EQ(std::memcmp(z->data, bf16.data(), z->nbytes), 0);
  const eg::TensorInfo* s = st.find("scalar");
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->shape.empty());
  EXPECT_EQ(s->numel(), 1);
  EXPECT_EQ(s->shape_str(), "[]");
  float sv;
  std::memcpy(&sv, s->data, 4);
  EXPECT_EQ(sv, 42.5f);
  const eg::TensorInfo* e = st.find("empty");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->numel(), 0);
  EXPECT_EQ(e->nbytes, 0u);
}

TEST(SafetensorsWrite, RewriteTinyModelIdentically) {
  // Re-writing every tensor of the real model (in offset order) reproduces the same data.
  const eg::TensorStore src = eg::TensorStore::open_file(tiny_model_file());
  std::vector<const eg::TensorInfo*> by_addr;
  for (const auto& n : src.names()) by_addr.push_back(src.find(n));
  std::sort(by_addr.begin(), by_addr.end(),
            [](const eg::TensorInfo* a, const eg::TensorInfo* b) { return a->data < b->data; });
  std::vector<eg::TensorToWrite> ts;
  for (const auto* t : by_addr) ts.push_back({t->name, t->dtype, t->shape, t->data});
  const std::string path = egtest::make_temp_dir() + "/copy.safetensors";
  eg::write_safetensors(path, ts, {{"format", "pt"}});
  const eg::TensorStore dst = eg::TensorStore::open_file(path);
  ASSERT_EQ(dst.names(), src.names());
  EXPECT_EQ(dst.total_bytes(), src.total_bytes());
  for (const auto& n : src.names()) {
    const eg::TensorInfo* a = src.find(n);
    const eg::TensorInfo* b = dst.find(n);
    EXPECT_EQ(a->shape, b->shape);
    EXPECT_EQ(a->dtype, b->dtype);
    ASSERT_EQ(a->nbytes, b->nbytes);
    ASSERT_EQ(std::memcmp(a->data, b->data, a->nbytes), 0) << n;
  }
  // Same data bytes as the original file (both are contiguous in offset order).
  const std::string orig = egtest::read_file(tiny_model_file());
  const std::string copy = egtest::read_file(path);
  uint64_t n1 = 0, n2 = 0;
  header_of(orig, &n1);
  header_of(copy, &n2);
  EXPECT_TRUE(orig.compare(8 + n1, std::string::npos, copy, 8 + n2, std::string::npos) == 0);
}

TEST(SafetensorsWrite, AtomicReplaceAndNoTempLeft) {
  const std::string dir = egtest::make_temp_dir();
  const std::string path = dir + "/m.safetensors";
  const float one = 1.0f, two[2] = {2.0f, 3.0f};
  eg::write_safetensors(path, {{"x", eg::DType::F32, {1}, &one}});
  eg::write_safetensors(path, {{"y", eg::DType::F32, {2}, two}});
  const eg::TensorStore st = eg::TensorStore::open_file(path);
  EXPECT_EQ(st.names(), std::vector<std::string>{"y"});
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 1);  // no temporary file left behind
  struct stat sb;
  ASSERT_EQ(stat(path.c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0644u);

  // Invalid input fails before touching the existing file.
  const std::string before = egtest::read_file(path);
  std::string msg = error_of([&] {
    eg::write_safetensors(path,
                          {{"a", eg::DType::F32, {1}, &one}, {"a", eg::DType::F32, {1}, &one}});
  });
  EXPECT_NE(msg.find("duplicate"), std::string::npos) << msg;
  EXPECT_EQ(egtest::read_file(path), before);
}

TEST(SafetensorsWrite, Errors) {
  const std::string dir = egtest::make_temp_dir();
  const float v = 1.0f;
  std::string msg = error_of([&] {
    eg::write_safetensors(dir + "/nodir/x.safetensors", {{"a", eg::DType::F32, {1}, &v}});
  });
  EXPECT_NE(msg.find("cannot write " + dir + "/nodir/x.safetensors"), std::string::npos) << msg;
  msg = error_of([&] { eg::write_safetensors(dir + "/x", {{"a", eg::DType::F32, {-1}, &v}}); });
  EXPECT_NE(msg.find("negative"), std::string::npos) << msg;
  msg = error_of([&] { eg::write_safetensors(dir + "/x", {{"a", eg::DType::F32, {2}, nullptr}}); });
  EXPECT_NE(msg.find("null"), std::string::npos) << msg;
  msg = error_of([&] {
    eg::write_safetensors(dir + "/x", {{"__metadata__", eg::DType::F32, {1}, &v}});
  });
  EXPECT_NE(msg.find("__metadata__"), std::string::npos) << msg;
  msg = error_of([&] {
    eg::write_safetensors(dir + "/x", {{"a", eg::DType::F32, {INT64_MAX, INT64_MAX}, &v}});
  });
  EXPECT_NE(msg.find("overflow"), std::string::npos) << msg;
  msg = error_of([&] {
    eg::write_safetensors(dir + "/x", {{"bad\xff", eg::DType::F32, {1}, &v}});
  });
  EXPECT_NE(msg.find("UTF-8"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(dir + "/x"));
  // The empty tensor list is valid and readable.
  eg::write_safetensors(dir + "/empty.safetensors", {});
  EXPECT_TRUE(eg::TensorStore::open_file(dir + "/empty.safetensors").names().empty());
}

// ---------------------------------------------------------------------------------------------
// Sharded checkpoints

struct ShardedFixture {
  std::string dir;
  std::vector<float> a{1, 2, 3, 4}, b{5, 6}, c{7};
  ShardedFixture() : dir(egtest::make_temp_dir()) {
    eg::write_safetensors(
        dir + "/model-00001-of-00002.safetensors",
        {{"a", eg::DType::F32, {2, 2}, a.data()}, {"b", eg::DType::F32, {2}, b.data()}});
    eg::write_safetensors(dir + "/model-00002-of-00002.safetensors",
                          {{"c", eg::DType::F32, {1}, c.data()}});
  }
  void write_index(const json& j) {
    egtest::write_file(dir + "/model.safetensors.index.json", j.dump());
  }
  json good_index() const {
    return {{"metadata", {{"total_size", 28}}},
            {"weight_map",
             {{"a", "model-00001-of-00002.safetensors"},
              {"b", "model-00001-of-00002.safetensors"},
              {"c", "model-00002-of-00002.safetensors"}}}};
  }
  std::string error() {
    return error_of([&] { eg::TensorStore::open_dir(dir); });
  }
};

TEST(SafetensorsSharded, OpensAllShards) {
  ShardedFixture f;
  f.write_index(f.good_index());
  // A stray single file next to the index is ignored: the index wins.
  egtest::write_file(f.dir + "/model.safetensors", "garbage");
  const eg::TensorStore st = eg::TensorStore::open_dir(f.dir);
  EXPECT_EQ(st.names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(st.total_bytes(), 28u);
  const eg::TensorInfo* a = st.find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->shape_str(), "[2, 2]");
  EXPECT_EQ(std::memcmp(a->data, f.a.data(), 16), 0);
  const eg::TensorInfo* c = st.find("c");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(std::memcmp(c->data, f.c.data(), 4), 0);
}

TEST(SafetensorsSharded, Errors) {
  {
    ShardedFixture f;
    egtest::write_file(f.dir + "/model.safetensors.index.json", "{\"weight_map\": {");
    const std::string m = f.error();
    EXPECT_NE(m.find("model.safetensors.index.json: not valid JSON"), std::string::npos) << m;
    EXPECT_TRUE(one_line(m));
  }
  {
    ShardedFixture f;
    egtest::write_file(f.dir + "/model.safetensors.index.json", "");
    EXPECT_NE(f.error().find("empty"), std::string::npos);
  }
  {
    ShardedFixture f;
    f.write_index(json::array());
    EXPECT_NE(f.error().find("not a JSON object"), std::string::npos);
  }
  {
    ShardedFixture f;
    f.write_index({{"metadata", json::object()}});
    EXPECT_NE(f.error().find("missing \"weight_map\""), std::string::npos);
  }
  {
    ShardedFixture f;
    f.write_index({{"weight_map", json::array()}});
    EXPECT_NE(f.error().find("\"weight_map\" is not an object"), std::string::npos);
  }
  {
    ShardedFixture f;
    f.write_index({{"weight_map", json::object()}});
    EXPECT_NE(f.error().find("no tensors"), std::string::npos);
  }
  {
    ShardedFixture f;
    json j = f.good_index();
    j["weight_map"]["a"] = 3;
    f.write_index(j);
    EXPECT_NE(f.error().find("tensor 'a' is not a string"), std::string::npos);
  }
  {  // a shard is missing
    ShardedFixture f;
    json j = f.good_index();
    j["weight_map"]["c"] = "model-00003-of-00003.safetensors";
    f.write_index(j);
    const std::string m = f.error();
    EXPECT_NE(m.find("shard 'model-00003-of-00003.safetensors'"), std::string::npos) << m;
    EXPECT_NE(m.find("missing"), std::string::npos) << m;
  }
  {  // shard names may not escape the directory
    ShardedFixture f;
    json j = f.good_index();
    j["weight_map"]["c"] = "../model-00002-of-00002.safetensors";
    f.write_index(j);
    EXPECT_NE(f.error().find("not a file name inside the model directory"), std::string::npos);
    j["weight_map"]["c"] = "/etc/passwd";
    f.write_index(j);
    EXPECT_NE(f.error().find("not a file name inside the model directory"), std::string::npos);
  }
  {  // a tensor listed in the weight map is not in its shard
    ShardedFixture f;
    json j = f.good_index();
    j["weight_map"]["d"] = "model-00002-of-00002.safetensors";
    f.write_index(j);
    const std::string m = f.error();
    EXPECT_NE(m.find("model-00002-of-00002.safetensors: tensor 'd'"), std::string::npos) << m;
    EXPECT_NE(m.find("not found"), std::string::npos) << m;
  }
  {  // listed in the wrong shard
    ShardedFixture f;
    json j = f.good_index();
    j["weight_map"]["c"] = "model-00001-of-00002.safetensors";
    f.write_index(j);
    EXPECT_NE(f.error().find("tensor 'c': listed in the index"), std::string::npos);
  }
  {  // the same tensor in two shards
    ShardedFixture f;
    eg::write_safetensors(
        f.dir + "/model-00002-of-00002.safetensors",
        {{"c", eg::DType::F32, {1}, f.c.data()}, {"a", eg::DType::F32, {1}, f.c.data()}});
    f.write_index(f.good_index());
    const std::string m = f.error();
    EXPECT_NE(m.find("tensor 'a': also present in"), std::string::npos) << m;
    EXPECT_NE(m.find("model-00001-of-00002.safetensors"), std::string::npos) << m;
  }
  {  // a corrupt shard
    ShardedFixture f;
    egtest::write_file(f.dir + "/model-00002-of-00002.safetensors", "1234");
    f.write_index(f.good_index());
    const std::string m = f.error();
    EXPECT_NE(m.find("model-00002-of-00002.safetensors: file too short"), std::string::npos) << m;
  }
}

TEST(SafetensorsSharded, OpenDirErrors) {
  const std::string dir = egtest::make_temp_dir();
  std::string m = error_of([&] { eg::TensorStore::open_dir(dir); });
  EXPECT_NE(m.find("no model.safetensors"), std::string::npos) << m;
  m = error_of([&] { eg::TensorStore::open_dir(dir + "/nope"); });
  EXPECT_NE(m.find(dir + "/nope"), std::string::npos) << m;
  egtest::write_file(dir + "/file", "x");
  m = error_of([&] { eg::TensorStore::open_dir(dir + "/file"); });
  EXPECT_NE(m.find("not a directory"), std::string::npos) << m;
  m = error_of([&] { eg::TensorStore::open_file(dir); });
  EXPECT_NE(m.find("cannot open " + dir), std::string::npos) << m;
}

}  // namespace
