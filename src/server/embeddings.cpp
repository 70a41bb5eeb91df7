#include "server/embeddings.h"

#include <algorithm>
#include <cstring>

#include "server/api_error.h"

namespace eg::server {

using nlohmann::json;

std::string base64_encode(const uint8_t* p, size_t n) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t b = (uint32_t{p[i]} << 16) | (i + 1 < n ? uint32_t{p[i + 1]} << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
    out += kAlphabet[(b >> 18) & 63];
    out += kAlphabet[(b >> 12) & 63];
    out += i + 1 < n ? kAlphabet[(b >> 6) & 63] : '=';
    out += i + 2 < n ? kAlphabet[b & 63] : '=';
  }
  return out;
}

EmbeddingRequest parse_embedding_request(const json& b, const embed::Embedder& e) {
  if (!b.is_object()) throw ApiError(400, "the request body must be a JSON object");
  EmbeddingRequest r;
  const auto in = b.find("input");
  if (in == b.end() || in->is_null()) throw ApiError(400, "'input' is required (a string or a list of strings)", "input");
  if (in->is_string()) {
    r.inputs.push_back(in->get<std::string>());
  } else if (in->is_array()) {
    if (in->empty()) throw ApiError(400, "'input' must not be an empty list", "input");
    if (in->size() > kMaxEmbeddingInputs)
      throw ApiError(400, "'input' has " + std::to_string(in->size()) + " items, more than " +
                              std::to_string(kMaxEmbeddingInputs), "input");
    for (const json& x : *in) {
      if (x.is_number_integer() || x.is_array())
        throw ApiError(400, "token-id inputs are not supported: send the text", "input");
      if (!x.is_string()) throw ApiError(400, "'input' items must be strings", "input");
      r.inputs.push_back(x.get<std::string>());
    }
  } else {
    throw ApiError(400, "'input' must be a string or a list of strings", "input");
  }
  if (const auto f = b.find("encoding_format"); f != b.end() && !f->is_null()) {
    if (!f->is_string() || (*f != "float" && *f != "base64"))
      throw ApiError(400, "'encoding_format' must be \"float\" or \"base64\"", "encoding_format");
    r.base64 = *f == "base64";
  }
  if (const auto d = b.find("dimensions"); d != b.end() && !d->is_null()) {
    if (!d->is_number_integer() || d->get<int64_t>() <= 0 || d->get<int64_t>() > (1 << 20))
      throw ApiError(400, "'dimensions' must be a positive integer", "dimensions");
    const int dim = static_cast<int>(d->get<int64_t>());
    const std::vector<int> dims = e.supported_dims();
    if (dims.empty()) {
      if (dim != e.full_dim())
        throw ApiError(400, "this model does not support 'dimensions' (its vectors have " + std::to_string(e.full_dim()) +
                                " values)", "dimensions");
    } else if (std::find(dims.begin(), dims.end(), dim) == dims.end()) {
      std::string list;
      for (int x : dims) list += (list.empty() ? "" : ", ") + std::to_string(x);
      throw ApiError(400, "'dimensions' " + std::to_string(dim) + " is not supported (this model: " + list + ")", "dimensions");
    }
    r.options.dim = dim == e.full_dim() ? 0 : dim;
  }
  if (const auto t = b.find("task"); t != b.end() && !t->is_null()) {
    if (!t->is_string()) throw ApiError(400, "'task' must be a string (a prompt name of the model)", "task");
    r.options.task = t->get<std::string>();
    const auto names = e.task_names();
    if (!r.options.task.empty() && std::find(names.begin(), names.end(), r.options.task) == names.end()) {
      std::string list;
      for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
      throw ApiError(400, "unknown task '" + r.options.task + "' (this model's prompts: " + (list.empty() ? "none" : list) + ")",
                     "task");
    }
  }
  if (const auto m = b.find("model"); m != b.end() && !m->is_null() && !m->is_string())
    throw ApiError(400, "'model' must be a string", "model");
  return r;
}

json embedding_response(const std::vector<embed::Embedding>& out, bool base64, const std::string& model_id) {
  json data = json::array();
  int64_t tokens = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    json item = {{"object", "embedding"}, {"index", i}};
    const std::vector<float>& v = out[i].vector;
    if (base64) {
      std::vector<uint8_t> bytes(v.size() * 4);
      for (size_t k = 0; k < v.size(); ++k) {  // little-endian float32, whatever the host order
        uint32_t u;
        std::memcpy(&u, &v[k], 4);
        for (int j = 0; j < 4; ++j) bytes[4 * k + j] = static_cast<uint8_t>(u >> (8 * j));
      }
      item["embedding"] = base64_encode(bytes.data(), bytes.size());
    } else {
      item["embedding"] = v;
    }
    data.push_back(std::move(item));
    tokens += out[i].tokens;
  }
  return json{{"object", "list"}, {"data", std::move(data)}, {"model", model_id},
              {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}};
}

}  // namespace eg::server
