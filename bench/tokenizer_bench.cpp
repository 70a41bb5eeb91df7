// Tokenizer speed: loading the real 33 MB Gemma 3 tokenizer.json, and encoding ~500 KB of text.
// Fixtures from ../shared (override with EDGEGEMMA_SHARED_DIR).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <string>

#include "core/file_util.h"
#include "tokenizer/tokenizer.h"

namespace {

std::string shared_dir() {
  if (const char* e = std::getenv("EDGEGEMMA_SHARED_DIR")) return e;
  return EG_SHARED_DIR;
}

void BM_LoadGemma3Tokenizer(benchmark::State& st) {
  for (auto _ : st) {
    eg::Tokenizer t = eg::Tokenizer::load_dir(shared_dir() + "/tokenizers/gemma3");
    benchmark::DoNotOptimize(t.vocab_size());
  }
}
BENCHMARK(BM_LoadGemma3Tokenizer)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_EncodeCorpus(benchmark::State& st) {
  static const eg::Tokenizer t = eg::Tokenizer::load_dir(shared_dir() + "/tokenizers/gemma3");
  const std::string text = eg::read_file(shared_dir() + "/data/corpus/valid.txt");
  for (auto _ : st) benchmark::DoNotOptimize(t.encode(text, true).size());
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * text.size()));
}
BENCHMARK(BM_EncodeCorpus)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
