// Loading tokenizer_config.json, and the tables built once everything is loaded.
#include <algorithm>
#include <simdjson.h>

#include "core/error.h"
#include "tokenizer/json_reader.h"
#include "tokenizer/tokenizer_impl.h"

namespace eg {

namespace {

using tok::element;
using tok::Json;
using tok::object;
using tok::read_padded;

// A token name in tokenizer_config.json: "<bos>" or {"content": "<bos>", ...}; "" if absent.
std::string config_token(const Json& js, const object& o, std::string_view key) {
  element e;
  if (!js.member(o, key, &e) || e.is_null()) return std::string();
  std::string_view s;
  if (!e.get(s)) return std::string(s);
  object t;
  if (!e.get(t)) return std::string(js.string_field(t, "content", std::string(key)));
  js.fail(std::string(key) + " must be a string or an object with \"content\"");
}

}  // namespace

void Tokenizer::Impl::load_config_json(const std::string& path) {
  const simdjson::padded_string buf = read_padded(path, "tokenizer config");
  const Json js{path};
  simdjson::dom::parser parser;
  const object root = js.as_object(js.parse(parser, buf), "top level");
  add_bos = js.bool_field(root, "add_bos_token", true, "tokenizer_config");
  element e;
  if (js.member(root, "chat_template", &e) && !e.is_null()) {
    std::string_view s;
    if (!e.get(s)) {
      chat_template.assign(s);
    } else {  // [{"name": ..., "template": ...}]: the "default" one
      for (element t : js.as_array(e, "chat_template")) {
        const object to = js.as_object(t, "chat_template[]");
        const std::string_view name = js.string_field(to, "name", "chat_template[]");
        if (chat_template.empty() || name == "default")
          chat_template.assign(js.string_field(to, "template", "chat_template[]"));
        if (name == "default") break;
      }
    }
  }
  const std::string bos_name = config_token(js, root, "bos_token");
  const std::string eos_name = config_token(js, root, "eos_token");
  // The added-token index is built in finish(); look the names up directly.
  auto find_added = [&](const std::string& name) {
    for (const tok::AddedToken& a : added)
      if (a.content == name) return a.id;
    return bpe.vocab.find(name);
  };
  if (!bos_name.empty()) {
    bos = find_added(bos_name);
    if (bos < 0) js.fail("bos_token '" + bos_name + "' is not in the vocabulary");
  }
  if (!eos_name.empty()) {
    eos = find_added(eos_name);
    if (eos < 0) js.fail("eos_token '" + eos_name + "' is not in the vocabulary");
  }
}

void Tokenizer::Impl::finish() {
  size_t n = bpe.pieces.size();
  for (const tok::AddedToken& a : added) n = std::max(n, static_cast<size_t>(a.id) + 1);
  id_piece.assign(n, nullptr);
  id_special.assign(n, 0);
  for (size_t id = 0; id < bpe.pieces.size(); ++id)
    if (bpe.has_piece[id]) id_piece[id] = &bpe.pieces[id];
  added_map.init(added.size());
  std::vector<const tok::AddedToken*> raw_tokens, norm_tokens;
  std::vector<std::string> raw_patterns, norm_patterns;
  for (const tok::AddedToken& a : added) {
    id_piece[a.id] = &a.content;
    added_map.insert(a.content, a.id);
    if (a.normalized) {
      norm_tokens.push_back(&a);
      std::string p;
      normalize(a.content, p);
      norm_patterns.push_back(std::move(p));
    } else {
      raw_tokens.push_back(&a);
      raw_patterns.push_back(a.content);
    }
  }
  // HF's trie lists the special tokens first, then the others (matters only for duplicates).
  for (const tok::AddedToken& a : added)
    if (a.special) id_special[a.id] = 1;
  raw_matcher.build(raw_tokens, raw_patterns);
  normalized_matcher.build(norm_tokens, norm_patterns);

  auto named = [&](const char* name) {
    const int32_t id = added_map.find(name);
    return id >= 0 ? id : bpe.vocab.find(name);
  };
  if (bos < 0) bos = named("<bos>");
  if (eos < 0) eos = named("<eos>");
  if (prefix_ids.size() == 1 && prefix_ids[0] == -1) {  // no post-processor: <bos> when known
    prefix_ids.clear();
    if (bos >= 0) prefix_ids.push_back(bos);
  }
  for (int32_t id : prefix_ids)
    if (!valid_id(id)) throw Error("tokenizer: post_processor token id " + std::to_string(id) + " is not in the vocabulary");
  for (int32_t id : suffix_ids)
    if (!valid_id(id)) throw Error("tokenizer: post_processor token id " + std::to_string(id) + " is not in the vocabulary");

  // Token-by-token streaming works for Replace* ByteFallback [Fuse] (and Replace* [Fuse]).
  streaming_simple = has_decoder;
  bool seen_bf = false, seen_fuse = false;
  for (const DecStep& st : decoder) {
    if (seen_fuse) streaming_simple = false;
    if (st.kind == DecStep::kReplace && seen_bf) streaming_simple = false;
    if (st.kind == DecStep::kStrip) streaming_simple = false;
    if (st.kind == DecStep::kByteFallback) {
      if (seen_bf) streaming_simple = false;
      seen_bf = true;
    }
    if (st.kind == DecStep::kFuse) seen_fuse = true;
  }
}

}  // namespace eg
