// Loading tokenizer.json (simdjson DOM: the Gemma 3 file is 33 MB).
#include <algorithm>
#include <simdjson.h>

#include "core/error.h"
#include "tokenizer/json_reader.h"
#include "tokenizer/tokenizer_impl.h"

namespace eg {

namespace {

using tok::array;
using tok::element;
using tok::element_type;
using tok::Json;
using tok::object;
using tok::read_padded;

using Impl = Tokenizer::Impl;

void load_model(const Json& js, const object& model, tok::BpeModel& bpe) {
  element e;
  if (js.member(model, "type", &e)) {
    const std::string_view type = js.as_string(e, "model.type");
    if (type != "BPE")
      js.fail("unsupported model type '" + std::string(type) + "' (only BPE is supported)");
  }
  if (js.member(model, "dropout", &e) && !e.is_null()) {
    double d = 0;
    if (e.get(d) || d != 0.0) js.fail("model.dropout is not supported");
  }
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (js.member(model, k, &e) && !e.is_null() && !js.as_string(e, k).empty())
      js.fail(std::string("model.") + k + " is not supported");
  }
  bpe.byte_fallback = js.bool_field(model, "byte_fallback", false, "model");
  bpe.fuse_unk = js.bool_field(model, "fuse_unk", false, "model");
  bpe.ignore_merges = js.bool_field(model, "ignore_merges", false, "model");

  // Vocabulary: collect, then store the strings by id, then index them.
  if (!js.member(model, "vocab", &e)) js.fail("model.vocab is missing");
  const object vocab = js.as_object(e, "model.vocab");
  std::vector<std::pair<std::string_view, int32_t>> entries;
  entries.reserve(vocab.size());
  int64_t max_id = -1;
  for (auto kv : vocab) {
    int64_t id = 0;
    if (kv.value.get(id) || id < 0 || id >= (int64_t{1} << 30))
      js.fail("model.vocab[\"" + std::string(kv.key) + "\"] must be a non-negative integer id");
    entries.emplace_back(kv.key, static_cast<int32_t>(id));
    max_id = std::max(max_id, id);
  }
  bpe.pieces.assign(static_cast<size_t>(max_id + 1), std::string());
  bpe.has_piece.assign(static_cast<size_t>(max_id + 1), 0);
  size_t total_bytes = 0;
  for (const auto& [s, id] : entries) {
    bpe.pieces[id].assign(s);
    bpe.has_piece[id] = 1;
    total_bytes += s.size();
  }
  bpe.vocab.init(entries.size(), total_bytes);
  constexpr size_t kBatch = 32;  // lookups/inserts in batches with prefetching: each is a cache miss
  uint64_t hashes[kBatch];
  for (size_t base = 0; base < entries.size(); base += kBatch) {
    const size_t n = std::min(kBatch, entries.size() - base);
    for (size_t k = 0; k < n; ++k) {
      hashes[k] = tok::StringIdMap::hash(entries[base + k].first);
      bpe.vocab.prefetch(hashes[k]);
    }
    for (size_t k = 0; k < n; ++k)  // a later duplicate wins
      bpe.vocab.insert(entries[base + k].first, entries[base + k].second, hashes[k]);
  }

