// Hugging Face config.json <-> ModelConfig for the Llama family ("llama", "qwen3",
// "qwen3_moe") and the DeepSeek-V3 family ("deepseek_v3", "kimi_k2").
// Defaults follow transformers' LlamaConfig / Qwen3Config where a field is optional there.

#include <charconv>
#include <cmath>
#include <limits>

#include "loader_hf_config.h"
#include "spindle/core/error.h"
#include "spindle/engine/loader.h"

namespace spindle::engine {
namespace {

using json = nlohmann::json;

// Typed access to config.json fields; JSON null counts as absent (HF writes null for unset).
class ConfigFields {
 public:
  ConfigFields(const json& j, const std::string& source) : j_(j), source_(source) {}

  const json* get(const char* key) const {
    auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }

  std::optional<int64_t> opt_int(const char* key) const {
    const json* v = get(key);
    if (!v) return std::nullopt;
    SPINDLE_CHECK(v->is_number_integer(), format, "{}: field '{}' must be an integer, got {} ({})",
                  source_, key, v->dump(), v->type_name());
    SPINDLE_CHECK(!v->is_number_unsigned() || v->get<uint64_t>() <= uint64_t(INT64_MAX), format,
                  "{}: field '{}' = {} is out of range", source_, key, v->dump());
    return v->get<int64_t>();
  }

  int64_t req_int(const char* key) const {
    auto v = opt_int(key);
    SPINDLE_CHECK(v.has_value(), format, "{}: missing required field '{}'", source_, key);
    return *v;
  }

  std::optional<double> opt_num(const char* key) const {
    const json* v = get(key);
    if (!v) return std::nullopt;
    SPINDLE_CHECK(v->is_number(), format, "{}: field '{}' must be a number, got {} ({})", source_,
                  key, v->dump(), v->type_name());
    const double d = v->get<double>();
    SPINDLE_CHECK(std::isfinite(d) && std::fabs(d) < 3e38, format,
                  "{}: field '{}' = {} is out of range", source_, key, v->dump());
    return d;
  }

  std::optional<bool> opt_bool(const char* key) const {
    const json* v = get(key);
    if (!v) return std::nullopt;
    SPINDLE_CHECK(v->is_boolean(), format, "{}: field '{}' must be true or false, got {}", source_,
                  key, v->dump());
    return v->get<bool>();
  }

  std::optional<std::string> opt_str(const char* key) const {
    const json* v = get(key);
    if (!v) return std::nullopt;
    SPINDLE_CHECK(v->is_string(), format, "{}: field '{}' must be a string, got {}", source_, key,
                  v->dump());
    return v->get<std::string>();
  }

  // bos/eos: an int, or a list of ints (Llama 3 lists several eos ids; the first is used).
  std::optional<int32_t> opt_token_id(const char* key) const {
    const json* v = get(key);
    if (!v) return std::nullopt;
    if (v->is_array()) {
      if (v->empty()) return std::nullopt;
      v = &(*v)[0];
    }
    SPINDLE_CHECK(v->is_number_unsigned() && v->get<uint64_t>() <= uint64_t(INT32_MAX), format,
                  "{}: field '{}' must be a token id (non-negative integer) or a list of "
                  "them, got {}",
                  source_, key, v->dump());
    return int32_t(v->get<uint64_t>());
  }

