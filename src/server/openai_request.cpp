// OpenAI request JSON -> GenRequest (validation rules in openai_request.h).
#include "server/openai_request.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "engine/audio_prompt.h"
#include "engine/image_prompt.h"
#include "engine/presets.h"
#include "engine/session.h"
#include "server/media_cache.h"
#include "server/api_error.h"
#include "server/audio_input.h"
#include "server/image_input.h"
#include "server/limits.h"

namespace eg::server {

using json = nlohmann::ordered_json;

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& msg) { throw ApiError(400, msg, param); }



std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

std::string type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    default: return "a number";
  }
}

const json* field(const json& o, const char* key) {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<double> get_number(const json& o, const char* key, double lo, double hi) {
  const json* v = field(o, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) bad(key, std::string("'") + key + "' must be a number, got " + type_name(*v));
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi)
    bad(key, std::string("'") + key + "' must be between " + num(lo) + " and " + num(hi));
  return d;
}

std::optional<int64_t> get_int(const json& o, const char* key, int64_t lo, int64_t hi) {
  const json* v = field(o, key);
  if (!v) return std::nullopt;
  if (!v->is_number_integer() && !v->is_number_unsigned()) {
    if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>()) {
      // 5.0 is accepted as 5
    } else {
      bad(key, std::string("'") + key + "' must be an integer, got " + type_name(*v));
    }
  }
  const double d = v->get<double>();
  if (d < static_cast<double>(lo) || d > static_cast<double>(hi))
    bad(key, std::string("'") + key + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  return static_cast<int64_t>(d);
}

bool get_bool(const json& o, const char* key, bool dflt) {
  const json* v = field(o, key);
  if (!v) return dflt;
  if (!v->is_boolean()) bad(key, std::string("'") + key + "' must be a boolean, got " + type_name(*v));
  return v->get<bool>();
}

std::string get_string(const json& o, const char* key, const std::string& dflt) {
  const json* v = field(o, key);
  if (!v) return dflt;
  if (!v->is_string()) bad(key, std::string("'") + key + "' must be a string, got " + type_name(*v));
  return v->get<std::string>();
}