  // Merges: [["a", "b"], ...] or the legacy ["a b", ...]. First the pairs of strings, then
  // the vocabulary lookups in batches with prefetching (each lookup is a cache miss).
  if (!js.member(model, "merges", &e)) js.fail("model.merges is missing");
  const array merges = js.as_array(e, "model.merges");
  std::vector<std::pair<std::string_view, std::string_view>> pairs;
  pairs.reserve(merges.size());
  std::string joined;
  for (element m : merges) {
    auto where = [&] { return "model.merges[" + std::to_string(pairs.size()) + "]"; };
    std::string_view a, b, line;
    if (m.type() == element_type::ARRAY) {
      array pair;
      if (m.get(pair)) js.fail(where() + " must be a pair of strings");
      auto it = pair.begin();
      if (pair.size() != 2 || (*it).get(a) || (*(++it)).get(b)) js.fail(where() + " must be a pair of strings");
    } else if (!m.get(line)) {
      if (line.rfind("#version", 0) == 0) continue;
      const size_t sp = line.find(' ');
      if (sp == std::string_view::npos) js.fail(where() + " \"" + std::string(line) + "\" is not \"a b\"");
      if (line.find(' ', sp + 1) == std::string_view::npos) {
        a = line.substr(0, sp);
        b = line.substr(sp + 1);
      } else {
        // Tokens with spaces: the one split whose parts and concatenation are all in the vocab.
        int found = 0;
        for (size_t p = sp; p != std::string_view::npos; p = line.find(' ', p + 1)) {
          const std::string_view ca = line.substr(0, p), cb = line.substr(p + 1);
          joined.assign(ca).append(cb);
          if (bpe.vocab.find(ca) >= 0 && bpe.vocab.find(cb) >= 0 && bpe.vocab.find(joined) >= 0) {
            a = ca;
            b = cb;
            ++found;
          }
        }
        if (found != 1) js.fail(where() + " \"" + std::string(line) + "\" is ambiguous");
      }
    } else {
      js.fail(where() + " must be a pair of strings");
    }
    pairs.emplace_back(a, b);
  }

  struct Pending {
    uint64_t ha, hb, hj;
    size_t joff, jlen;
  };
  Pending pend[kBatch];
  std::vector<int32_t> triples(pairs.size() * 3);
  for (size_t base = 0; base < pairs.size(); base += kBatch) {
    const size_t n = std::min(kBatch, pairs.size() - base);
    joined.clear();
    for (size_t k = 0; k < n; ++k) {
      const auto& [a, b] = pairs[base + k];
      Pending& p = pend[k];
      p.joff = joined.size();
      joined.append(a).append(b);
      p.jlen = a.size() + b.size();
      p.ha = tok::StringIdMap::hash(a);
      p.hb = tok::StringIdMap::hash(b);
      p.hj = tok::StringIdMap::hash(std::string_view(joined).substr(p.joff, p.jlen));
      bpe.vocab.prefetch(p.ha);
      bpe.vocab.prefetch(p.hb);
      bpe.vocab.prefetch(p.hj);
    }
    for (size_t k = 0; k < n; ++k) {
      const auto& [a, b] = pairs[base + k];
      const Pending& p = pend[k];
      int32_t* t = &triples[(base + k) * 3];
      t[0] = bpe.vocab.find(a, p.ha);
      t[1] = bpe.vocab.find(b, p.hb);
      t[2] = bpe.vocab.find(std::string_view(joined).substr(p.joff, p.jlen), p.hj);
      if (t[0] < 0 || t[1] < 0 || t[2] < 0)
        js.fail("model.merges[" + std::to_string(base + k) + "] (\"" + std::string(a) + "\", \"" +
                std::string(b) + "\"): token not in the vocabulary");
    }
  }
  bpe.merges.init(pairs.size());
  for (size_t base = 0; base < pairs.size(); base += kBatch) {
    const size_t n = std::min(kBatch, pairs.size() - base);
    for (size_t k = 0; k < n; ++k) bpe.merges.prefetch(triples[(base + k) * 3], triples[(base + k) * 3 + 1]);
    for (size_t k = 0; k < n; ++k) {
      const int32_t* t = &triples[(base + k) * 3];
      bpe.merges.insert(t[0], t[1], tok::MergeInfo{static_cast<uint32_t>(base + k), t[2]});
    }
  }