 private:
  const json& j_;
  const std::string& source_;
};

Arch parse_arch(const ConfigFields& f, const std::string& source) {
  if (auto mt = f.opt_str("model_type")) {
    if (*mt == "llama") return Arch::llama;
    if (*mt == "qwen3") return Arch::qwen3;
    if (*mt == "qwen3_moe") return Arch::qwen3_moe;
    if (*mt == "deepseek_v3" || *mt == "kimi_k2") return Arch::deepseek_v3;
    SPINDLE_THROW(unsupported,
                  "{}: model_type '{}' is not supported (supported: llama, qwen3, qwen3_moe, "
                  "deepseek_v3, kimi_k2)",
                  source, *mt);
  }
  const json* arch = f.get("architectures");
  SPINDLE_CHECK(arch != nullptr, format,
                "{}: neither 'model_type' nor 'architectures' says which model this is", source);
  SPINDLE_CHECK(arch->is_array() && !arch->empty() && (*arch)[0].is_string(), format,
                "{}: 'architectures' must be a list of class names, got {}", source, arch->dump());
  const std::string name = (*arch)[0].get<std::string>();
  if (name == "LlamaForCausalLM") return Arch::llama;
  if (name == "Qwen3ForCausalLM") return Arch::qwen3;
  if (name == "Qwen3MoeForCausalLM") return Arch::qwen3_moe;
  if (name == "DeepseekV3ForCausalLM") return Arch::deepseek_v3;
  SPINDLE_THROW(unsupported,
                "{}: architecture '{}' is not supported (supported: LlamaForCausalLM, "
                "Qwen3ForCausalLM, Qwen3MoeForCausalLM, DeepseekV3ForCausalLM)",
                source, name);
}

std::optional<RopeScaling> parse_rope_scaling(const json& j, const std::string& source) {
  auto it = j.find("rope_scaling");
  if (it == j.end() || it->is_null()) return std::nullopt;
  SPINDLE_CHECK(it->is_object(), format, "{}: 'rope_scaling' must be an object or null, got {}",
                source, it->dump());
  const std::string where = source + " rope_scaling";
  ConfigFields f(*it, where);
  auto type = f.opt_str("rope_type");
  if (!type) type = f.opt_str("type");
  SPINDLE_CHECK(type.has_value(), format, "{}: missing 'rope_type'", where);
  if (*type == "default") return std::nullopt;
  SPINDLE_CHECK(*type == "llama3" || *type == "yarn", unsupported,
                "{}: rope scaling type '{}' is not supported (supported: llama3, yarn, default)",
                where, *type);
  RopeScaling s;
  if (*type == "yarn") {
    s.type = RopeScalingType::yarn;
    auto factor = f.opt_num("factor");
    SPINDLE_CHECK(factor.has_value() && *factor >= 1.0, format,
                  "{}: yarn scaling needs field 'factor' >= 1", where);
    s.factor = float(*factor);
    auto orig = f.opt_int("original_max_position_embeddings");
    SPINDLE_CHECK(orig.has_value() && *orig > 0, format,
                  "{}: yarn scaling needs field 'original_max_position_embeddings' > 0", where);
    s.original_max_position = *orig;
    s.beta_fast = float(f.opt_num("beta_fast").value_or(32.0));
    s.beta_slow = float(f.opt_num("beta_slow").value_or(1.0));
    s.mscale = float(f.opt_num("mscale").value_or(0.0));
    s.mscale_all_dim = float(f.opt_num("mscale_all_dim").value_or(0.0));
    if (auto af = f.opt_num("attention_factor")) s.attention_factor = float(*af);
    s.truncate = f.opt_bool("truncate").value_or(true);
    SPINDLE_CHECK(
        s.beta_fast > s.beta_slow && s.beta_slow > 0 && s.mscale >= 0 && s.mscale_all_dim >= 0,
        format,
        "{}: yarn scaling needs beta_fast > beta_slow > 0 and mscale, mscale_all_dim "
        ">= 0; got {} / {} / {} / {}",
        where, s.beta_fast, s.beta_slow, s.mscale, s.mscale_all_dim);
    return s;
  }
  auto req = [&](const char* key) {
    auto v = f.opt_num(key);
    SPINDLE_CHECK(v.has_value(), format, "{}: llama3 scaling needs field '{}'", where, key);
    return *v;
  };
  s.factor = float(req("factor"));
  s.low_freq_factor = float(req("low_freq_factor"));
  s.high_freq_factor = float(req("high_freq_factor"));
  auto orig = f.opt_int("original_max_position_embeddings");
  SPINDLE_CHECK(orig.has_value(), format,
                "{}: llama3 scaling needs field 'original_max_position_embeddings'", where);
  s.original_max_position = *orig;
  SPINDLE_CHECK(s.factor > 0 && s.low_freq_factor > 0 && s.high_freq_factor > s.low_freq_factor &&
                    s.original_max_position > 0,
                format,
                "{}: llama3 scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor and "
                "original_max_position_embeddings > 0; got factor {}, low {}, high {}, original {}",
                where, s.factor, s.low_freq_factor, s.high_freq_factor, s.original_max_position);
  return s;
}

// DeepseekV3Config's fields (MLA and DeepSeek MoE), with transformers' defaults where one is
// absent. Variants Spindle does not run are refused by name: V2's softmax router and greedy
// group choice, MoE on every n-th layer.
void parse_deepseek(const ConfigFields& f, const std::string& source, ModelConfig& c) {
  MlaConfig& a = c.mla;
  a.q_lora_rank = f.opt_int("q_lora_rank").value_or(0);  // null (V2-Lite) = no query latent
  a.kv_lora_rank = f.opt_int("kv_lora_rank").value_or(512);
  a.qk_nope_head_dim = f.opt_int("qk_nope_head_dim").value_or(128);
  a.qk_rope_head_dim = f.opt_int("qk_rope_head_dim").value_or(64);
  a.v_head_dim = f.opt_int("v_head_dim").value_or(128);
  a.rope_interleave = f.opt_bool("rope_interleave").value_or(true);
  c.mtp_layers = f.opt_int("num_nextn_predict_layers").value_or(0);
  SPINDLE_CHECK(c.mtp_layers >= 0 && c.mtp_layers <= 16, invalid_argument,
                "{}: num_nextn_predict_layers must be in [0, 16], got {}", source, c.mtp_layers);
  c.head_dim = a.qk_head_dim();
  c.n_kv_heads = c.n_heads;  // MLA: every head has its own expanded key and value

  MoeConfig& m = c.moe;
  m.n_experts = f.opt_int("n_routed_experts").value_or(0);
  if (m.n_experts == 0) return;
  m.top_k = f.opt_int("num_experts_per_tok").value_or(8);
  m.expert_dim = f.opt_int("moe_intermediate_size").value_or(2048);
  m.n_shared_experts = f.opt_int("n_shared_experts").value_or(1);
  m.routed_scaling = float(f.opt_num("routed_scaling_factor").value_or(2.5));
  m.n_group = f.opt_int("n_group").value_or(8);
  m.topk_group = f.opt_int("topk_group").value_or(4);
  m.first_dense = f.opt_int("first_k_dense_replace").value_or(3);
  m.norm_topk = f.opt_bool("norm_topk_prob").value_or(true);
  m.scoring = RouterScoring::sigmoid;
  m.correction_bias = true;
  const std::string scoring = f.opt_str("scoring_func").value_or("sigmoid");
  SPINDLE_CHECK(scoring == "sigmoid", unsupported,
                "{}: scoring_func '{}' is not supported for deepseek_v3 (supported: sigmoid)",
                source, scoring);
  const std::string method = f.opt_str("topk_method").value_or("noaux_tc");
  SPINDLE_CHECK(method == "noaux_tc", unsupported,
                "{}: topk_method '{}' is not supported (supported: noaux_tc, DeepSeek-V3's "
                "group-limited top-k over sigmoid + e_score_correction_bias)",
                source, method);
  const int64_t freq = f.opt_int("moe_layer_freq").value_or(1);
  SPINDLE_CHECK(freq == 1, unsupported,
                "{}: moe_layer_freq {} is not supported (supported: 1, every layer from "
                "first_k_dense_replace on is MoE)",
                source, freq);
}

// Qwen3MoeConfig's fields, with transformers' defaults where one is absent.
void parse_moe(const ConfigFields& f, const std::string& source, MoeConfig& m) {
  m.n_experts = f.opt_int("num_experts").value_or(128);
  m.top_k = f.opt_int("num_experts_per_tok").value_or(8);
  m.expert_dim = f.opt_int("moe_intermediate_size").value_or(768);
  m.sparse_step = f.opt_int("decoder_sparse_step").value_or(1);
  m.norm_topk = f.opt_bool("norm_topk_prob").value_or(false);
  m.aux_loss_coef = float(f.opt_num("router_aux_loss_coef").value_or(0.001));
  m.router_aux_loss = f.opt_bool("output_router_logits").value_or(false);
  if (const json* d = f.get("mlp_only_layers")) {
    SPINDLE_CHECK(d->is_array(), format,
                  "{}: 'mlp_only_layers' must be a list of layer indices, got {}", source,
                  d->dump());
    for (const json& v : *d) {
      SPINDLE_CHECK(v.is_number_integer(), format,
                    "{}: 'mlp_only_layers' must hold layer indices, got {}", source, v.dump());
      m.dense_layers.push_back(v.get<int64_t>());
    }
  }
}

// The shortest decimal that reads back as the same float, as a JSON number: 1e-5f is
// written "1e-05", not "9.999999747378752e-06".
double json_float(float v) {
  char buf[32];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  double d = v;
  std::from_chars(buf, res.ptr, d);
  return d;
}

}  // namespace

ModelConfig parse_hf_config(const std::string& json_text, const std::string& source) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& ex) {
    SPINDLE_THROW(format, "{}: not valid JSON: {}", source, ex.what());
  }
  SPINDLE_CHECK(j.is_object(), format, "{}: config must be a JSON object, got {}", source,
                j.type_name());
  ConfigFields f(j, source);

  ModelConfig c;
  c.arch = parse_arch(f, source);
  c.dim = f.req_int("hidden_size");
  c.hidden_dim = f.req_int("intermediate_size");
  c.n_layers = f.req_int("num_hidden_layers");
  c.n_heads = f.req_int("num_attention_heads");
  c.n_kv_heads = f.opt_int("num_key_value_heads").value_or(c.n_heads);
  if (c.arch == Arch::deepseek_v3) {
    // parse_deepseek sets it from the MLA dims (HF's head_dim there is qk_rope_head_dim).
  } else if (auto hd = f.opt_int("head_dim")) {
    c.head_dim = *hd;
  } else {
    SPINDLE_CHECK(c.n_heads > 0 && c.dim % c.n_heads == 0, format,
                  "{}: hidden_size {} is not a multiple of num_attention_heads {}, and head_dim "
                  "is not given",
                  source, c.dim, c.n_heads);
    c.head_dim = c.dim / c.n_heads;
  }
  c.vocab_size = f.req_int("vocab_size");
  c.max_seq_len = f.opt_int("max_position_embeddings")
                      .value_or(c.arch == Arch::llama         ? 2048
                                : c.arch == Arch::deepseek_v3 ? 4096
                                                              : 32768);
  c.rope_theta = float(f.opt_num("rope_theta").value_or(10000.0));
  c.rope_scaling = parse_rope_scaling(j, source);
  c.rms_eps = float(f.opt_num("rms_norm_eps").value_or(1e-6));
  c.tie_embeddings = f.opt_bool("tie_word_embeddings").value_or(false);

  const std::string act = f.opt_str("hidden_act").value_or("silu");
  SPINDLE_CHECK(act == "silu", unsupported,
                "{}: hidden_act '{}' is not supported (Llama-family SwiGLU needs silu)", source,
                act);
  SPINDLE_CHECK(!f.opt_bool("attention_bias").value_or(false), unsupported,
                "{}: attention_bias true (biases on q/k/v/o projections) is not supported", source);
  SPINDLE_CHECK(!f.opt_bool("mlp_bias").value_or(false), unsupported,
                "{}: mlp_bias true (biases on MLP projections) is not supported", source);
  SPINDLE_CHECK(!f.opt_bool("use_sliding_window").value_or(false), unsupported,
                "{}: use_sliding_window true is not supported", source);
  if (const json* q = f.get("quantization_config"); q != nullptr && !q->is_null()) {
    const std::string method =
        q->is_object() && q->contains("quant_method") && (*q)["quant_method"].is_string()
            ? (*q)["quant_method"].get<std::string>()
            : q->dump();
    SPINDLE_THROW(unsupported,
                  "{}: quantization_config ({}) is not supported: Spindle loads f32, bf16 and "
                  "f16 safetensors (dequantize the checkpoint first, e.g. DeepSeek's "
                  "fp8_cast_bf16.py)",
                  source, method);
  }

  if (c.arch == Arch::qwen3_moe) parse_moe(f, source, c.moe);
  if (c.arch == Arch::deepseek_v3) parse_deepseek(f, source, c);

  // Missing ids keep the defaults, clamped into tiny vocabularies; given ids must fit.
  const int64_t last_id = std::max<int64_t>(c.vocab_size - 1, 0);
  c.bos_id = f.opt_token_id("bos_token_id").value_or(int32_t(std::min<int64_t>(c.bos_id, last_id)));
  c.eos_id = f.opt_token_id("eos_token_id").value_or(int32_t(std::min<int64_t>(c.eos_id, last_id)));

  auto name = f.opt_str("_name_or_path");
  c.name = name && !name->empty() ? *name : source;
  c.validate(source);
  return c;
}