// The fields common to both endpoints: model, stream, sampling, stop, max tokens.
void parse_common(const json& b, const RequestContext& ctx, GenRequest& r) {
  r.model = get_string(b, "model", ctx.model_id);
  r.stream = get_bool(b, "stream", false);
  r.ignore_eos = get_bool(b, "ignore_eos", false);
  if (auto t = get_number(b, "timeout", 0.001, 1e7)) r.timeout_s = *t;
  if (const json* so = field(b, "stream_options")) {
    if (!so->is_object()) bad("stream_options", "'stream_options' must be an object");
    r.include_usage = get_bool(*so, "include_usage", false);
  }
  if (auto n = get_int(b, "n", 1, 128); n && *n != 1) bad("n", "only n = 1 is supported");
  if (get_bool(b, "logprobs", false)) bad("logprobs", "logprobs are not supported");
  if (field(b, "top_logprobs")) bad("top_logprobs", "logprobs are not supported");
  if (field(b, "audio")) bad("audio", "audio output is not supported");
  if (const json* m = field(b, "modalities")) {
    if (!m->is_array()) bad("modalities", "'modalities' must be an array");
    for (const json& x : *m)
      if (x != "text") bad("modalities", "only the text modality is supported");
  }

  SamplingOverrides o;
  o.temperature = 1.0f;  // OpenAI's default; a preset replaces it unless given explicitly
  std::string preset = get_string(b, "preset", "");
  if (!preset.empty()) {
    try {
      find_preset(preset);
    } catch (const Error& e) {
      bad("preset", e.what());
    }
    o.temperature.reset();
  }
  if (auto t = get_number(b, "temperature", 0.0, 2.0)) o.temperature = static_cast<float>(*t);
  if (auto t = get_number(b, "top_p", 0.0, 1.0)) {
    if (*t <= 0.0) bad("top_p", "'top_p' must be in (0, 1]");
    o.top_p = static_cast<float>(*t);
  }
  if (auto t = get_int(b, "top_k", 0, 1 << 30)) o.top_k = static_cast<int>(*t);
  if (auto t = get_number(b, "min_p", 0.0, 1.0)) o.min_p = static_cast<float>(*t);
  if (auto t = get_number(b, "presence_penalty", -2.0, 2.0)) o.presence_penalty = static_cast<float>(*t);
  if (auto t = get_number(b, "frequency_penalty", -2.0, 2.0)) o.frequency_penalty = static_cast<float>(*t);
  if (auto t = get_number(b, "repeat_penalty", 1e-3, 100.0)) o.repeat_penalty = static_cast<float>(*t);
  if (auto t = get_int(b, "repeat_last_n", 0, 1 << 20)) o.repeat_last_n = static_cast<int>(*t);
  if (const json* s = field(b, "seed")) {
    if (!s->is_number_integer() && !s->is_number_unsigned()) bad("seed", "'seed' must be an integer");
    o.seed = s->is_number_unsigned() ? s->get<uint64_t>() : static_cast<uint64_t>(s->get<int64_t>());
  } else {
    std::random_device rd;
    o.seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  try {
    r.sampling = resolve_sampling(preset, o);
  } catch (const Error& e) {
    bad("", e.what());
  }

  if (const json* lb = field(b, "logit_bias")) {
    if (!lb->is_object()) bad("logit_bias", "'logit_bias' must be an object {token id: bias}");
    const int64_t V = ctx.model.model().config().vocab_size;
    for (auto it = lb->begin(); it != lb->end(); ++it) {
      char* end = nullptr;
      const long long id = std::strtoll(it.key().c_str(), &end, 10);
      if (it.key().empty() || *end != '\0' || id < 0 || id >= V)
        bad("logit_bias", "logit_bias key '" + it.key() + "' is not a token id in [0, " + std::to_string(V) + ")");
      if (!it.value().is_number() || !std::isfinite(it.value().get<double>()) || std::fabs(it.value().get<double>()) > 100)
        bad("logit_bias", "logit_bias values must be numbers in [-100, 100]");
      r.logit_bias.emplace_back(static_cast<int32_t>(id), it.value().get<float>());
    }
  }
  if (const json* s = field(b, "stop")) {
    if (s->is_string()) {
      r.stop.push_back(s->get<std::string>());
    } else if (s->is_array()) {
      if (s->size() > kMaxStopStrings) bad("stop", "at most " + std::to_string(kMaxStopStrings) + " stop strings");
      for (const json& x : *s) {
        if (!x.is_string()) bad("stop", "'stop' must be a string or an array of strings");
        r.stop.push_back(x.get<std::string>());
      }
    } else {
      bad("stop", "'stop' must be a string or an array of strings");
    }
    for (const std::string& x : r.stop)
      if (x.empty()) bad("stop", "stop strings must not be empty");
  }
}

// Prompt length and max_tokens against the context.
void fit_context(GenRequest& r, const RequestContext& ctx, std::optional<int64_t> max_tokens) {
  const int n = static_cast<int>(r.prompt.size());
  if (n == 0) bad("messages", "the prompt is empty");
  if (n >= ctx.context_tokens)
    throw ApiError(400,
                   "This model's maximum context length is " + std::to_string(ctx.context_tokens) +
                       " tokens. However, your messages resulted in " + std::to_string(n) + " tokens.",
                   "messages", "context_length_exceeded");
  const int room = ctx.context_tokens - n;
  r.max_tokens = max_tokens ? static_cast<int>(std::min<int64_t>(*max_tokens, room)) : room;
}

// The text of a message's content; image_url and input_audio parts (user messages: `images`
// non-null) are decoded into *images, in order.
std::string text_of_content(const json& c, const std::string& param, std::vector<PromptMedium>* images,
                            const LoadedModel& model, MediaCache* cache) {
  if (c.is_null()) return "";
  if (c.is_string()) return c.get<std::string>();
  if (c.is_array()) {
    std::string s;
    for (size_t i = 0; i < c.size(); ++i) {
      const json& part = c[i];
      const std::string pp = param + "[" + std::to_string(i) + "]";
      if (!part.is_object()) bad(param, "content parts must be objects");
      const std::string type = get_string(part, "type", "");
      if (type == "image_url") {
        if (images == nullptr) bad(pp, "image parts are only accepted in user messages");
        try {
          model.image_encoder();  // "this model has no vision tower", before any decoding
        } catch (const Error& e) {
          throw ApiError(400, e.what(), pp, "image_not_supported");
        }
        const json* iu = field(part, "image_url");
        const json* url = iu && iu->is_object() ? field(*iu, "url") : iu;
        if (!url || !url->is_string()) bad(pp, "an image_url part needs 'image_url': {\"url\": \"data:image/...;base64,...\"}");
        size_t n = 0;
        for (const auto& m : *images) n += m.kind == PromptMedium::Kind::Image ? 1 : 0;
        if (n >= static_cast<size_t>(kMaxImagesPerRequest))
          throw ApiError(400, "too many images: at most " + std::to_string(kMaxImagesPerRequest) + " per request", pp,
                         "too_many_images");
        PromptMedium m;
        m.source = url->get<std::string>();
        if (cache != nullptr) m.encoded = cache->find(m.source);
        if (m.encoded.empty()) m.image = image_from_url(m.source, pp);
        images->push_back(std::move(m));
        continue;
      }
      if (type == "input_audio") {
        if (images == nullptr) bad(pp, "audio parts are only accepted in user messages");
        try {
          model.audio_encoder();  // "this model has no audio tower", before any decoding
        } catch (const Error& e) {
          throw ApiError(400, e.what(), pp, "audio_not_supported");
        }
        size_t n = 0;
        for (const auto& m : *images) n += m.kind == PromptMedium::Kind::Audio ? 1 : 0;
        if (n >= static_cast<size_t>(kMaxAudioPerRequest))
          throw ApiError(400, "too many audio clips: at most " + std::to_string(kMaxAudioPerRequest) + " per request",
                         pp, "too_many_audio_clips");
        const json* ia = field(part, "input_audio");
        PromptMedium m;
        m.kind = PromptMedium::Kind::Audio;
        if (cache != nullptr) {  // a cached clip still needs a valid part
          input_audio_format(ia ? *ia : json(), pp);
          m.source = "input_audio:" + ia->at("data").get<std::string>();
          m.encoded = cache->find(m.source);
        }
        if (m.encoded.empty()) m.audio = audio_from_part(ia ? *ia : json(), pp);
        images->push_back(std::move(m));
        continue;
      }
      if (type != "text") bad(param, "content part type '" + type + "' is not supported (text, image_url, input_audio)");
      const json* t = field(part, "text");
      if (!t || !t->is_string()) bad(param, "a text content part needs a 'text' string");
      s += t->get<std::string>();
    }
    return s;
  }
  bad(param, "'content' must be a string, an array of text / image_url / input_audio parts, or null");
}

// OpenAI tool_calls[] (arguments a JSON string) -> the template's form (arguments an object).
nlohmann::ordered_json template_tool_calls(const json& calls, const std::string& param) {
  if (!calls.is_array()) bad(param, "'tool_calls' must be an array");
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const json& c : calls) {
    if (!c.is_object()) bad(param, "each tool call must be an object");
    const json* f = field(c, "function");
    if (!f || !f->is_object()) bad(param, "a tool call needs a 'function' object");
    const std::string name = get_string(*f, "name", "");
    if (name.empty()) bad(param, "a tool call needs a function name");
    nlohmann::ordered_json tc;
    tc["id"] = get_string(c, "id", "");
    tc["type"] = "function";
    tc["function"]["name"] = name;
    const json* a = field(*f, "arguments");
    if (a && a->is_string()) {
      nlohmann::ordered_json parsed = parse_json_limited(a->get<std::string>(), "tool call arguments", param);
      if (parsed.is_discarded() || !parsed.is_object())
        bad(param, "tool call arguments must be a JSON object (as a string)");
      tc["function"]["arguments"] = parsed;
    } else if (a && a->is_object()) {
      tc["function"]["arguments"] = *a;
    } else if (a) {
      bad(param, "tool call arguments must be a JSON string");
    } else {
      tc["function"]["arguments"] = nlohmann::ordered_json::object();
    }
    out.push_back(std::move(tc));
  }
  return out;
}

