#include "vision/vision_config.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_util.h"

namespace eg::vision {

namespace {

using json = nlohmann::json;

struct Reader {
  const json& j;
  std::string origin;
  int get_int(const char* k, int def) const {
    if (!j.contains(k) || j[k].is_null()) return def;
    if (!j[k].is_number_integer()) throw Error(origin + ": \"" + k + "\" must be an integer");
    return j[k].get<int>();
  }
  double get_num(const char* k, double def) const {
    if (!j.contains(k) || j[k].is_null()) return def;
    if (!j[k].is_number()) throw Error(origin + ": \"" + k + "\" must be a number");
    return j[k].get<double>();
  }
  bool get_bool(const char* k, bool def) const {
    if (!j.contains(k) || j[k].is_null()) return def;
    if (!j[k].is_boolean()) throw Error(origin + ": \"" + k + "\" must be true or false");
    return j[k].get<bool>();
  }
  std::string get_str(const char* k, const std::string& def) const {
    if (!j.contains(k) || j[k].is_null()) return def;
    if (!j[k].is_string()) throw Error(origin + ": \"" + k + "\" must be a string");
    return j[k].get<std::string>();
  }
};

int positive(int v, const char* what, const std::string& origin) {
  if (v <= 0) throw Error(origin + ": vision_config." + what + " must be > 0");
  return v;
}

}  // namespace

VisionConfig load_vision_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  const json root = json::parse(read_file(path), nullptr, false);
  if (root.is_discarded() || !root.is_object()) throw Error(path + ": not a JSON object");
  VisionConfig c;
  if (!root.contains("vision_config") || root["vision_config"].is_null()) return c;
  const json& v = root["vision_config"];
  if (!v.is_object()) throw Error(path + ": vision_config must be an object");
  const Reader top{root, path}, r{v, path + " vision_config"};
  const std::string model_type = top.get_str("model_type", "");
  const json text = root.contains("text_config") && root["text_config"].is_object() ? root["text_config"] : json::object();
  c.text_hidden = positive(Reader{text, path + " text_config"}.get_int("hidden_size", 0), "(text) hidden_size", path);
  if (model_type == "gemma3") {
    c.kind = TowerKind::Siglip;
    c.hidden = positive(r.get_int("hidden_size", 768), "hidden_size", path);
    c.intermediate = positive(r.get_int("intermediate_size", 3072), "intermediate_size", path);
    c.layers = positive(r.get_int("num_hidden_layers", 12), "num_hidden_layers", path);
    c.heads = positive(r.get_int("num_attention_heads", 12), "num_attention_heads", path);
    c.patch_size = positive(r.get_int("patch_size", 16), "patch_size", path);
    c.image_size = positive(r.get_int("image_size", 224), "image_size", path);
    c.channels = r.get_int("num_channels", 3);
    c.eps = static_cast<float>(r.get_num("layer_norm_eps", 1e-6));
    if (c.hidden % c.heads != 0) throw Error(path + ": vision hidden_size is not a multiple of the heads");
    c.head_dim = c.hidden / c.heads;
    c.kv_heads = c.heads;
    if (c.channels != 3) throw Error(path + ": vision num_channels must be 3");
    if (c.image_size % c.patch_size != 0) throw Error(path + ": vision image_size is not a multiple of patch_size");
    if (r.get_bool("vision_use_head", false)) throw Error(path + ": vision_use_head (attention pooling) is not supported");
    const std::string act = r.get_str("hidden_act", "gelu_pytorch_tanh");
    if (act != "gelu_pytorch_tanh") throw Error(path + ": vision hidden_act '" + act + "' is not supported");
    c.mm_tokens_per_image = positive(top.get_int("mm_tokens_per_image", 256), "mm_tokens_per_image", path);
    const int side = c.image_size / c.patch_size;
    const int tok_side = static_cast<int>(std::lround(std::sqrt(c.mm_tokens_per_image)));
    if (tok_side * tok_side != c.mm_tokens_per_image || side % tok_side != 0)
      throw Error(path + ": mm_tokens_per_image " + std::to_string(c.mm_tokens_per_image) +
                  " does not pool the " + std::to_string(side) + "x" + std::to_string(side) + " patch grid");
    c.boi_id = top.get_int("boi_token_index", top.get_int("boi_token_id", 255999));
    c.eoi_id = top.get_int("eoi_token_index", top.get_int("eoi_token_id", 256000));
    c.image_token_id = top.get_int("image_token_index", top.get_int("image_token_id", 262144));
  } else if (model_type == "gemma4") {
    c.kind = TowerKind::Gemma4;
    c.hidden = positive(r.get_int("hidden_size", 768), "hidden_size", path);
    c.intermediate = positive(r.get_int("intermediate_size", 3072), "intermediate_size", path);
    c.layers = positive(r.get_int("num_hidden_layers", 16), "num_hidden_layers", path);
    c.heads = positive(r.get_int("num_attention_heads", 12), "num_attention_heads", path);
    c.kv_heads = positive(r.get_int("num_key_value_heads", c.heads), "num_key_value_heads", path);
    c.head_dim = positive(r.get_int("head_dim", 64), "head_dim", path);
    c.patch_size = positive(r.get_int("patch_size", 16), "patch_size", path);
    c.pooling_kernel = positive(r.get_int("pooling_kernel_size", 3), "pooling_kernel_size", path);
    c.position_embedding_size = positive(r.get_int("position_embedding_size", 10240), "position_embedding_size", path);
    c.eps = static_cast<float>(r.get_num("rms_norm_eps", 1e-6));
    c.clipped_linears = r.get_bool("use_clipped_linears", false);
    c.standardize = r.get_bool("standardize", false);
    if (v.contains("rope_parameters") && v["rope_parameters"].is_object())
      c.rope_theta = static_cast<float>(Reader{v["rope_parameters"], path}.get_num("rope_theta", 100.0));
    c.boi_id = top.get_int("boi_token_id", 255999);
    c.eoi_id = top.get_int("eoi_token_id", 258882);
    c.image_token_id = top.get_int("image_token_id", 258880);
  } else {
    throw Error(path + ": vision_config in a '" + model_type + "' checkpoint is not supported");
  }
  return c;
}

}  // namespace eg::vision
