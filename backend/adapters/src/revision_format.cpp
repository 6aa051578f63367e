#include "spindle/adapters/revision_format.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>

#include "spindle/core/error.h"
#include "spindle/engine/safetensors.h"

namespace spindle::adapters {
namespace {

using engine::LoraTarget;
using json = nlohmann::json;

constexpr const char* kFormat = "lora-revision";
constexpr const char* kFormatVersion = "1";
constexpr int64_t kMaxLayers = 1 << 16;
constexpr int64_t kMaxRank = 1 << 16;

bool floating(DType d) {
  return d == DType::f32 || d == DType::f16 || d == DType::bf16;
}

std::string targets_csv(const std::vector<LoraTarget>& targets) {
  std::string s;
  for (LoraTarget t : targets) {
    if (!s.empty()) s += ',';
    s += engine::lora_target_name(t);
  }
  return s;
}

// (layer, target, 'A'|'B') for every tensor name a revision with `meta` may hold; 'a'|'b' for
// the packed routed-experts tensors (engine::lora_expert_param_name) of gate / up / down.
using Slot = std::tuple<int64_t, LoraTarget, char>;
std::map<std::string, Slot> expected_keys(int64_t n_layers,
                                          const std::vector<LoraTarget>& targets) {
  std::map<std::string, Slot> keys;
  for (LoraTarget t : targets) {
    const int64_t layers = engine::lora_target_per_layer(t) ? n_layers : 1;
    for (int64_t l = 0; l < layers; ++l) {
      const std::string k = peft_module_key(l, t);
      keys[k + ".lora_A.weight"] = {l, t, 'A'};
      keys[k + ".lora_B.weight"] = {l, t, 'B'};
      if (engine::expert_proj(t) >= 0) {
        keys[engine::lora_expert_param_name(l, t, 0)] = {l, t, 'a'};
        keys[engine::lora_expert_param_name(l, t, 1)] = {l, t, 'b'};
      }
    }
  }
  return keys;
}

template <class T>
T parse_number(const std::map<std::string, std::string>& md, const std::string& key,
               const std::string& source) {
  const auto it = md.find(key);
  SPINDLE_CHECK(it != md.end(), format, "{}: revision metadata '{}' is missing", source, key);
  T value{};
  const char* end = it->second.data() + it->second.size();
  const auto [ptr, ec] = std::from_chars(it->second.data(), end, value);
  SPINDLE_CHECK(ec == std::errc() && ptr == end, format,
                "{}: revision metadata '{}' = '{}' is not a number", source, key, it->second);
  return value;
}

const std::string& text_field(const std::map<std::string, std::string>& md, const std::string& key,
                              const std::string& source) {
  const auto it = md.find(key);
  SPINDLE_CHECK(it != md.end(), format, "{}: revision metadata '{}' is missing", source, key);
  return it->second;
}

RevisionMeta meta_from_header(const engine::SafetensorsHeader& header, const std::string& source) {
  const auto& md = header.metadata;
  const auto fmt_it = md.find("spindle.format");
  SPINDLE_CHECK(fmt_it != md.end() && fmt_it->second == kFormat, format,
                "{}: not a Spindle revision file (metadata spindle.format != '{}')", source,
                kFormat);
  const std::string& version = text_field(md, "spindle.format_version", source);
  SPINDLE_CHECK(version == kFormatVersion, unsupported,
                "{}: revision format version {} is not supported (this build reads {})", source,
                version, kFormatVersion);
  RevisionMeta m;
  m.base_model_id = text_field(md, "spindle.base_model", source);
  m.base_checksum = text_field(md, "spindle.base_checksum", source);
  m.rank = parse_number<int64_t>(md, "spindle.rank", source);
  m.alpha = parse_number<float>(md, "spindle.alpha", source);
  m.n_layers = parse_number<int64_t>(md, "spindle.n_layers", source);
  SPINDLE_CHECK(m.rank >= 1 && m.rank <= kMaxRank, format, "{}: rank {} out of range", source,
                m.rank);
  SPINDLE_CHECK(m.n_layers >= 1 && m.n_layers <= kMaxLayers, format, "{}: n_layers {} out of range",
                source, m.n_layers);
  SPINDLE_CHECK(std::isfinite(m.alpha), format, "{}: alpha is not finite", source);
  const std::string& rs = text_field(md, "spindle.use_rslora", source);
  SPINDLE_CHECK(rs == "true" || rs == "false", format,
                "{}: spindle.use_rslora must be 'true' or 'false', got '{}'", source, rs);
  m.use_rslora = rs == "true";
  const auto dtype = dtype_from_name(text_field(md, "spindle.dtype", source));
  SPINDLE_CHECK(dtype && floating(*dtype), format, "{}: spindle.dtype '{}' is not F32/F16/BF16",
                source, text_field(md, "spindle.dtype", source));
  m.dtype = *dtype;
  const std::string& csv = text_field(md, "spindle.targets", source);
  size_t start = 0;
  while (start <= csv.size() && !csv.empty()) {
    const size_t comma = std::min(csv.find(',', start), csv.size());
    const std::string name = csv.substr(start, comma - start);
    const auto t = engine::lora_target_from_name(name);
    SPINDLE_CHECK(t.has_value(), format, "{}: spindle.targets names unknown module '{}'", source,
                  name);
    SPINDLE_CHECK(std::find(m.targets.begin(), m.targets.end(), *t) == m.targets.end(), format,
                  "{}: spindle.targets lists '{}' twice", source, name);
    m.targets.push_back(*t);
    start = comma + 1;
  }
  SPINDLE_CHECK(!m.targets.empty(), format, "{}: spindle.targets is empty", source);
  return m;
}

engine::SafetensorsHeader parse_header(std::string_view bytes, const std::string& source) {
  return engine::parse_safetensors_header(reinterpret_cast<const uint8_t*>(bytes.data()),
                                          bytes.size(), bytes.size(), source);
}

}  // namespace

RevisionMeta revision_meta_for(const engine::LoraWeights& weights, const RevisionBase& base) {
  RevisionMeta m;
  m.base_model_id = base.base_model_id;
  m.base_checksum = base.base_checksum;
  m.rank = weights.rank;
  m.alpha = weights.alpha;
  m.use_rslora = weights.use_rslora;
  m.targets = adapted_targets(weights);
  m.n_layers = int64_t(weights.modules.size());
  m.dtype = base.dtype;
  return m;
}

void stream_revision(const engine::LoraWeights& w, const RevisionMeta& meta,
                     const std::function<void(const void* data, size_t n)>& write) {
  SPINDLE_CHECK(floating(meta.dtype), unsupported,
                "encode_revision: dtype {} is not a floating type (F32, F16, BF16)",
                dtype_name(meta.dtype));
  SPINDLE_CHECK(meta.rank == w.rank && meta.use_rslora == w.use_rslora &&
                    std::memcmp(&meta.alpha, &w.alpha, sizeof(float)) == 0,
                invalid_argument,
                "encode_revision: metadata (rank {}, alpha {}, rslora {}) disagrees with the "
                "weights (rank {}, alpha {}, rslora {})",
                meta.rank, meta.alpha, meta.use_rslora, w.rank, w.alpha, w.use_rslora);
  SPINDLE_CHECK(w.rank >= 1 && w.rank <= kMaxRank && std::isfinite(w.alpha), invalid_argument,
                "encode_revision: rank {} / alpha {} out of range", w.rank, w.alpha);
  SPINDLE_CHECK(meta.n_layers == int64_t(w.modules.size()) && meta.n_layers >= 1 &&
                    meta.n_layers <= kMaxLayers,
                invalid_argument, "encode_revision: n_layers {} but the weights have {} layers",
                meta.n_layers, w.modules.size());
  SPINDLE_CHECK(meta.targets == adapted_targets(w), invalid_argument,
                "encode_revision: metadata targets [{}] but the weights adapt [{}]",
                targets_csv(meta.targets), targets_csv(adapted_targets(w)));
  SPINDLE_CHECK(!meta.targets.empty(), invalid_argument, "encode_revision: the adapter is empty");

  std::map<std::string, const Tensor*> tensors;  // sorted: the data order
  for (size_t l = 0; l < w.modules.size(); ++l) {
    for (LoraTarget t : engine::kAllLoraTargets) {
      const engine::LoraPair& p = w.modules[l][size_t(t)];
      if (p.empty() && p.B.empty()) continue;
      const std::string key = peft_module_key(int64_t(l), t);
      SPINDLE_CHECK(engine::lora_target_per_layer(t) || l == 0, invalid_argument,
                    "encode_revision: lm_head must live at layer 0, found at layer {}", l);
      SPINDLE_CHECK(
          p.A.rank() == 2 && p.B.rank() == 2 && p.A.dim(0) == w.rank && p.B.dim(1) == w.rank,
          invalid_argument, "encode_revision: {}: lora_A {} / lora_B {} do not have rank {}", key,
          shape_str(p.A.shape()), shape_str(p.B.shape()), w.rank);
      tensors[key + ".lora_A.weight"] = &p.A;
      tensors[key + ".lora_B.weight"] = &p.B;
    }
  }
  for (size_t l = 0; l < w.experts.size(); ++l) {
    for (LoraTarget t : engine::kExpertProjTargets) {
      const engine::ExpertLoraPair& p = w.experts[l][size_t(engine::expert_proj(t))];
      if (p.empty() && p.B.empty()) continue;
      const std::string a = engine::lora_expert_param_name(int64_t(l), t, 0);
      SPINDLE_CHECK(p.A.rank() == 3 && p.B.rank() == 3 && p.A.dim(0) == p.B.dim(0) &&
                        p.A.dim(1) == w.rank && p.B.dim(2) == w.rank,
                    invalid_argument,
                    "encode_revision: {}: experts' lora_A {} / lora_B {} are not [E, {}, d_in] / "
                    "[E, d_out, {}]",
                    a, shape_str(p.A.shape()), shape_str(p.B.shape()), w.rank, w.rank);
      tensors[a] = &p.A;
      tensors[engine::lora_expert_param_name(int64_t(l), t, 1)] = &p.B;
    }
  }
  // Same layout as engine::write_safetensors (sorted keys, one dtype, space-padded header), so
  // equal content gives equal bytes and equal blob ids.
  std::vector<engine::SafetensorsTensorIn> ins;
  ins.reserve(tensors.size());
  for (const auto& [name, t] : tensors) ins.push_back({name, meta.dtype, t->shape(), t->data()});
  const std::map<std::string, std::string> metadata{
      {"spindle.format", kFormat},
      {"spindle.format_version", kFormatVersion},
      {"spindle.base_model", meta.base_model_id},
      {"spindle.base_checksum", meta.base_checksum},
      {"spindle.rank", std::to_string(meta.rank)},
      {"spindle.alpha", fmt::format("{}", meta.alpha)},
      {"spindle.use_rslora", meta.use_rslora ? "true" : "false"},
      {"spindle.targets", targets_csv(meta.targets)},
      {"spindle.n_layers", std::to_string(meta.n_layers)},
      {"spindle.dtype", std::string(dtype_name(meta.dtype))},
  };
  engine::stream_safetensors(ins, metadata, write);
}

std::string encode_revision(const engine::LoraWeights& w, const RevisionMeta& meta) {
  std::string out;
  size_t total = 0;
  engine::for_each_lora_tensor(w, [&](const std::string&, const Tensor& t) {
    total += size_t(t.numel()) * dtype_size(meta.dtype);
  });
  out.reserve(total + 65536);  // the data plus a typical header: no regrowth
  stream_revision(w, meta, [&](const void* data, size_t n) {
    out.append(static_cast<const char*>(data), n);
  });
  return out;
}

RevisionMeta decode_revision_meta(std::string_view bytes, const std::string& source) {
  return meta_from_header(parse_header(bytes, source), source);
}

namespace {

// decode_revision over a parsed header: every check, the tensors allocated, and
// fill(entry, dst) called once per tensor to put its numel() fp32 values at dst (now, or later:
// dst stays valid in the returned weights).
template <class Fill>
DecodedRevision decode_with(const engine::SafetensorsHeader& header, const std::string& source,
                            Fill&& fill) {
  DecodedRevision out;
  out.meta = meta_from_header(header, source);
  const RevisionMeta& m = out.meta;
  engine::LoraWeights& w = out.weights;
  w.rank = m.rank;
  w.alpha = m.alpha;
  w.use_rslora = m.use_rslora;
  w.modules.resize(size_t(m.n_layers));
  const auto keys = expected_keys(m.n_layers, m.targets);
  // Every entry checked first, then all tensors carved out of one block (Tensor::in_one_block:
  // a few huge-page faults instead of one small fault per page of ~400 separate tensors).
  std::vector<std::pair<const engine::SafetensorsEntry*, Tensor*>> places;
  for (const auto& e : header.entries) {
    const auto it = keys.find(e.name);
    SPINDLE_CHECK(it != keys.end(), format,
                  "{}: tensor '{}' is not a LoRA A/B weight of the declared targets and layers",
                  source, e.name);
    SPINDLE_CHECK(e.known_dtype && floating(*e.known_dtype), format,
                  "{}: tensor '{}' has dtype {}, expected F32, F16 or BF16", source, e.name,
                  e.dtype);
    const auto [layer, target, which] = it->second;
    const bool expert = which == 'a' || which == 'b';
    const size_t want_rank = expert ? 3 : 2;
    const size_t rank_axis = which == 'A' ? 0 : which == 'B' ? 1 : which == 'a' ? 1 : 2;
    const bool rank_ok = e.shape.size() == want_rank && e.shape[rank_axis] == m.rank;
    SPINDLE_CHECK(rank_ok, format,
                  "{}: tensor '{}' has shape {}, expected {} dimensions with rank {} on axis {}",
                  source, e.name, shape_str(e.shape), want_rank, m.rank, rank_axis);
    if (expert) {
      if (w.experts.empty()) w.experts.resize(size_t(m.n_layers));
      engine::ExpertLoraPair& p = w.experts[size_t(layer)][size_t(engine::expert_proj(target))];
      places.emplace_back(&e, which == 'a' ? &p.A : &p.B);
      continue;
    }
    engine::LoraPair& p = w.modules[size_t(layer)][size_t(target)];
    places.emplace_back(&e, which == 'A' ? &p.A : &p.B);
  }
  {
    std::vector<Shape> shapes;
    shapes.reserve(places.size());
    for (const auto& [e, t] : places) shapes.push_back(e->shape);
    std::vector<Tensor> block = Tensor::in_one_block(shapes);
    for (size_t i = 0; i < places.size(); ++i) {
      *places[i].second = std::move(block[i]);
      fill(*places[i].first, places[i].second->data());
    }
  }
  for (LoraTarget t : m.targets) {
    bool any = false;
    for (int64_t l = 0; l < m.n_layers; ++l) {
      const engine::LoraPair& p = w.modules[size_t(l)][size_t(t)];
      SPINDLE_CHECK(p.A.empty() == p.B.empty(), format, "{}: {} has lora_{} but no lora_{}", source,
                    peft_module_key(l, t), p.A.empty() ? "B" : "A", p.A.empty() ? "A" : "B");
      any = any || !p.A.empty();
      if (engine::expert_proj(t) < 0 || w.experts.empty()) continue;
      const engine::ExpertLoraPair& x = w.experts[size_t(l)][size_t(engine::expert_proj(t))];
      SPINDLE_CHECK(x.A.empty() == x.B.empty() && (x.A.empty() || x.A.dim(0) == x.B.dim(0)), format,
                    "{}: {} and its lora_B do not pair up", source,
                    engine::lora_expert_param_name(l, t, 0));
      any = any || !x.A.empty();
    }
    SPINDLE_CHECK(any, format, "{}: target {} is declared but has no tensors", source,
                  engine::lora_target_name(t));
  }
  return out;
}

}  // namespace

DecodedRevision decode_revision(std::string_view bytes, const std::string& source) {
  const engine::SafetensorsHeader header = parse_header(bytes, source);
  return decode_with(header, source, [&](const engine::SafetensorsEntry& e, float* dst) {
    convert_to_f32(*e.known_dtype, bytes.data() + header.data_offset + e.data_begin, dst,
                   size_t(shape_numel(e.shape)));
  });
}

namespace {

// read_revision_file's digest on a thread of its own, beside the reads and conversions (SHA-256
// is most of a cold load's CPU: 14 ms of ~25 for a 20 MB revision here). Pieces are hashed in
// the order given. A piece is either caller memory that stays valid and unchanged until
// finish() (a tensor read in place) or a staging buffer taken with buffer() and handed over
// with give(), which the hasher returns to a pool of at most kBuffers: the reader waits for
// one when all are in the hasher's queue, so memory stays bounded (kBuffers × the largest
// run: 4 MiB, or one larger tensor that is not read in place). finish() waits for the
// queue and rethrows the hasher's error; the destructor stops and joins the thread.
class DigestPipe {
 public:
  static constexpr size_t kBuffers = 3;