  if (js.member(model, "unk_token", &e) && !e.is_null()) {
    const std::string_view unk = js.as_string(e, "model.unk_token");
    bpe.unk_id = bpe.vocab.find(unk);
    if (bpe.unk_id < 0) bpe.unk_missing.assign(unk);
  }
  bpe.finish_tables();
}

void load_normalizer(const Json& js, const element& e, std::vector<Impl::NormStep>& out) {
  if (e.is_null()) return;
  const object o = js.as_object(e, "normalizer");
  const std::string_view type = js.string_field(o, "type", "normalizer");
  if (type == "Sequence") {
    element list;
    if (!js.member(o, "normalizers", &list)) js.fail("normalizer.normalizers is missing");
    for (element sub : js.as_array(list, "normalizer.normalizers")) load_normalizer(js, sub, out);
  } else if (type == "Replace") {
    out.push_back({Impl::NormStep::kReplace, js.string_pattern(o, "normalizer"),
                   std::string(js.string_field(o, "content", "normalizer"))});
  } else if (type == "Prepend") {
    out.push_back({Impl::NormStep::kPrepend, "", std::string(js.string_field(o, "prepend", "normalizer"))});
  } else {
    js.fail("unsupported normalizer type '" + std::string(type) + "'");
  }
}

void load_pre_tokenizer(const Json& js, const element& e, std::vector<Impl::SplitStep>& out) {
  if (e.is_null()) return;
  const object o = js.as_object(e, "pre_tokenizer");
  const std::string_view type = js.string_field(o, "type", "pre_tokenizer");
  if (type == "Sequence") {
    element list;
    if (!js.member(o, "pretokenizers", &list)) js.fail("pre_tokenizer.pretokenizers is missing");
    for (element sub : js.as_array(list, "pre_tokenizer.pretokenizers")) load_pre_tokenizer(js, sub, out);
  } else if (type == "Split") {
    const std::string_view beh = js.string_field(o, "behavior", "pre_tokenizer");
    Impl::SplitStep st{js.string_pattern(o, "pre_tokenizer"), Impl::SplitStep::kIsolated,
                       js.bool_field(o, "invert", false, "pre_tokenizer")};
    if (beh == "Removed") st.behavior = Impl::SplitStep::kRemoved;
    else if (beh == "Isolated") st.behavior = Impl::SplitStep::kIsolated;
    else if (beh == "MergedWithPrevious") st.behavior = Impl::SplitStep::kMergedWithPrevious;
    else if (beh == "MergedWithNext") st.behavior = Impl::SplitStep::kMergedWithNext;
    else if (beh == "Contiguous") st.behavior = Impl::SplitStep::kContiguous;
    else js.fail("unsupported pre_tokenizer Split behavior '" + std::string(beh) + "'");
    out.push_back(std::move(st));
  } else {
    js.fail("unsupported pre_tokenizer type '" + std::string(type) + "'");
  }
}

void load_decoder(const Json& js, const element& e, std::vector<Impl::DecStep>& out) {
  const object o = js.as_object(e, "decoder");
  const std::string_view type = js.string_field(o, "type", "decoder");
  if (type == "Sequence") {
    element list;
    if (!js.member(o, "decoders", &list)) js.fail("decoder.decoders is missing");
    for (element sub : js.as_array(list, "decoder.decoders")) load_decoder(js, sub, out);
  } else if (type == "Replace") {
    Impl::DecStep st{Impl::DecStep::kReplace, js.string_pattern(o, "decoder"),
                     std::string(js.string_field(o, "content", "decoder"))};
    out.push_back(std::move(st));
  } else if (type == "ByteFallback") {
    out.push_back({Impl::DecStep::kByteFallback, "", ""});
  } else if (type == "Fuse") {
    out.push_back({Impl::DecStep::kFuse, "", ""});
  } else if (type == "Strip") {
    Impl::DecStep st{Impl::DecStep::kStrip, "", std::string(js.string_field(o, "content", "decoder"))};
    element v;
    if (js.member(o, "start", &v)) st.start = static_cast<size_t>(js.as_int(v, "decoder.start"));
    if (js.member(o, "stop", &v)) st.stop = static_cast<size_t>(js.as_int(v, "decoder.stop"));
    out.push_back(std::move(st));
  } else {
    js.fail("unsupported decoder type '" + std::string(type) + "'");
  }
}

// TemplateProcessing "single": special tokens before / after the sequence "A".
void load_post_processor(const Json& js, const element& e, Impl& im) {
  const object o = js.as_object(e, "post_processor");
  const std::string_view type = js.string_field(o, "type", "post_processor");
  if (type != "TemplateProcessing")
    js.fail("unsupported post_processor type '" + std::string(type) + "'");
  element single, specials;
  if (!js.member(o, "single", &single)) js.fail("post_processor.single is missing");
  object special_map;
  const bool has_specials = js.member(o, "special_tokens", &specials);
  if (has_specials) special_map = js.as_object(specials, "post_processor.special_tokens");
  bool after = false;
  for (element item : js.as_array(single, "post_processor.single")) {
    const object io = js.as_object(item, "post_processor.single[]");
    element v;
    if (js.member(io, "Sequence", &v)) {
      after = true;
      continue;
    }
    if (!js.member(io, "SpecialToken", &v)) js.fail("post_processor.single: unknown item");
    const std::string_view name = js.string_field(js.as_object(v, "SpecialToken"), "id", "SpecialToken");
    element st, ids;
    if (!has_specials || !js.member(special_map, name, &st))
      js.fail("post_processor: special token '" + std::string(name) + "' is not defined");
    if (!js.member(js.as_object(st, "special_tokens entry"), "ids", &ids))
      js.fail("post_processor.special_tokens['" + std::string(name) + "'].ids is missing");
    for (element idv : js.as_array(ids, "post_processor ids"))
      (after ? im.suffix_ids : im.prefix_ids).push_back(static_cast<int32_t>(js.as_int(idv, "post_processor id")));
  }
}

}  // namespace

