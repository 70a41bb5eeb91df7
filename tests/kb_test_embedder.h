// A deterministic test double of embed::Embedder (tests only; never in src/): a hashed bag of
// character trigrams (UTF-8 bytes, lowercased ASCII, padded with spaces), signed by a second hash
// bit, L2-normalised, dimension 64. Texts sharing words share trigrams, so cosine similarity is
// meaningful: retrieval by vector finds passages that share spelling with the query (also
// inflections: "planting" ~ "planted"), unlike BM25's exact words. `salt` changes the digest and
// the hashing, i.e. another "model".
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "embed/embedder.h"

namespace egtest {

class TrigramEmbedder : public eg::embed::Embedder {
 public:
  explicit TrigramEmbedder(uint32_t salt = 0, int dim = 64) : salt_(salt), dim_(dim) {}
  int full_dim() const override { return dim_; }
  std::vector<int> supported_dims() const override { return {}; }
  std::vector<std::string> task_names() const override { return {"query", "document"}; }
  int max_tokens() const override { return 2048; }
  std::string model_digest() const override { return "test-trigram-" + std::to_string(salt_) + "-" + std::to_string(dim_); }
  std::vector<eg::embed::Embedding> embed(const std::vector<std::string>& texts,
                                          const eg::embed::EmbedOptions& o) override {
    if (o.dim != 0) throw eg::Error("TrigramEmbedder: no truncation");
    ++calls;
    std::vector<eg::embed::Embedding> out;
    for (const auto& t : texts) {
      texts_embedded += 1;
      out.push_back(eg::embed::Embedding{vector_of(t), static_cast<int>(t.size() / 4 + 2)});
    }
    return out;
  }
  std::vector<float> vector_of(const std::string& text) const {
    std::string s = " ";
    for (char c : text) s += (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
    s += ' ';
    std::vector<double> v(static_cast<size_t>(dim_), 0.0);
    for (size_t i = 0; i + 3 <= s.size(); ++i) {
      uint32_t h = 2166136261u ^ salt_;
      for (size_t k = 0; k < 3; ++k) h = (h ^ static_cast<unsigned char>(s[i + k])) * 16777619u;
      v[h % static_cast<uint32_t>(dim_)] += (h >> 31) ? 1.0 : -1.0;
    }
    double n = 0;
    for (double x : v) n += x * x;
    n = std::sqrt(n);
    std::vector<float> f(v.size());
    for (size_t i = 0; i < v.size(); ++i) f[i] = n > 0 ? static_cast<float>(v[i] / n) : 0.0f;
    if (n == 0) f[0] = 1.0f;
    return f;
  }
  int calls = 0;
  int texts_embedded = 0;

 private:
  uint32_t salt_;
  int dim_;
};

}  // namespace egtest