void parse_tools(const json& b, const RequestContext& ctx, GenRequest& r) {
  const json* tools = field(b, "tools");
  const json* choice = field(b, "tool_choice");
  if (choice) {
    if (choice->is_string()) {
      r.tool_choice = choice->get<std::string>();
      if (r.tool_choice != "none" && r.tool_choice != "auto" && r.tool_choice != "required")
        bad("tool_choice", "'tool_choice' must be none, auto, required or {\"type\": \"function\", ...}");
    } else if (choice->is_object()) {
      const json* f = field(*choice, "function");
      if (!f || !f->is_object() || get_string(*f, "name", "").empty())
        bad("tool_choice", "'tool_choice' object needs function.name");
      r.tool_choice = "function";
      r.tool_name = get_string(*f, "name", "");
    } else {
      bad("tool_choice", "'tool_choice' must be a string or an object");
    }
  }
  if (!tools || (tools->is_array() && tools->empty())) {
    if (r.tool_choice == "required" || r.tool_choice == "function")
      bad("tool_choice", "tool_choice requires tools");
    return;
  }
  if (!tools->is_array()) bad("tools", "'tools' must be an array");
  if (tools->size() > kMaxTools)
    bad("tools", "at most " + std::to_string(kMaxTools) + " tools, got " + std::to_string(tools->size()));
  bool found = r.tool_choice != "function";
  for (const json& t : *tools) {
    if (!t.is_object() || get_string(t, "type", "function") != "function")
      bad("tools", "each tool must be {\"type\": \"function\", \"function\": {...}}");
    const json* f = field(t, "function");
    if (!f || !f->is_object()) bad("tools", "a tool needs a 'function' object");
    const std::string name = get_string(*f, "name", "");
    if (name.empty()) bad("tools", "a tool function needs a name");
    if (const json* p = field(*f, "parameters"); p && !p->is_object())
      bad("tools", "function parameters must be a JSON schema object");
    if (name == r.tool_name) found = true;
  }
  if (!found) bad("tool_choice", "tool_choice names a function that is not in tools: " + r.tool_name);
  if (!ctx.template_has_tools)
    bad("tools", "this model's chat template cannot render tools (start the server with --chat-template)");
  r.tools = *tools;
  r.parse_tools = r.tool_choice != "none";
}