  explicit DigestPipe(Sha256& digest) : digest_(digest), thread_([this] { run(); }) {}
  ~DigestPipe() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  DigestPipe(const DigestPipe&) = delete;
  DigestPipe& operator=(const DigestPipe&) = delete;

  // A staging buffer of `n` bytes, owned by the caller until give().
  std::vector<char> buffer(size_t n) {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return !free_.empty() || made_ < kBuffers || failed_; });
    if (failed_) std::rethrow_exception(error_);  // no point reading on
    std::vector<char> b;
    if (!free_.empty()) {
      b = std::move(free_.back());
      free_.pop_back();
    } else {
      ++made_;
    }
    lock.unlock();
    b.resize(n);
    return b;
  }
  void give(std::vector<char> b) { push({b.data(), b.size(), std::move(b)}); }
  void add(const void* data, size_t n) { push({data, n, {}}); }
  void finish() {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return (queue_.empty() && !busy_) || failed_; });
    if (error_) std::rethrow_exception(error_);
  }

 private:
  struct Piece {
    const void* data;
    size_t n;
    std::vector<char> owned;  // a staging buffer, back to the pool once hashed
  };
  void push(Piece p) {
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(std::move(p));
    }
    cv_.notify_all();
  }
  void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;  // finish() emptied the queue; else the read failed: drop the rest
      Piece p = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      const bool skip = failed_;
      lock.unlock();
      try {
        if (!skip) digest_.update(p.data, p.n);
      } catch (...) {
        lock.lock();
        error_ = std::current_exception();
        failed_ = true;
        lock.unlock();
      }
      lock.lock();
      busy_ = false;
      if (!p.owned.empty()) free_.push_back(std::move(p.owned));
      cv_.notify_all();
    }
  }

  Sha256& digest_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Piece> queue_;
  std::vector<std::vector<char>> free_;
  size_t made_ = 0;
  bool busy_ = false, stop_ = false, failed_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: starts once every member above exists
};

}  // namespace

