// Constrained decoding cost per generated token: Matcher::mask() in typical states, at the
// tiny-gemma3 vocabulary (8,192) and the real Gemma 3 one (262,144); allows() (the
// sample-then-verify fast path); TokenVocab::build. Numbers: docs/performance.md
// ("Constrained decoding").
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <algorithm>

#include "engine/loaded_model.h"
#include "grammar/grammar.h"
#include "grammar/grammar_impl.h"
#include "kv/kv_cache.h"
#include "tokenizer/tokenizer.h"

namespace {

using nlohmann::json;
using namespace eg::grammar;

std::string shared_dir() {
  if (const char* e = std::getenv("EDGEGEMMA_SHARED_DIR")) return e;
  return EG_SHARED_DIR;
}

struct V {
  eg::Tokenizer tok;
  std::shared_ptr<const TokenVocab> v;
};

const V& vocab(int which) {  // 0: tiny-gemma3 (8k), 1: gemma3 (262k)
  static V* vs[2] = {nullptr, nullptr};
  if (!vs[which]) {
    auto tok = eg::Tokenizer::load_dir(shared_dir() + (which ? "/tokenizers/gemma3" : "/models/tiny-gemma3"));
    std::vector<int32_t> ends = {tok.eos_id(), tok.token_id("<end_of_turn>")};
    auto v = TokenVocab::build(tok, ends);
    vs[which] = new V{std::move(tok), v};
  }
  return *vs[which];
}

const nlohmann::ordered_json& schema() {
  static const nlohmann::ordered_json s = nlohmann::ordered_json::parse(R"({"type":"object","properties":{
      "name":{"type":"string"},"age":{"type":"integer"},"score":{"type":"number"},
      "tags":{"type":"array","items":{"type":"string"}},"extra":{},
      "kind":{"enum":["person","company","other"]}},"required":["name","age"]})");
  return s;
}

// States: the text already generated.
const char* kPrefixes[] = {
    "{\"name\": \"Ada Lovelace, the first progr",  // 0: inside a string
    "{\"name\": \"Ada\", ",                          // 1: between values (expecting a key)
    "{\"name\": \"Ada\", \"age\": 3",               // 2: inside a number
    "{\"name\": \"Ada\", \"age\": 36, \"score\": 1.5, \"tags\": [\"a\"], \"extra\": ",  // 3: any value
    "",                                              // 4: start
};
const char* kStateNames[] = {"in_string", "after_comma", "in_number", "any_value", "start"};

void BM_Mask(benchmark::State& st) {
  const V& voc = vocab(static_cast<int>(st.range(0)));
  const int state = static_cast<int>(st.range(1));
  Matcher m(json_schema_grammar(schema()), voc.v);
  for (int32_t id : voc.tok.encode(kPrefixes[state], false)) m.accept(id);
  std::vector<float> logits(static_cast<size_t>(voc.v->size()), 0.0f);
  int allowed = 0;
  for (auto _ : st) {
    m.mask(logits.data(), static_cast<int>(logits.size()));
    benchmark::DoNotOptimize(logits.data());
  }
  for (float x : logits) allowed += x == 0.0f;
  st.SetLabel(std::string(kStateNames[state]) + " allowed=" + std::to_string(allowed));
}
BENCHMARK(BM_Mask)->ArgsProduct({{0, 1}, {0, 1, 2, 3, 4}})->Unit(benchmark::kMicrosecond);

void BM_MaskJsonObject(benchmark::State& st) {
  const V& voc = vocab(static_cast<int>(st.range(0)));
  Matcher m(json_object_grammar(), voc.v);
  for (int32_t id : voc.tok.encode("{\"a\": {\"b\": [1, ", false)) m.accept(id);
  std::vector<float> logits(static_cast<size_t>(voc.v->size()), 0.0f);
  for (auto _ : st) {
    m.mask(logits.data(), static_cast<int>(logits.size()));
    benchmark::DoNotOptimize(logits.data());
  }
}
BENCHMARK(BM_MaskJsonObject)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

// A 100-value string enum, before its first byte (100 live threads) and after `"` (still 100).
void BM_MaskEnum100(benchmark::State& st) {
  const V& voc = vocab(1);
  json values = json::array();
  for (int k = 0; k < 100; ++k) values.push_back("value_" + std::to_string(k * 7919 % 1000));
  Matcher m(json_schema_grammar(json{{"enum", values}}), voc.v);
  if (st.range(0)) m.accept(voc.tok.token_id("\""));
  std::vector<float> logits(static_cast<size_t>(voc.v->size()), 0.0f);
  for (auto _ : st) {
    m.mask(logits.data(), static_cast<int>(logits.size()));
    benchmark::DoNotOptimize(logits.data());
  }
}
BENCHMARK(BM_MaskEnum100)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

// Compiling a schema with a maxLength-bounded string (arg: maxLength; one counter node whatever
// the bound), and the plain-string schema for comparison (arg 0: no bound).
void BM_CompileMaxLength(benchmark::State& st) {
  json s = json::parse(R"({"type":"object","properties":{"name":{"type":"string"},"bio":{"type":"string"}},
                           "required":["name","bio"]})");
  if (st.range(0) > 0) s["properties"]["bio"]["maxLength"] = st.range(0), s["properties"]["bio"]["minLength"] = 1;
  size_t nodes = 0;
  for (auto _ : st) {
    auto g = json_schema_grammar(s);
    nodes = g->def().nodes.size();
    benchmark::DoNotOptimize(g);
  }
  st.SetLabel("nodes=" + std::to_string(nodes));
}
BENCHMARK(BM_CompileMaxLength)->Arg(0)->Arg(10000)->Arg(1000000)->Unit(benchmark::kMicrosecond);

