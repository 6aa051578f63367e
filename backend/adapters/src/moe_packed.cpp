#include "spindle/adapters/moe_packed.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "spindle/core/error.h"
#include "spindle/engine/safetensors.h"

namespace spindle::adapters {
namespace {

constexpr const char* kLayoutKey = "spindle_moe_layout";

Shape a_shape(const MoeDims& d, int64_t r, MoeProj p) { return {d.n_experts, r, d.proj_dims(p).first}; }
Shape b_shape(const MoeDims& d, int64_t r, MoeProj p) { return {d.n_experts, d.proj_dims(p).second, r}; }

std::map<std::string, std::string> metadata_of(const PackedMoeLora& p, const char* layout) {
  return {{kLayoutKey, layout},
          {"rank", std::to_string(p.rank)},
          {"lora_alpha", fmt::format("{}", p.alpha)},
          {"use_rslora", p.use_rslora ? "true" : "false"},
          {"n_experts", std::to_string(p.dims.n_experts)}};
}

const std::string& meta_field(const engine::SafetensorsFile& f, const std::string& key) {
  auto it = f.metadata().find(key);
  SPINDLE_CHECK(it != f.metadata().end(), format, "{}: __metadata__ lacks '{}'",
                f.path().string(), key);
  return it->second;
}

MoeAdapterParams params_of(const engine::SafetensorsFile& f, const MoeDims& dims,
                           const char* layout) {
  SPINDLE_CHECK(meta_field(f, kLayoutKey) == layout, format,
                "{}: MoE layout is '{}', expected '{}'", f.path().string(),
                meta_field(f, kLayoutKey), layout);
  MoeAdapterParams p;
  try {
    p.rank = std::stoll(meta_field(f, "rank"));
    p.alpha = std::stof(meta_field(f, "lora_alpha"));
  } catch (const std::logic_error&) {
    SPINDLE_THROW(format, "{}: __metadata__ rank/lora_alpha are not numbers", f.path().string());
  }
  p.use_rslora = meta_field(f, "use_rslora") == "true";
  const int64_t experts = std::stoll(meta_field(f, "n_experts"));
  SPINDLE_CHECK(experts == dims.n_experts, format,
                "{}: adapter has {} experts, base has {} (hint: maybe wrong base model?)",
                f.path().string(), experts, dims.n_experts);
  SPINDLE_CHECK(p.rank > 0, format, "{}: rank {} must be positive", f.path().string(), p.rank);
  return p;
}

void check_shape(const std::string& name, const Shape& got, const Shape& want,
                 const std::string& source) {
  SPINDLE_CHECK(got == want, format, "{}: tensor '{}' has shape {}, expected {}", source, name,
                shape_str(got), shape_str(want));
}

// Reads an F32 tensor straight into dst (numel floats), checking its shape first.
void read_into(const engine::SafetensorsFile& f, const std::string& name, const Shape& want,
               float* dst) {
  const engine::SafetensorsEntry* e = f.find(name);
  SPINDLE_CHECK(e != nullptr, not_found, "{}: tensor '{}' is missing", f.path().string(), name);
  check_shape(name, e->shape, want, f.path().string());
  if (e->known_dtype == DType::f32) {
    f.read_raw(*e, dst);
  } else {
    Tensor t = f.read_f32(*e);
    std::memcpy(dst, t.data(), t.bytes());
  }
}

}  // namespace

const char* moe_proj_name(MoeProj proj) {
  switch (proj) {
    case MoeProj::gate: return "gate_proj";
    case MoeProj::up: return "up_proj";
    case MoeProj::down: return "down_proj";
  }
  return "?";
}

std::pair<int64_t, int64_t> MoeDims::proj_dims(MoeProj proj) const {
  if (proj == MoeProj::down) return {moe_intermediate, hidden};
  return {hidden, moe_intermediate};
}

void MoeDims::validate() const {
  SPINDLE_CHECK(n_layers > 0, invalid_argument, "MoE dims: n_layers {} must be positive", n_layers);
  SPINDLE_CHECK(n_experts > 0, invalid_argument, "MoE dims: n_experts {} must be positive",
                n_experts);
  SPINDLE_CHECK(hidden > 0, invalid_argument, "MoE dims: hidden {} must be positive", hidden);
  SPINDLE_CHECK(moe_intermediate > 0, invalid_argument,
                "MoE dims: moe_intermediate {} must be positive", moe_intermediate);
}

std::string moe_expert_tensor_name(int64_t layer, int64_t expert, MoeProj proj, LoraMatrix m) {
  return fmt::format("base_model.model.model.layers.{}.mlp.experts.{}.{}.lora_{}.weight", layer,
                     expert, moe_proj_name(proj), m == LoraMatrix::A ? "A" : "B");
}

std::string moe_packed_tensor_name(int64_t layer, MoeProj proj, LoraMatrix m) {
  return fmt::format("base_model.model.model.layers.{}.mlp.experts.{}.lora_{}.packed", layer,
                     moe_proj_name(proj), m == LoraMatrix::A ? "A" : "B");
}

size_t PackedMoeLora::bytes() const {
  size_t total = 0;
  for (const auto& layer : layers)
    for (const auto& p : layer) total += p.A.bytes() + p.B.bytes();
  return total;
}

void PackedMoeLora::validate(const std::string& source) const {
  dims.validate();
  SPINDLE_CHECK(rank > 0, format, "{}: rank {} must be positive", source, rank);
  SPINDLE_CHECK(int64_t(layers.size()) == dims.n_layers, format, "{}: {} layers, expected {}",
                source, layers.size(), dims.n_layers);
  for (int64_t l = 0; l < dims.n_layers; ++l) {
    for (MoeProj proj : kAllMoeProjs) {
      const auto& p = layers[size_t(l)][size_t(proj)];
      check_shape(moe_packed_tensor_name(l, proj, LoraMatrix::A), p.A.shape(),
                  a_shape(dims, rank, proj), source);
      check_shape(moe_packed_tensor_name(l, proj, LoraMatrix::B), p.B.shape(),
                  b_shape(dims, rank, proj), source);
    }
  }
}

PackedMoeLora PackedMoeLora::random(const MoeDims& dims, int64_t rank, float alpha,
                                    uint64_t seed, float a_range, float b_range) {
  dims.validate();
  PackedMoeLora out{dims, rank, alpha, false, {}};
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  auto uniform = [&s](float range) {  // xorshift64*: fast and reproducible
    s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
    const uint64_t x = s * 0x2545F4914F6CDD1Dull;
    return (float(x >> 40) / float(1 << 24) * 2.0f - 1.0f) * range;
  };
  out.layers.resize(size_t(dims.n_layers));
  for (auto& layer : out.layers) {
    for (MoeProj proj : kAllMoeProjs) {
      auto& p = layer[size_t(proj)];
      p.A = Tensor(a_shape(dims, rank, proj));
      p.B = Tensor(b_shape(dims, rank, proj));
      for (float& v : p.A.span()) v = uniform(a_range);
      for (float& v : p.B.span()) v = uniform(b_range);
    }
  }
  return out;
}

PeftTensorMap unpack_moe_to_peft(const PackedMoeLora& packed) {
  packed.validate("unpack_moe_to_peft");
  PeftTensorMap out;
  const int64_t r = packed.rank;
  for (int64_t l = 0; l < packed.dims.n_layers; ++l) {
    for (MoeProj proj : kAllMoeProjs) {
      const auto& p = packed.layers[size_t(l)][size_t(proj)];
      const auto [d_in, d_out] = packed.dims.proj_dims(proj);
      for (int64_t e = 0; e < packed.dims.n_experts; ++e) {
        out.emplace(moe_expert_tensor_name(l, e, proj, LoraMatrix::A),
                    Tensor::from({r, d_in}, p.A.span().subspan(size_t(e * r * d_in),
                                                               size_t(r * d_in))));
        out.emplace(moe_expert_tensor_name(l, e, proj, LoraMatrix::B),
                    Tensor::from({d_out, r}, p.B.span().subspan(size_t(e * d_out * r),
                                                                size_t(d_out * r))));
      }
    }
  }
  return out;
}

PackedMoeLora pack_moe_from_peft(const PeftTensorMap& tensors, const MoeDims& dims,
                                 const MoeAdapterParams& params, const std::string& source) {
  dims.validate();
  SPINDLE_CHECK(params.rank > 0, invalid_argument, "{}: rank {} must be positive", source,
                params.rank);
  PackedMoeLora out{dims, params.rank, params.alpha, params.use_rslora, {}};
  const int64_t r = params.rank;
  out.layers.resize(size_t(dims.n_layers));
  for (int64_t l = 0; l < dims.n_layers; ++l) {
    for (MoeProj proj : kAllMoeProjs) {
      auto& p = out.layers[size_t(l)][size_t(proj)];
      const auto [d_in, d_out] = dims.proj_dims(proj);
      p.A = Tensor(a_shape(dims, r, proj));
      p.B = Tensor(b_shape(dims, r, proj));
      for (int64_t e = 0; e < dims.n_experts; ++e) {
        for (LoraMatrix m : {LoraMatrix::A, LoraMatrix::B}) {
          const std::string name = moe_expert_tensor_name(l, e, proj, m);
          auto it = tensors.find(name);
          SPINDLE_CHECK(it != tensors.end(), not_found, "{}: tensor '{}' is missing", source, name);
          const bool is_a = m == LoraMatrix::A;
          const Shape want = is_a ? Shape{r, d_in} : Shape{d_out, r};
          check_shape(name, it->second.shape(), want, source);
          float* dst = is_a ? p.A.data() + e * r * d_in : p.B.data() + e * d_out * r;
          std::memcpy(dst, it->second.data(), it->second.bytes());
        }
      }
    }
  }
  return out;
}

void save_packed_moe(const PackedMoeLora& packed, const std::filesystem::path& path) {
  packed.validate(path.string());
  std::vector<engine::SafetensorsTensorIn> ins;
  for (int64_t l = 0; l < packed.dims.n_layers; ++l) {
    for (MoeProj proj : kAllMoeProjs) {
      const auto& p = packed.layers[size_t(l)][size_t(proj)];
      ins.push_back({moe_packed_tensor_name(l, proj, LoraMatrix::A), DType::f32, p.A.shape(),
                     p.A.data()});
      ins.push_back({moe_packed_tensor_name(l, proj, LoraMatrix::B), DType::f32, p.B.shape(),
                     p.B.data()});
    }
  }
  engine::write_safetensors(path, ins, metadata_of(packed, "packed"));
}

PackedMoeLora load_packed_moe(const std::filesystem::path& path, const MoeDims& dims) {
  dims.validate();
  engine::SafetensorsFile f(path);
  const MoeAdapterParams params = params_of(f, dims, "packed");
  PackedMoeLora out{dims, params.rank, params.alpha, params.use_rslora, {}};
  out.layers.resize(size_t(dims.n_layers));
  for (int64_t l = 0; l < dims.n_layers; ++l) {
    for (MoeProj proj : kAllMoeProjs) {
      auto& p = out.layers[size_t(l)][size_t(proj)];
      p.A = Tensor(a_shape(dims, params.rank, proj));
      p.B = Tensor(b_shape(dims, params.rank, proj));
      read_into(f, moe_packed_tensor_name(l, proj, LoraMatrix::A), p.A.shape(), p.A.data());
      read_into(f, moe_packed_tensor_name(l, proj, LoraMatrix::B), p.B.shape(), p.B.data());
    }
  }
  return out;
}

void save_per_expert_moe(const PackedMoeLora& packed, const std::filesystem::path& path) {
  const PeftTensorMap tensors = unpack_moe_to_peft(packed);
  std::vector<engine::SafetensorsTensorIn> ins;
  ins.reserve(tensors.size());
  for (const auto& [name, t] : tensors) ins.push_back({name, DType::f32, t.shape(), t.data()});
  engine::write_safetensors(path, ins, metadata_of(packed, "per_expert"));
}

PackedMoeLora load_per_expert_moe(const std::filesystem::path& path, const MoeDims& dims) {
  dims.validate();
  engine::SafetensorsFile f(path);
  const MoeAdapterParams params = params_of(f, dims, "per_expert");
  // One read and one allocation per tensor, as a PEFT loader does (in file order, so the
  // disk sees one forward sweep), then pack; pack_moe_from_peft names any missing tensor.
  std::vector<const engine::SafetensorsEntry*> order;
  order.reserve(f.entries().size());
  for (const auto& e : f.entries()) order.push_back(&e);
  std::sort(order.begin(), order.end(),
            [](const auto* a, const auto* b) { return a->data_begin < b->data_begin; });
  PeftTensorMap tensors;
  for (const engine::SafetensorsEntry* e : order) tensors.emplace(e->name, f.read_f32(*e));
  return pack_moe_from_peft(tensors, dims, params, path.string());
}

}  // namespace spindle::adapters
