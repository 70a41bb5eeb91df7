#include "engine/session_prompt.h"

#include <algorithm>

#include "core/error.h"
#include "engine/prompt_bos.h"
#include "engine/media.h"
#include "engine/session.h"

namespace eg {

namespace {

// Python str.strip() for ASCII whitespace (what Gemma templates' `| trim` removes in practice).
std::string py_strip(const std::string& s) {
  const char* ws = " \t\n\r\v\f";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(ws);
  return s.substr(b, e - b + 1);
}

// A sentinel no real text contains: control bytes around the message index (not \x1c-\x1f,
// which Python's str.strip() -- and so the templates' trim -- treats as whitespace).
std::string sentinel(size_t i) { return "\x01" "EGCONTENT" + std::to_string(i) + "\x02"; }

}  // namespace

PromptEncoder::PromptEncoder(const Tokenizer& tok, const std::string& template_source,
                             std::optional<bool> enable_thinking)
    : tok_(tok), thinking_(enable_thinking), specials_by_byte_(256) {
  if (!template_source.empty()) tpl_.emplace(template_source);
  uses_tools_ = template_source.find("tools") != std::string::npos;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    if (!tok.is_special(id)) continue;
    const std::string& p = tok.piece(id);
    if (!p.empty()) specials_by_byte_[static_cast<unsigned char>(p[0])].push_back(p);
  }
  for (auto& v : specials_by_byte_)
    std::sort(v.begin(), v.end(), [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
}

PromptEncoder::Rendered PromptEncoder::render(const std::vector<ChatMessage>& msgs, bool gen_prompt,
                                              const Extras* extras) const {
  if (!tpl_) throw Error("this session has no chat template (use raw mode, or pass the template)");
  if (msgs.empty()) throw Error("chat template: the conversation is empty");
  ChatOptions opt;
  opt.add_generation_prompt = gen_prompt;
  opt.enable_thinking = thinking_;
  const int32_t bos = tok_.bos_id(), eos = tok_.eos_id();
  opt.bos_token = bos >= 0 ? tok_.piece(bos) : "";
  opt.eos_token = eos >= 0 ? tok_.piece(eos) : "";
  if (extras != nullptr && !extras->tools.is_null()) opt.tools = extras->tools;
  auto to_json = [&](bool sentinels) {
    nlohmann::ordered_json arr = nlohmann::ordered_json::array();
    for (size_t i = 0; i < msgs.size(); ++i) {
      nlohmann::ordered_json m;
      m["role"] = msgs[i].role;
      const std::string text = sentinels && !msgs[i].content.empty() ? sentinel(i) : msgs[i].content;
      if (msgs[i].images.empty()) {
        m["content"] = text;
      } else {  // images first, then the text: the template writes its image marker per item
        nlohmann::ordered_json parts = nlohmann::ordered_json::array();
        for (const auto& im : msgs[i].images) parts.push_back({{"type", im->audio ? "audio" : "image"}});
        if (!text.empty()) parts.push_back({{"type", "text"}, {"text", text}});
        m["content"] = std::move(parts);
      }
      if (extras != nullptr && i < extras->message_fields.size() && extras->message_fields[i].is_object())
        for (const auto& [k, v] : extras->message_fields[i].items()) m[k] = v;
      arr.push_back(std::move(m));
    }
    return arr;
  };
  Rendered r;
  r.text = tpl_->render(to_json(false), opt);

  // Regions from the sentinel rendering (trimmed contents first, then raw ones).
  std::string sent;
  try {
    sent = tpl_->render(to_json(true), opt);
  } catch (const Error&) {
    sent.clear();
  }
  for (int trimmed = 1; trimmed >= 0 && !sent.empty(); --trimmed) {
    std::string text;
    std::vector<std::pair<size_t, size_t>> regions;
    size_t pos = 0;
    bool ok = true;
    for (size_t i = 0; i < msgs.size() && ok; ++i) {
      if (msgs[i].content.empty()) continue;
      const std::string s = sentinel(i);
      const size_t at = sent.find(s, pos);
      if (at == std::string::npos) {  // the template dropped this content (e.g. thinking)
        continue;
      }
      text.append(sent, pos, at - pos);
      const std::string c = trimmed ? py_strip(msgs[i].content) : msgs[i].content;
      regions.push_back({text.size(), text.size() + c.size()});
      text += c;
      pos = at + s.size();
      if (sent.find(s, pos) != std::string::npos) ok = false;  // printed twice: ambiguous
    }
    if (!ok) continue;
    text.append(sent, pos, std::string::npos);
    if (text == r.text) {
      r.content = std::move(regions);
      return r;
    }
  }
  // Fallback: locate each (trimmed) content in order, only where that is unambiguous (a content
  // found more than once, e.g. "a" inside "<start_of_turn>", stays unprotected: HF's tokenization).
  size_t pos = 0;
  for (const ChatMessage& m : msgs) {
    const std::string c = py_strip(m.content);
    if (c.empty()) continue;
    const size_t at = r.text.find(c, pos);
    if (at == std::string::npos || r.text.find(c, at + 1) != std::string::npos) continue;
    r.content.push_back({at, at + c.size()});
    pos = at + c.size();
  }
  return r;
}

std::vector<int32_t> PromptEncoder::encode(const std::string& text,
                                           const std::vector<std::pair<size_t, size_t>>& protect,
                                           size_t cut, bool add_bos) const {
  const size_t n = std::min(cut, text.size());
  std::vector<int32_t> out;
  size_t span_begin = 0;  // start of the current plain-text span
  size_t region = 0;      // next protected region
  auto flush_span = [&](size_t end) {
    if (end > span_begin) {
      std::vector<int32_t> ids = tok_.encode(std::string_view(text).substr(span_begin, end - span_begin),
                                             /*add_bos=*/false, /*parse_special=*/false);
      out.insert(out.end(), ids.begin(), ids.end());
    }
  };
  size_t i = 0;
  while (i < n) {
    while (region < protect.size() && protect[region].second <= i) ++region;
    if (region < protect.size() && protect[region].first <= i) {  // inside a content region
      i = protect[region].second;
      continue;
    }
    const size_t limit = region < protect.size() ? std::min(n, protect[region].first) : n;
    const auto& cands = specials_by_byte_[static_cast<unsigned char>(text[i])];
    const std::string* match = nullptr;
    for (const std::string& p : cands) {
      if (p.size() <= limit - i && text.compare(i, p.size(), p) == 0) {
        match = &p;
        break;  // longest first
      }
    }
    if (match == nullptr) {
      ++i;
      continue;
    }
    flush_span(i);
    const int32_t id = tok_.token_id(*match);
    out.push_back(id);
    i += match->size();
    span_begin = i;
  }
  flush_span(n);
  apply_prompt_bos(tok_, out, add_bos);  // Gemma templates write "<bos>": never a second one
  return out;
}

}  // namespace eg
