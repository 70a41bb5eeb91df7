// libFuzzer target: the tokenizer of a GGUF file (GGUFFile::parse, then Tokenizer::from_gguf:
// tokenizer.ggml.model / tokens / scores / token_type / merges / special ids / add_bos_token /
// chat_template), docs/reliability.md. Built by scripts/fuzz.
//
// Input: a whole GGUF file (header and metadata; tensors are irrelevant here). When the tokenizer
// loads, a few fixed strings are encoded and decoded, and every id is decoded (tokenizer_checks.h:
// ids in range, decode == streaming detokenizer, valid UTF-8 pieces).
// Seeds (EG_FUZZ_WRITE_SEEDS): the tokenizer metadata of the fixture GGUFs (Gemma 2/3
// SentencePiece "llama" vocabularies, Gemma 4 "gemma4" BPE), cut to 300 tokens with
// Tokenizer::fit_gguf_vocab, without tensors; the SentencePiece ones also without their merges
// (so that from_gguf rebuilds merges from the scores).
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "format/gguf.h"
#include "fuzz_util.h"
#include "tokenizer_checks.h"

namespace {

void write_seeds(const std::string& dir) {
  const std::string g = egfuzz::shared_dir() + "/models/gguf/";
  for (const char* f : {"tiny-gemma2/tiny-gemma2-q4_0.gguf", "tiny-gemma3/tiny-gemma3-q4_0.gguf",
                        "tiny-gemma4/tiny-gemma4-q4_0.gguf"}) {
    const auto file = eg::GGUFFile::open(g + f);
    std::vector<std::pair<std::string, eg::GGUFValue>> kv;
    for (const auto& [k, v] : file->metadata())
      if (k.rfind("tokenizer.", 0) == 0 || k == "general.architecture") kv.emplace_back(k, v);
    eg::Tokenizer::fit_gguf_vocab(kv, 300);
    const std::string base = std::filesystem::path(f).stem().string();
    eg::GGUFWriter(dir + "/" + base, kv, {}).finish();
    std::vector<std::pair<std::string, eg::GGUFValue>> no_merges;
    for (const auto& e : kv)
      if (e.first != "tokenizer.ggml.merges") no_merges.push_back(e);
    if (no_merges.size() != kv.size()) eg::GGUFWriter(dir + "/" + base + "-no-merges", no_merges, {}).finish();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  egfuzz::maybe_write_seeds(write_seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // An exactly-sized heap copy, so that ASan sees any read past the end.
  uint8_t* buf = static_cast<uint8_t*>(std::malloc(size ? size : 1));
  if (size) std::memcpy(buf, data, size);
  try {
    const auto g = eg::GGUFFile::parse(buf, size, "fuzz.gguf");
    const eg::Tokenizer tok = eg::Tokenizer::from_gguf(*g);
    for (const char* s : {"Hello world", "  two  spaces\n\n\t", "<bos><start_of_turn>user\nhi<end_of_turn>",
                          "中文 😀", "\xff\xfe bad utf8 <unused0>"}) {
      egfuzz::decode_checked(tok, egfuzz::encode_checked(tok, s, true, true));
      egfuzz::decode_checked(tok, egfuzz::encode_checked(tok, s, false, false));
    }
    std::vector<int32_t> all;
    for (int32_t id = -1; id <= tok.vocab_size() && id < 4096; ++id) all.push_back(id);
    egfuzz::decode_checked(tok, all);
    (void)tok.chat_template();
  } catch (const eg::Error&) {
  }
  std::free(buf);
  return 0;
}