DecodedRevision read_revision_file(const FileReader& file, const std::string& source,
                                   Sha256* digest) {
  std::vector<uint8_t> head;
  const engine::SafetensorsHeader header = engine::read_safetensors_header(file, source, &head);
  if (digest) digest->update(head.data(), head.size());
  struct Read {
    const engine::SafetensorsEntry* entry;
    float* dst;
  };
  std::vector<Read> reads;
  DecodedRevision out = decode_with(header, source, [&](const engine::SafetensorsEntry& e,
                                                        float* dst) { reads.push_back({&e, dst}); });
  // File order, every byte once (the digest covers the whole file): a large F32 tensor is read
  // straight into its memory; runs of small tensors (and any bytes between or after them) are
  // read together into a staging buffer and converted from there, so a small adapter of many
  // tensors costs a few reads, not one per tensor. A file of 1 MiB or more is hashed beside
  // the reads (DigestPipe); a smaller one inline.
  constexpr uint64_t kInPlaceBytes = uint64_t(1) << 20;
  constexpr uint64_t kRunBytes = uint64_t(4) << 20;
  std::sort(reads.begin(), reads.end(),
            [](const Read& x, const Read& y) { return x.entry->data_begin < y.entry->data_begin; });
  std::optional<DigestPipe> pipe;
  if (digest && file.size() >= kInPlaceBytes) pipe.emplace(*digest);
  std::vector<char> inline_staging;
  std::vector<const Read*> run;
  uint64_t run_begin = head.size();
  const auto flush = [&](uint64_t run_end) {  // reads [run_begin, run_end) and converts `run`
    if (run_end > run_begin) {
      const size_t n = size_t(run_end - run_begin);
      std::vector<char> staging = pipe ? pipe->buffer(n) : std::move(inline_staging);
      staging.resize(n);
      file.read_at(run_begin, staging.data(), staging.size());
      for (const Read* r : run) {
        const engine::SafetensorsEntry& e = *r->entry;
        convert_to_f32(*e.known_dtype,
                       staging.data() + (header.data_offset + e.data_begin - run_begin), r->dst,
                       size_t(shape_numel(e.shape)));
      }
      if (pipe) {
        pipe->give(std::move(staging));
      } else {
        if (digest) digest->update(staging.data(), staging.size());
        inline_staging = std::move(staging);
      }
    }
    run.clear();
    run_begin = std::max(run_begin, run_end);
  };
  for (const Read& r : reads) {
    const engine::SafetensorsEntry& e = *r.entry;
    if (e.byte_size() == 0) continue;
    const uint64_t begin = header.data_offset + e.data_begin, end = begin + e.byte_size();
    if (e.byte_size() >= kInPlaceBytes && *e.known_dtype == DType::f32) {
      flush(begin);
      file.read_at(begin, r.dst, size_t(e.byte_size()));
      if (pipe) {
        pipe->add(r.dst, size_t(e.byte_size()));  // the tensor's memory: stable, not written again
      } else if (digest) {
        digest->update(r.dst, size_t(e.byte_size()));
      }
      run_begin = end;
      continue;
    }
    if (!run.empty() && end - run_begin > kRunBytes) flush(begin);
    run.push_back(&r);
  }
  flush(file.size());
  if (pipe) pipe->finish();
  return out;
}

}  // namespace spindle::adapters