// Inside a maxLength-bounded string at the 262k vocabulary. Arg: characters already written of a
// maxLength 10000 string (room >= the longest safe token: the plain-string path) or of a
// maxLength 40 string (arg 100000 + n: n written; room 40 - n < 31 uses the by-length bitsets).
void BM_MaskBoundedString(benchmark::State& st) {
  const V& voc = vocab(1);
  const int64_t a = st.range(0);
  const int max_len = a >= 100000 ? 40 : 10000;
  const int written = static_cast<int>(a >= 100000 ? a - 100000 : a);
  Matcher m(json_schema_grammar(json{{"type", "string"}, {"maxLength", max_len}}), voc.v);
  for (int32_t id : voc.tok.encode("\"" + std::string(static_cast<size_t>(written), 'a'), false)) m.accept(id);
  std::vector<float> logits(static_cast<size_t>(voc.v->size()), 0.0f);
  for (auto _ : st) {
    m.mask(logits.data(), static_cast<int>(logits.size()));
    benchmark::DoNotOptimize(logits.data());
  }
  int allowed = 0;
  for (float x : logits) allowed += x == 0.0f;
  st.SetLabel("maxLength=" + std::to_string(max_len) + " written=" + std::to_string(written) +
              " allowed=" + std::to_string(allowed));
}
BENCHMARK(BM_MaskBoundedString)->Arg(0)->Arg(9000)->Arg(100000)->Arg(100020)->Arg(100039)->Arg(100040)->Unit(benchmark::kMicrosecond);

// allows() + accept() of one token: the sample-then-verify path.
void BM_AllowsAccept(benchmark::State& st) {
  const V& voc = vocab(1);
  Matcher base(json_schema_grammar(schema()), voc.v);
  for (int32_t id : voc.tok.encode(kPrefixes[0], false)) base.accept(id);
  const int32_t next = voc.tok.encode("amm", false).at(0);
  for (auto _ : st) {
    Matcher m = base;
    benchmark::DoNotOptimize(m.allows(next));
    m.accept(next);
  }
}
BENCHMARK(BM_AllowsAccept)->Unit(benchmark::kMicrosecond);

void BM_BuildVocab262k(benchmark::State& st) {
  const V& voc = vocab(1);
  for (auto _ : st) benchmark::DoNotOptimize(TokenVocab::build(voc.tok, {voc.tok.eos_id()}));
  size_t safe = 0;
  for (uint64_t w : voc.v->safe_bits(false)) safe += static_cast<size_t>(__builtin_popcountll(w));
  st.SetLabel("json-safe tokens=" + std::to_string(safe) + " rest=" + std::to_string(voc.v->trie_rest(false).ids.size()) +
              " trie nodes=" + std::to_string(voc.v->trie_all().nodes.size()) +
              " longest safe json/tool (code points)=" + std::to_string(voc.v->safe_max_chars(false)) + "/" +
              std::to_string(voc.v->safe_max_chars(true)));
}
BENCHMARK(BM_BuildVocab262k)->Unit(benchmark::kMillisecond)->Iterations(3);

// End to end on tiny-gemma3: greedy decode of up to 128 tokens, arg 0 without a grammar, arg 1
// with the schema grammar (mask + argmax + accept every step). Reports seconds per generated token.
void BM_DecodeTinyGemma3(benchmark::State& st) {
  static auto lm = eg::LoadedModel::load_dir(shared_dir() + "/models/tiny-gemma3");
  const eg::Model& model = lm->model();
  const bool constrained = st.range(0) != 0;
  const auto prompt = lm->tokenizer().encode("Describe a person as JSON:", true);
  auto vocab = TokenVocab::build(lm->tokenizer(), {lm->tokenizer().eos_id()});
  auto g = json_schema_grammar(schema());
  eg::ForwardScratch s;
  std::vector<float> logits;
  int64_t tokens = 0;
  for (auto _ : st) {
    eg::KVCacheOptions o;
    o.max_tokens = 256;
    eg::KVCache kv(model.config(), o);
    Matcher m(g, vocab);
    model.forward(prompt.data(), static_cast<int>(prompt.size()), kv, s, eg::LogitsMode::Last, logits);
    for (int i = 0; i < 128; ++i) {
      const int V = static_cast<int>(logits.size());
      if (constrained) m.mask(logits.data(), V);
      const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      ++tokens;
      if (constrained) {
        m.accept(next);
        if (m.ended()) break;
      }
      model.forward(&next, 1, kv, s, eg::LogitsMode::Last, logits);
    }
  }
  // Per token: kIsRate divides by the elapsed time, kInvert turns tokens/s into s/token.
  st.counters["s_per_token"] =
      benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  st.counters["tokens"] = benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kAvgIterations);
}
BENCHMARK(BM_DecodeTinyGemma3)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(3.0);

}  // namespace