void Tokenizer::Impl::load_tokenizer_json(const std::string& path) {
  const simdjson::padded_string buf = read_padded(path, "tokenizer file");
  const Json js{path};
  simdjson::dom::parser parser;
  const object root = js.as_object(js.parse(parser, buf), "top level");

  element e;
  if (!js.member(root, "model", &e)) js.fail("\"model\" is missing");
  load_model(js, js.as_object(e, "model"), bpe);

  // Added tokens, with the ids HF assigns (AddedVocabulary::add_tokens).
  if (js.member(root, "added_tokens", &e) && !e.is_null()) {
    std::vector<tok::AddedToken> raw;
    for (element t : js.as_array(e, "added_tokens")) {
      const object to = js.as_object(t, "added_tokens[]");
      tok::AddedToken a;
      a.content = std::string(js.string_field(to, "content", "added_tokens[]"));
      a.special = js.bool_field(to, "special", false, "added_tokens[]");
      a.normalized = js.bool_field(to, "normalized", !a.special, "added_tokens[]");
      a.lstrip = js.bool_field(to, "lstrip", false, "added_tokens[]");
      a.rstrip = js.bool_field(to, "rstrip", false, "added_tokens[]");
      a.single_word = js.bool_field(to, "single_word", false, "added_tokens[]");
      raw.push_back(std::move(a));
    }
    tok::StringIdMap seen;
    seen.init(raw.size());
    const auto model_size = static_cast<int32_t>(bpe.vocab.size());
    int32_t max_added = -1;
    added.reserve(raw.size());  // id_piece points into `added`: no reallocation
    for (tok::AddedToken& a : raw) {
      if (a.content.empty() || seen.find(a.content) >= 0) continue;
      int32_t id = bpe.vocab.find(a.content);
      if (id < 0) id = (max_added >= model_size || model_size == 0) ? max_added + 1 : model_size;
      max_added = std::max(max_added, id);
      a.id = id;
      added.push_back(std::move(a));
      seen.insert(added.back().content, id);
    }
  }

  if (js.member(root, "normalizer", &e)) load_normalizer(js, e, normalizer);
  if (js.member(root, "pre_tokenizer", &e)) load_pre_tokenizer(js, e, pre_tokenizer);
  if (js.member(root, "post_processor", &e) && !e.is_null()) {
    load_post_processor(js, e, *this);
  } else {
    prefix_ids = {-1};  // filled with the BOS id by finish()
  }
  if (js.member(root, "decoder", &e) && !e.is_null()) {
    has_decoder = true;
    load_decoder(js, e, decoder);
  }
}

}  // namespace eg
