// Header encode/decode in both encodings (wire.h). Every cereal/rapidjson exception stops
// here and becomes a ProtocolError carrying what of the header was read. Writing uses cereal's
// archives; reading uses this library's bounded, field-naming readers (binary_reader.h,
// json_reader.h), which read exactly what cereal writes.

#include <cereal/archives/json.hpp>
#include <cereal/archives/portable_binary.hpp>
#include <rapidjson/document.h>
#include <rapidjson/error/en.h>

#include <cmath>
#include <sstream>

#include "binary_reader.h"
#include "json_reader.h"
#include "json_safety.h"
#include "spindle/protocol/wire.h"
#include "walker.h"

namespace spindle::protocol {

namespace {

using cereal::make_nvp;

// JSON nesting deeper than any message needs; bounds rapidjson's recursive parser (cereal's).
constexpr int kMaxJsonDepth = 64;

// Printable, bounded excerpt of untrusted text for error messages.
std::string excerpt(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 64)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (s.size() > 64) out += "...";
  return out;
}

// Parses a J header: refuses nesting beyond kMaxJsonDepth (before parsing) and anything that is
// not one well-formed JSON object.
void parse_json_header(std::string_view text, rapidjson::Document& doc) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxJsonDepth)
        throw cereal::Exception("JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
                                " at offset " + std::to_string(i));
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  doc.Parse<rapidjson::kParseIterativeFlag | rapidjson::kParseNanAndInfFlag |
            rapidjson::kParseFullPrecisionFlag>(text.data(), text.size());
  if (doc.HasParseError())
    throw cereal::Exception(std::string("JSON parse error at offset ") +
                            std::to_string(doc.GetErrorOffset()) + ": " +
                            rapidjson::GetParseError_En(doc.GetParseError()));
  if (!doc.IsObject()) throw cereal::Exception("JSON header is not an object");
}

Encoding encoding_of(std::span<const std::string> parts, const char* what) {
  if (parts.empty()) throw ProtocolError(errc::bad_request, std::string("empty ") + what);
  if (parts[0].empty())
    throw ProtocolError(errc::bad_request, std::string(what) + ": empty header frame");
  const char c = parts[0][0];
  if (c == char(Encoding::binary)) return Encoding::binary;
  if (c == char(Encoding::json)) return Encoding::json;
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02x", unsigned(uint8_t(c)));
  throw ProtocolError(errc::bad_request, std::string(what) + ": unknown encoding byte " + hex +
                                             " (expected 'B' or 'J')");
}

// Fails the message being decoded, with what of its header is known.
struct Context {
  Encoding encoding;
  uint64_t request_id = 0;
  std::optional<Op> op;
  ProtocolError error(const char* code, const std::string& message) const {
    ProtocolError e(code, message);
    e.encoding = encoding;
    e.request_id = request_id;
    e.op = op;
    return e;
  }
};

void check_sizes(std::span<const std::string> parts, const Limits& limits, const Context& ctx) {
  const uint64_t frames = parts.size() - 1;
  if (frames > limits.max_frames)
    throw ctx.error(errc::limit_exceeded, std::to_string(frames) + " tensor frames, limit " +
                                              std::to_string(limits.max_frames));
  for (size_t i = 1; i < parts.size(); ++i)
    if (parts[i].size() > limits.max_frame_bytes)
      throw ctx.error(errc::limit_exceeded,
                      "frame " + std::to_string(i - 1) + " is " +
                          std::to_string(parts[i].size()) + " bytes, limit " +
                          std::to_string(limits.max_frame_bytes));
}

std::string version_message(uint32_t theirs) {
  return "protocol_version " + std::to_string(theirs) + " is not supported (this side speaks " +
         std::to_string(kProtocolVersion) + ")";
}

