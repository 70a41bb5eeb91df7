#include "embed/gemma_embedder.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/thread_pool.h"
#include "core/error.h"
#include "core/sha256.h"
#include "ops/ops.h"

namespace eg::embed {

std::vector<int> matryoshka_dims(int full_dim) {
  if (full_dim == 768) return {768, 512, 256, 128};
  std::vector<int> d{full_dim};
  for (int x = full_dim; x % 2 == 0 && x / 2 >= 16;) d.push_back(x /= 2);
  return d;
}

std::vector<float> truncate_normalize(const std::vector<float>& v, int d) {
  std::vector<float> out(v.begin(), v.begin() + std::min<size_t>(v.size(), static_cast<size_t>(d)));
  double ss = 0;
  for (float x : out) ss += static_cast<double>(x) * x;
  const float n = std::max(static_cast<float>(std::sqrt(ss)), 1e-12f);
  for (float& x : out) x /= n;
  return out;
}

GemmaEmbedder::GemmaEmbedder(Parts parts) : p_(std::move(parts)) {
  if (!p_.model || !p_.tokenizer) throw Error("embedder: model or tokenizer missing");
  const ModelConfig& c = p_.model->config();
  if (!c.bidirectional) throw Error("embedder: the model is not bidirectional (use_bidirectional_attention)");
  int d = c.hidden_size;
  for (size_t i = 0; i < p_.dense.size(); ++i) {
    const DenseLayer& l = p_.dense[i];
    if (l.w.cols != d)
      throw Error("embedder: Dense layer " + std::to_string(i + 1) + " takes " + std::to_string(l.w.cols) +
                  " inputs, the previous stage gives " + std::to_string(d));
    if (!l.bias.empty() && static_cast<int64_t>(l.bias.size()) != l.w.rows)
      throw Error("embedder: Dense layer " + std::to_string(i + 1) + " bias has the wrong size");
    d = static_cast<int>(l.w.rows);
  }
  full_dim_ = d;
  dims_ = matryoshka_dims(d);
  if (p_.max_tokens <= 0) p_.max_tokens = c.max_position_embeddings;
}

std::vector<std::string> GemmaEmbedder::task_names() const {
  std::vector<std::string> n;
  for (const Prompt& p : p_.prompts) n.push_back(p.name);
  return n;
}

std::string GemmaEmbedder::prefix_for(const std::string& task) const {
  const std::string& name = task.empty() ? p_.default_prompt_name : task;
  if (name.empty()) return "";
  for (const Prompt& p : p_.prompts)
    if (p.name == name) return p.prefix;
  std::string known;
  for (const Prompt& p : p_.prompts) known += (known.empty() ? "" : ", ") + p.name;
  throw Error("unknown task '" + name + "' (this model's prompts: " + (known.empty() ? "none" : known) + ")");
}

namespace {

bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
    if (n < 0 || i + n >= s.size() + (n == 0)) return false;
    uint32_t cp = n == 0 ? c : n == 1 ? (c & 0x1Fu) : n == 2 ? (c & 0x0Fu) : (c & 0x07u);
    for (int k = 1; k <= n; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc >> 6) != 2) return false;
      cp = (cp << 6) | (cc & 0x3Fu);
    }
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += n + 1;
  }
  return true;
}

}  // namespace

std::vector<int32_t> GemmaEmbedder::tokenize(const std::string& text, const EmbedOptions& options) const {
  if (!valid_utf8(text)) throw Error("input is not valid UTF-8");
  const std::string full = prefix_for(options.task) + text;
  std::vector<int32_t> ids = p_.tokenizer->encode(full, /*add_bos=*/true);  // post-processor: <bos> ... <eos>
  const int32_t bos = p_.tokenizer->bos_id(), eos = p_.tokenizer->eos_id();
  if (p_.ensure_bos && bos >= 0 && (ids.empty() || ids.front() != bos)) ids.insert(ids.begin(), bos);
  if (p_.ensure_eos && eos >= 0 && (ids.size() < 2 || ids.back() != eos)) ids.push_back(eos);
  if (static_cast<int>(ids.size()) > p_.max_tokens)
    throw Error("input has " + std::to_string(ids.size()) + " tokens, more than the model's limit of " +
                std::to_string(p_.max_tokens) + " (including <bos>/<eos> and the task prompt)");
  return ids;
}

EmbedStages GemmaEmbedder::run_stages(const std::vector<int32_t>& ids) {
  std::lock_guard<std::mutex> lock(mu_);
  if (p_.threads > 0) cpu::set_num_threads(p_.threads);
  EmbedStages st;
  st.ids = ids;
  const int T = static_cast<int>(ids.size());
  const int64_t H = p_.model->config().hidden_size;
  p_.model->encode(ids.data(), T, scratch_, st.token_embeddings);
  // Mean pooling over every token (one text: the attention mask is all ones).
  std::vector<double> acc(H, 0.0);
  for (int t = 0; t < T; ++t)
    for (int64_t i = 0; i < H; ++i) acc[i] += st.token_embeddings[t * H + i];
  st.pooled.resize(H);
  for (int64_t i = 0; i < H; ++i) st.pooled[i] = static_cast<float>(acc[i] / T);
  const std::vector<float>* x = &st.pooled;
  for (const DenseLayer& l : p_.dense) {
    std::vector<float> y(l.w.rows);
    ops::matmul(x->data(), 1, l.w, y.data());
    for (size_t i = 0; i < l.bias.size(); ++i) y[i] += l.bias[i];
    st.dense.push_back(std::move(y));
    x = &st.dense.back();
  }
  st.embedding = truncate_normalize(*x, static_cast<int>(x->size()));
  return st;
}

std::vector<Embedding> GemmaEmbedder::embed(const std::vector<std::string>& texts, const EmbedOptions& options) {
  if (options.dim != 0 && std::find(dims_.begin(), dims_.end(), options.dim) == dims_.end()) {
    std::string list;
    for (int d : dims_) list += (list.empty() ? "" : ", ") + std::to_string(d);
    throw Error("dimension " + std::to_string(options.dim) + " is not supported (this model: " + list + ")");
  }
  // Validate everything before computing anything.
  std::vector<std::vector<int32_t>> ids;
  ids.reserve(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    try {
      ids.push_back(tokenize(texts[i], options));
    } catch (const Error& e) {
      throw Error(texts.size() > 1 ? "input " + std::to_string(i) + ": " + e.what() : std::string(e.what()));
    }
  }
  std::vector<Embedding> out;
  out.reserve(texts.size());
  for (const auto& t : ids) {
    EmbedStages st = run_stages(t);
    Embedding e;
    e.tokens = static_cast<int>(t.size());
    e.vector = options.dim == 0 || options.dim == full_dim_ ? std::move(st.embedding)
                                                           : truncate_normalize(st.embedding, options.dim);
    out.push_back(std::move(e));
  }
  return out;
}

std::string GemmaEmbedder::model_digest() const {
  std::lock_guard<std::mutex> lock(digest_mu_);
  if (!digest_.empty()) return digest_;
  if (p_.weight_files.size() == 1) {
    digest_ = sha256_file(p_.weight_files[0]);
  } else {  // several files: the sha256 of their digests, one per line in load order
    Sha256 h;
    for (const std::string& f : p_.weight_files) {
      const std::string line = sha256_file(f) + "\n";
      h.update(line.data(), line.size());
    }
    digest_ = h.hex();
  }
  return digest_;
}

}  // namespace eg::embed