void parse_response_format(const json& b, GenRequest& r) {
  const json* f = field(b, "response_format");
  if (!f) return;
  if (!f->is_object()) bad("response_format", "'response_format' must be an object");
  const std::string type = get_string(*f, "type", "");
  if (type == "text") return;
  // Extension: whitespace outside JSON strings, "compact" (default: none) or "pretty".
  const std::string ws = get_string(*f, "whitespace", "compact");
  if (ws != "compact" && ws != "pretty")
    bad("response_format", "response_format.whitespace must be \"compact\" or \"pretty\"");
  r.pretty_json = ws == "pretty";
  if (type == "json_object") {
    r.format = GenRequest::Format::JsonObject;
    return;
  }
  if (type != "json_schema") bad("response_format", "response_format type must be text, json_object or json_schema");
  const json* js = field(*f, "json_schema");
  if (!js || !js->is_object()) bad("response_format", "json_schema response_format needs a 'json_schema' object");
  const json* schema = field(*js, "schema");
  if (!schema || !(schema->is_object() || schema->is_boolean()))
    bad("response_format", "'json_schema.schema' must be a JSON schema object");
  r.format = GenRequest::Format::JsonSchema;
  r.schema = *schema;
}

}  // namespace

json parse_json_limited(const std::string& text, const std::string& what, const std::string& param) {
  std::vector<size_t> keys;  // per open object
  const json::parser_callback_t cb = [&](int depth, json::parse_event_t ev, json&) {
    if (depth > kMaxJsonDepth)
      throw ApiError(400, what + " nests deeper than " + std::to_string(kMaxJsonDepth) + " levels", param);
    if (ev == json::parse_event_t::object_start) keys.push_back(0);
    if (ev == json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    if (ev == json::parse_event_t::key && !keys.empty() && ++keys.back() > kMaxObjectKeys)
      throw ApiError(400, what + " has an object of more than " + std::to_string(kMaxObjectKeys) + " keys", param);
    return true;
  };
  return json::parse(text, cb, false);
}

json parse_body(const std::string& body) {
  json b = parse_json_limited(body, "the request body", "");
  if (b.is_discarded()) throw ApiError(400, "the request body is not valid JSON");
  if (!b.is_object()) throw ApiError(400, "the request body must be a JSON object");
  return b;
}

GenRequest parse_chat_request(const json& b, const RequestContext& ctx, size_t* draft_end) {
  GenRequest r;
  r.kind = GenRequest::Kind::Chat;
  parse_common(b, ctx, r);
  parse_response_format(b, r);
  parse_tools(b, ctx, r);
  if (r.format != GenRequest::Format::Text && (r.tool_choice == "required" || r.tool_choice == "function"))
    bad("response_format", "response_format cannot be combined with a required tool call");

  const bool add_bos = get_bool(b, "add_bos", true);
  const json* msgs = field(b, "messages");
  if (!msgs) bad("messages", "'messages' is required");
  if (!msgs->is_array()) bad("messages", "'messages' must be an array");
  if (msgs->empty()) bad("messages", "'messages' must not be empty");
  if (msgs->size() > kMaxMessages)
    bad("messages", "at most " + std::to_string(kMaxMessages) + " messages, got " + std::to_string(msgs->size()));
  std::vector<ChatMessage> conv;
  std::vector<PromptMedium> decoded;  // every image and audio clip of the request, in order
  std::vector<size_t> images_of;      // per message: media decoded up to its end
  PromptEncoder::Extras extras;
  if (!r.tools.is_null()) extras.tools = r.tools;
  for (size_t i = 0; i < msgs->size(); ++i) {
    const json& m = (*msgs)[i];
    const std::string param = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) bad(param, param + " must be an object");
    const json* role_v = field(m, "role");
    if (!role_v || !role_v->is_string()) bad(param + ".role", param + " needs a 'role' string");
    std::string role = role_v->get<std::string>();
    if (role == "developer") role = "system";
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      bad(param + ".role", "unknown role '" + role + "' (system, developer, user, assistant, tool)");
    if (!m.contains("content") && !(role == "assistant" && field(m, "tool_calls")))
      bad(param + ".content", param + " needs 'content'");
    const std::string content = text_of_content(m.contains("content") ? m["content"] : json(), param + ".content",
                                                role == "user" ? &decoded : nullptr, ctx.model, ctx.media_cache);
    images_of.push_back(decoded.size());
    nlohmann::ordered_json fields = nlohmann::ordered_json::object();
    if (role == "assistant" && field(m, "tool_calls"))
      fields["tool_calls"] = template_tool_calls(m["tool_calls"], param + ".tool_calls");
    if (role == "tool") {
      fields["tool_call_id"] = get_string(m, "tool_call_id", "");
      if (const json* n = field(m, "name"); n && n->is_string()) fields["name"] = *n;
    }
    conv.push_back(ChatMessage{role, content});
    extras.message_fields.push_back(std::move(fields));
  }
  // Media: the model's vision / audio tower encodes them (a model without one is a 400, never a
  // text-only answer); each message shows its media before its text, in the order given.
  std::vector<std::shared_ptr<SessionImage>> encoded;
  std::vector<size_t> encoded_of;  // per medium: encoded items up to its end (a clip may be several)
  bool any_audio = false, any_image = false;
  if (!decoded.empty()) {
    try {
      if (ctx.model.executor().device() != Device::CPU)
        throw Error(std::string("images and audio are not supported on the ") +
                    device_name(ctx.model.executor().device()) + " device yet (start the server with --device cpu)");
      const int H = ctx.model.model().config().hidden_size;
      for (auto& m : decoded) {
        if (m.kind == PromptMedium::Kind::Image) {
          any_image = true;
          if (!m.encoded.empty()) {
            encoded.push_back(m.encoded[0]);
          } else {
            encoded.push_back(encode_session_image(ctx.model.image_encoder(), m.image, H, ctx.pan_and_scan));
            if (ctx.media_cache != nullptr) ctx.media_cache->insert(m.source, {encoded.back()});
          }
        } else {
          any_audio = true;
          if (m.encoded.empty()) {
            m.encoded = encode_session_audio(ctx.model.audio_encoder(), m.audio, H);
            if (ctx.media_cache != nullptr && !m.source.empty()) ctx.media_cache->insert(m.source, m.encoded);
          }
          for (auto& seg : m.encoded) encoded.push_back(seg);
        }
        encoded_of.push_back(encoded.size());
      }
    } catch (const ApiError&) {
      throw;
    } catch (const Error& e) {
      throw ApiError(400, e.what(), "messages", any_audio ? "audio_not_supported" : "image_not_supported");
    }
    for (size_t i = 0, k = 0; i < conv.size(); ++i) {
      const size_t end = images_of[i] == 0 ? 0 : encoded_of[images_of[i] - 1];
      for (; k < end; ++k) conv[i].images.push_back(encoded[k]);
    }
  }
  try {
    PromptEncoder::Rendered rendered = ctx.encoder.render(conv, true, &extras);
    if (any_audio) {
      const ImageEncoder* ie = any_image ? &ctx.model.image_encoder() : nullptr;
      const AudioEncoder* ae = &ctx.model.audio_encoder();
      std::vector<std::shared_ptr<const SessionImage>> items(encoded.begin(), encoded.end());
      expand_rendered_media(ie, ae, rendered.text, rendered.content, items);
      r.prompt = ctx.encoder.encode(rendered.text, rendered.content, std::string::npos, add_bos);
      const auto blocks = media_blocks(items);  // pan-and-scan crops are runs of their own
      const std::vector<int> starts = media_placeholder_runs(ie, ae, r.prompt, blocks);
      for (size_t k = 0; k < blocks.size(); ++k) r.media.push_back(MediaRun{starts[k], blocks[k]});
    } else if (!encoded.empty()) {
      const ImageEncoder& enc = ctx.model.image_encoder();
      std::vector<int> counts, crops, block_counts;
      for (const auto& im : encoded) {
        counts.push_back(im->n);
        crops.push_back(static_cast<int>(im->crops.size()));
      }
      const auto blocks = media_blocks({encoded.begin(), encoded.end()});
      for (const auto& b : blocks) block_counts.push_back(b->n);
      expand_rendered_markers(enc, rendered.text, rendered.content, counts, nullptr, &crops);
      r.prompt = ctx.encoder.encode(rendered.text, rendered.content, std::string::npos, add_bos);
      const std::vector<int> starts = image_placeholder_runs(enc, r.prompt, block_counts);
      for (size_t k = 0; k < blocks.size(); ++k) r.media.push_back(MediaRun{starts[k], blocks[k]});
    } else {
      r.prompt = ctx.encoder.encode(rendered.text, rendered.content, std::string::npos, add_bos);
    }
    if (draft_end != nullptr) {  // tokens up to the end of the last message's content
      *draft_end = r.prompt.size();
      if (!rendered.content.empty())
        *draft_end = ctx.encoder.encode(rendered.text, rendered.content, rendered.content.back().second, add_bos).size();
      for (const MediaRun& m : r.media)  // never inside a run (a draft prefills whole media)
        if (static_cast<size_t>(m.begin) < *draft_end && *draft_end < static_cast<size_t>(m.begin + m.image->n))
          *draft_end = static_cast<size_t>(m.begin);
    }
  } catch (const ApiError&) {
    throw;
  } catch (const Error& e) {
    bad("messages", std::string("the chat template rejected the messages: ") + e.what());
  }
  std::optional<int64_t> mt = get_int(b, "max_completion_tokens", 1, 1 << 30);
  if (!mt) mt = get_int(b, "max_tokens", 1, 1 << 30);
  fit_context(r, ctx, mt);
  return r;
}

GenRequest parse_completion_request(const json& b, const RequestContext& ctx) {
  GenRequest r;
  r.kind = GenRequest::Kind::Completion;
  parse_common(b, ctx, r);
  if (get_bool(b, "echo", false)) bad("echo", "echo is not supported");
  if (field(b, "suffix")) bad("suffix", "suffix is not supported");
  const json* p = field(b, "prompt");
  if (!p) bad("prompt", "'prompt' is required");
  std::string text;
  if (p->is_string()) {
    text = p->get<std::string>();
  } else if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) {
    text = (*p)[0].get<std::string>();
  } else {
    bad("prompt", "'prompt' must be a string (or an array of one string)");
  }
  if (text.empty()) bad("prompt", "'prompt' must not be empty");
  r.prompt = ctx.model.encode_prompt(text, /*no_bos=*/!get_bool(b, "add_bos", true));
  fit_context(r, ctx, get_int(b, "max_tokens", 0, 1 << 30).value_or(16));
  if (r.max_tokens == 0) bad("max_tokens", "'max_tokens' must be at least 1");
  return r;
}

}  // namespace eg::server