// Reads the fixed header fields. Layout (both encodings, frozen across protocol versions):
// protocol_version, request_id, [token,] op. Throws ProtocolError.
template <class Archive>
std::string read_fixed(Archive& ar, Context& ctx, uint32_t& version, uint64_t& request_id,
                       std::string* token, const char* what) {
  try {
    ar(make_nvp("protocol_version", version));
  } catch (const std::exception& e) {
    throw ctx.error(errc::bad_request, std::string("bad ") + what + " header: " + e.what());
  }
  std::string name;
  std::string failure;
  try {
    ar(make_nvp("request_id", request_id));
    ctx.request_id = request_id;
    if (token) ar(make_nvp("token", *token));
    ar(make_nvp("op", name));
    ctx.op = op_from_name(name);
  } catch (const std::exception& e) {
    failure = e.what();
  }
  // Another version may lay out even these fields differently: its error comes first.
  if (version != kProtocolVersion) throw ctx.error(errc::unsupported_version, version_message(version));
  if (!failure.empty())
    throw ctx.error(errc::bad_request, std::string("bad ") + what + " header: " + failure);
  return name;
}

template <class Archive, class Body>
void read_body(Archive& ar, Body& body, const Context& ctx, const char* what) {
  try {
    std::visit([&](auto& b) { ar(make_nvp("body", b)); }, body);
  } catch (const std::exception& e) {
    throw ctx.error(errc::bad_request, std::string("bad ") + what + " body (" +
                                           op_name(*ctx.op) + "): " + e.what());
  }
}

template <class Archive>
Request read_request(Archive& ar, std::span<const std::string> parts, const Limits& limits,
                     Context& ctx) {
  Request r;
  r.encoding = ctx.encoding;
  const std::string op = read_fixed(ar, ctx, r.protocol_version, r.request_id, &r.token, "request");
  if (!ctx.op) throw ctx.error(errc::unknown_op, "unknown op '" + excerpt(op) + "'");
  r.op = *ctx.op;
  check_sizes(parts, limits, ctx);
  r.body = empty_request_body(r.op);
  read_body(ar, r.body, ctx, "request");
  return r;
}

template <class Archive>
Reply read_reply(Archive& ar, std::span<const std::string> parts, const Limits& limits,
                 Context& ctx) {
  Reply r;
  r.encoding = ctx.encoding;
  const std::string op = read_fixed(ar, ctx, r.protocol_version, r.request_id, nullptr, "reply");
  try {
    ar(make_nvp("ok", r.ok));
  } catch (const std::exception& e) {
    throw ctx.error(errc::bad_request, std::string("bad reply header: ok: ") + e.what());
  }
  if (ctx.op) {
    r.op = *ctx.op;
  } else if (op.empty() && !r.ok) {
    r.op_unknown = true;
  } else {
    throw ctx.error(errc::unknown_op, "reply for unknown op '" + excerpt(op) + "'");
  }
  check_sizes(parts, limits, ctx);
  if (r.ok) {
    r.body = empty_reply_body(r.op);
    read_body(ar, r.body, ctx, "reply");
  } else {
    r.body = Empty{};
    try {
      ar(make_nvp("error", r.error));
    } catch (const std::exception& e) {
      throw ctx.error(errc::bad_request, std::string("bad reply error: ") + e.what());
    }
  }
  return r;
}

// Runs `read` over the header in its encoding; cereal exceptions become bad_request.
template <class Message, class Read>
Message decode(std::span<const std::string> parts, const Limits& limits, const char* what,
               Read read) {
  Context ctx{encoding_of(parts, what), 0, std::nullopt};
  const std::string_view header = std::string_view(parts[0]).substr(1);
  if (header.size() > limits.max_header_bytes)
    throw ctx.error(errc::limit_exceeded, std::string(what) + " header is " +
                                              std::to_string(header.size()) + " bytes, limit " +
                                              std::to_string(limits.max_header_bytes));
  Message m;
  if (ctx.encoding == Encoding::binary) {
    std::optional<detail::BinaryReader> ar;
    try {
      ar.emplace(header);
    } catch (const std::exception& e) {
      throw ctx.error(errc::bad_request, std::string("bad ") + what + " header: " + e.what());
    }
    m = read(*ar, ctx);
    if (ar->remaining() != 0)
      throw ctx.error(errc::bad_request, std::string("bad ") + what + " header: " +
                                             std::to_string(ar->remaining()) +
                                             " trailing bytes after the body");
  } else {
    rapidjson::Document doc;
    try {
      parse_json_header(header, doc);
    } catch (const std::exception& e) {
      throw ctx.error(errc::bad_request, std::string("bad ") + what + " header: " + e.what());
    }
    detail::JsonReader ar(doc);
    m = read(ar, ctx);
  }
  m.frames.assign(parts.begin() + 1, parts.end());
  return m;
}