namespace detail {

json hf_config_object(const ModelConfig& c) {
  const char* cls = c.arch == Arch::qwen3         ? "Qwen3ForCausalLM"
                    : c.arch == Arch::qwen3_moe   ? "Qwen3MoeForCausalLM"
                    : c.arch == Arch::deepseek_v3 ? "DeepseekV3ForCausalLM"
                                                  : "LlamaForCausalLM";
  json j = {
      {"architectures", {cls}},
      {"model_type", arch_name(c.arch)},
      {"_name_or_path", c.name},
      {"hidden_size", c.dim},
      {"intermediate_size", c.hidden_dim},
      {"num_hidden_layers", c.n_layers},
      {"num_attention_heads", c.n_heads},
      {"num_key_value_heads", c.n_kv_heads},
      {"head_dim", c.head_dim},
      {"vocab_size", c.vocab_size},
      {"max_position_embeddings", c.max_seq_len},
      {"rope_theta", json_float(c.rope_theta)},
      {"rms_norm_eps", json_float(c.rms_eps)},
      {"tie_word_embeddings", c.tie_embeddings},
      {"bos_token_id", c.bos_id},
      {"eos_token_id", c.eos_id},
      {"hidden_act", "silu"},
      {"attention_bias", false},
      {"mlp_bias", false},
      {"rope_scaling", nullptr},
  };
  if (c.arch == Arch::qwen3_moe) {
    const MoeConfig& m = c.moe;
    j["num_experts"] = m.n_experts;
    j["num_experts_per_tok"] = m.top_k;
    j["moe_intermediate_size"] = m.expert_dim;
    j["decoder_sparse_step"] = m.sparse_step;
    j["mlp_only_layers"] = m.dense_layers;
    j["norm_topk_prob"] = m.norm_topk;
    j["router_aux_loss_coef"] = json_float(m.aux_loss_coef);
    j["output_router_logits"] = m.router_aux_loss;
  }
  if (c.arch == Arch::deepseek_v3) {
    const MlaConfig& a = c.mla;
    j.erase("head_dim");  // DeepseekV3Config derives it
    j["q_lora_rank"] = a.q_lora_rank > 0 ? json(a.q_lora_rank) : json(nullptr);
    j["kv_lora_rank"] = a.kv_lora_rank;
    j["qk_nope_head_dim"] = a.qk_nope_head_dim;
    j["qk_rope_head_dim"] = a.qk_rope_head_dim;
    j["v_head_dim"] = a.v_head_dim;
    j["rope_interleave"] = a.rope_interleave;
    j["num_nextn_predict_layers"] = 0;  // MTP modules are not loaded, so never written
    const MoeConfig& m = c.moe;
    j["n_routed_experts"] = m.n_experts > 0 ? json(m.n_experts) : json(nullptr);
    if (m.n_experts > 0) {
      j["num_experts_per_tok"] = m.top_k;
      j["moe_intermediate_size"] = m.expert_dim;
      j["n_shared_experts"] = m.n_shared_experts;
      j["routed_scaling_factor"] = json_float(m.routed_scaling);
      j["n_group"] = m.n_group;
      j["topk_group"] = m.topk_group;
      j["first_k_dense_replace"] = m.first_dense;
      j["norm_topk_prob"] = m.norm_topk;
      j["scoring_func"] = "sigmoid";
      j["topk_method"] = "noaux_tc";
      j["moe_layer_freq"] = 1;
    }
  }
  if (c.rope_scaling && c.rope_scaling->type == RopeScalingType::yarn) {
    const RopeScaling& s = *c.rope_scaling;
    j["rope_scaling"] = {{"rope_type", "yarn"},
                         {"factor", json_float(s.factor)},
                         {"original_max_position_embeddings", s.original_max_position},
                         {"beta_fast", json_float(s.beta_fast)},
                         {"beta_slow", json_float(s.beta_slow)},
                         {"truncate", s.truncate}};
    if (s.mscale > 0) j["rope_scaling"]["mscale"] = json_float(s.mscale);
    if (s.mscale_all_dim > 0) j["rope_scaling"]["mscale_all_dim"] = json_float(s.mscale_all_dim);
    if (s.attention_factor) j["rope_scaling"]["attention_factor"] = json_float(*s.attention_factor);
  } else if (c.rope_scaling) {
    const RopeScaling& s = *c.rope_scaling;
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", json_float(s.factor)},
                         {"low_freq_factor", json_float(s.low_freq_factor)},
                         {"high_freq_factor", json_float(s.high_freq_factor)},
                         {"original_max_position_embeddings", s.original_max_position}};
  }
  return j;
}

const char* hf_torch_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "float32";
    case DType::f16:
      return "float16";
    case DType::bf16:
      return "bfloat16";
    default:
      break;
  }
  SPINDLE_THROW(invalid_argument, "dtype {} is not a floating dtype for model weights",
                dtype_name(dtype));
}

}  // namespace detail

std::string hf_config_json(const ModelConfig& config) {
  // Paths in _name_or_path need not be UTF-8; invalid bytes become U+FFFD rather than throw.
  return detail::hf_config_object(config).dump(2, ' ', false, json::error_handler_t::replace) +
         "\n";
}

}  // namespace spindle::engine
