#include "cluster_wire.h"

#include <cereal/archives/portable_binary.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>

#include <sstream>

#include "spindle/core/error.h"

namespace spindle::service::cluster_wire {

namespace {

constexpr uint32_t kVersion = 3;  // 2: data-parallel fields in ForwardHeader; 3: publish

template <class A>
void fields(A& ar, WorkerHello& m) {
  ar(m.name, m.base, m.device, m.host, m.pid, m.base_bytes, m.device_free_bytes, m.serving_slots,
     m.slots_used, m.queue_depth, m.loader_queue, m.sessions, m.tokens_per_s, m.served, m.draining);
}
template <class A>
void fields(A& ar, Welcome& m) {
  ar(m.worker_id, m.error);
}
template <class A>
void fields(A& ar, ForwardHeader& m) {
  uint8_t kind = uint8_t(m.kind);
  ar(kind, m.tenant, m.base, m.revision_id, m.blob, m.session_id, m.policy, m.rank, m.alpha,
     m.targets, m.seed, m.fresh, m.step, m.user_metadata, m.lease_ms, m.weights, m.optimizer,
     m.dp_group, m.dp_rank, m.dp_size, m.dp_timeout_ms, m.published_as);
  m.kind = ForwardKind(kind);
}

template <class M>
std::string encode_any(const M& m) {
  std::ostringstream os;
  {
    cereal::PortableBinaryOutputArchive ar(os);
    uint32_t v = kVersion;
    ar(v);
    fields(ar, const_cast<M&>(m));
  }
  return os.str();
}

template <class M>
M decode_any(std::string_view bytes, const char* what) {
  M m;
  try {
    std::istringstream is{std::string(bytes)};
    cereal::PortableBinaryInputArchive ar(is);
    uint32_t v = 0;
    ar(v);
    SPINDLE_CHECK(v == kVersion, format, "cluster message {}: format version {}, expected {}",
                  what, v, kVersion);
    fields(ar, m);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    SPINDLE_THROW(format, "cluster message {}: {} bytes do not decode: {}", what, bytes.size(),
                  e.what());
  }
  if constexpr (std::is_same_v<M, ForwardHeader>) {
    SPINDLE_CHECK(uint8_t(m.kind) <= uint8_t(ForwardKind::publish), format,
                  "cluster message forward: unknown kind {}", int(m.kind));
  }
  return m;
}

}  // namespace

std::string encode(const WorkerHello& m) { return encode_any(m); }
std::string encode(const Welcome& m) { return encode_any(m); }
std::string encode(const ForwardHeader& m) { return encode_any(m); }
WorkerHello decode_hello(std::string_view b) { return decode_any<WorkerHello>(b, "hello"); }
Welcome decode_welcome(std::string_view b) { return decode_any<Welcome>(b, "welcome"); }
ForwardHeader decode_forward(std::string_view b) { return decode_any<ForwardHeader>(b, "forward"); }

std::string id_frame(uint64_t id) {
  std::string f(8, '\0');
  for (int i = 0; i < 8; ++i) f[size_t(i)] = char((id >> (8 * i)) & 0xff);
  return f;
}

bool parse_id(std::string_view frame, uint64_t& id) {
  if (frame.size() < 8) return false;
  id = 0;
  for (int i = 0; i < 8; ++i) id |= uint64_t(uint8_t(frame[size_t(i)])) << (8 * i);
  return true;
}

}  // namespace spindle::service::cluster_wire