template <class Body>
void check_body_type(Op op, const Body& body, const Body& expected) {
  if (body.index() != expected.index())
    throw ProtocolError(errc::internal, std::string("encode: op ") + op_name(op) +
                                            " needs body alternative " +
                                            std::to_string(expected.index()) + ", got " +
                                            std::to_string(body.index()));
}

// Writes `fields` (a callable taking the archive) after the encoding byte.
template <class Fields>
std::string write(Encoding encoding, Fields fields) {
  std::ostringstream os(std::ios::binary);
  os.put(char(encoding));
  try {
    if (encoding == Encoding::binary) {
      cereal::PortableBinaryOutputArchive ar(
          os, cereal::PortableBinaryOutputArchive::Options::LittleEndian());
      fields(ar);
    } else if (encoding == Encoding::json) {
      cereal::JSONOutputArchive ar(os, cereal::JSONOutputArchive::Options::NoIndent());
      fields(ar);
    } else {
      throw ProtocolError(errc::internal, "encode: unknown encoding");
    }
  } catch (const ProtocolError&) {
    throw;
  } catch (const std::exception& e) {
    throw ProtocolError(errc::internal, std::string("encode: ") + e.what());
  }
  std::string out = std::move(os).str();
  // cereal's JSON writer puts a newline between members; strings escape theirs, so every raw
  // newline is layout. One line per header.
  if (encoding == Encoding::json) std::erase(out, '\n');
  return out;
}

}  // namespace

std::string encode_request_header(const Request& request) {
  check_body_type(request.op, request.body, empty_request_body(request.op));
  const bool json = request.encoding == Encoding::json;
  const std::string token = json ? detail::json_string(request.token) : request.token;
  const RequestBody body = json ? detail::json_safe(request.body) : RequestBody{};
  const RequestBody& out = json ? body : request.body;
  return write(request.encoding, [&](auto& ar) {
    ar(make_nvp("protocol_version", request.protocol_version),
       make_nvp("request_id", request.request_id), make_nvp("token", token),
       make_nvp("op", std::string(op_name(request.op))));
    std::visit([&](const auto& b) { ar(make_nvp("body", b)); }, out);
  });
}

std::string encode_reply_header(const Reply& reply) {
  const bool json = reply.encoding == Encoding::json;
  if (reply.ok) check_body_type(reply.op, reply.body, empty_reply_body(reply.op));
  const std::string op = reply.op_unknown && !reply.ok ? std::string() : op_name(reply.op);
  ReplyBody body;
  ErrorInfo error;
  if (json) {
    if (reply.ok)
      body = detail::json_safe(reply.body);
    else
      error = detail::json_safe(reply.error);
  }
  const ReplyBody& body_out = json ? body : reply.body;
  const ErrorInfo& error_out = json ? error : reply.error;
  return write(reply.encoding, [&](auto& ar) {
    ar(make_nvp("protocol_version", reply.protocol_version),
       make_nvp("request_id", reply.request_id), make_nvp("op", op), make_nvp("ok", reply.ok));
    if (reply.ok)
      std::visit([&](const auto& b) { ar(make_nvp("body", b)); }, body_out);
    else
      ar(make_nvp("error", error_out));
  });
}

Request decode_request(std::span<const std::string> parts, const Limits& limits) {
  return decode<Request>(parts, limits, "request", [&](auto& ar, Context& ctx) {
    return read_request(ar, parts, limits, ctx);
  });
}

Reply decode_reply(std::span<const std::string> parts, const Limits& limits) {
  return decode<Reply>(parts, limits, "reply", [&](auto& ar, Context& ctx) {
    return read_reply(ar, parts, limits, ctx);
  });
}

}  // namespace spindle::protocol
