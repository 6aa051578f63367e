#pragma once
// Decoding helpers shared by the typed Client helpers (client_ops.cpp, client_studio.cpp).

#include <string>
#include <utility>

#include "spindle/protocol/client.h"

namespace spindle::protocol::client_detail {

template <class T>
T body_of(Reply&& r) {
  if (T* b = std::get_if<T>(&r.body)) return std::move(*b);
  throw ClientError(errc::bad_request, std::string("reply to ") + op_name(r.op) +
                                           " carries the wrong body type",
                    r.request_id);
}

// Runs a frame decoder, turning its ProtocolError into a ClientError.
template <class F>
auto decoded(const Reply& r, F f) {
  try {
    return f();
  } catch (const ProtocolError& e) {
    throw ClientError(e.code(), std::string("reply: ") + e.what(), r.request_id);
  }
}

inline std::string at(const char* field, size_t i) {
  return std::string(field) + "[" + std::to_string(i) + "]";
}

// sample's (and sample_stream's final) sequences with their tensors read from r.frames.
inline SampleResult sample_result(const Reply& r, const std::string& revision_id,
                                  const std::vector<SequenceMsg>& sequences) {
  return decoded(r, [&] {
    SampleResult out;
    out.revision_id = revision_id;
    for (size_t i = 0; i < sequences.size(); ++i) {
      const SequenceMsg& s = sequences[i];
      out.sequences.push_back({read_int32(s.tokens, r.frames, at("sequences", i) + ".tokens"),
                               read_float32(s.logprobs, r.frames, at("sequences", i) + ".logprobs"),
                               s.stop_reason, s.text});
    }
    return out;
  });
}

}  // namespace spindle::protocol::client_detail
