#pragma once
// How the front thread serves each op: one route per protocol::Op, {op, request type, handler,
// category}, in enum order. op_table.cpp static_asserts that the table has kOpCount entries, that
// entry i routes op i, that every request type is a RequestBody alternative and that each entry
// has the handler its category needs; so an op added to wire.h without a route fails to
// compile instead of failing at run time as `internal`. (Tracy's static_assert'ed message-size
// table is the model.) tests/integration/service/op_table_test.cpp checks the request types
// against protocol::empty_request_body.
//
// Threading: the table is immutable; the front thread alone calls the handlers.

#include <array>
#include <cstddef>
#include <cstdint>
#include <variant>

#include "reply_channel.h"
#include "spindle/protocol/wire.h"

namespace spindle::service {

struct Daemon;
class Front;

enum class OpCategory : uint8_t {
  front,     // answered by the front thread at once: never queued, never counted in flight
  session,   // on an open training session: never refused as `overloaded` (see below)
  training,  // creates a session (create_training*): on the catalog thread, then the engine
  sampling,  // sample, sample_stream, compute_logprobs: the engine's scheduler
  catalog,   // the catalog thread
  run,       // GRPO runs (the run manager)
  worker,    // RewardTester's worker threads (reward_test, plugins, datasets)
};
const char* op_category_name(OpCategory category);

// Every category but `front` counts against max_queue while in flight.
constexpr bool counts_in_flight(OpCategory c) { return c != OpCategory::front; }
// A session's requests are never refused as `overloaded`: a client pipelines them and the
// server runs them in the order sent, which a refusal followed by a retry would break (the next
// one could be admitted before the retried one). Their number is bounded by the sessions and
// the scheduler's own queue limit. Front ops are never refused either (they are not queued).
constexpr bool may_be_overloaded(OpCategory c) {
  return c != OpCategory::front && c != OpCategory::session;
}

// A front op's handler: runs on the front thread and replies through the Front before it
// returns; exceptions become error replies (wire_error).
using FrontHandler = void (Front::*)(const Call& call, const protocol::Request& request);
// Any other op's: called on the front thread with the request already counted in flight; sends
// exactly one reply through d.replies, from whichever thread finishes it (a stream: its final).
using DispatchHandler = void (*)(Daemon& d, Call call, protocol::Request request);

struct OpRoute {
  protocol::Op op;
  size_t request_index;      // the RequestBody alternative the op's body holds
  const char* request_type;  // its name, for messages
  OpCategory category;
  FrontHandler front = nullptr;        // category front only
  DispatchHandler dispatch = nullptr;  // every other category
};

// The route of `op` (every Op has one).
const OpRoute& op_route(protocol::Op op);
// All routes, in enum order.
const std::array<OpRoute, protocol::kOpCount>& op_routes();

// Index of `T` among the alternatives of the variant `V` (V's size when absent).
template <class T, class V>
struct VariantIndex;
template <class T, class... Ts>
struct VariantIndex<T, std::variant<Ts...>> {
  static constexpr size_t value = [] {
    constexpr bool same[] = {std::is_same_v<T, Ts>...};
    for (size_t i = 0; i < sizeof...(Ts); ++i)
      if (same[i]) return i;
    return sizeof...(Ts);
  }();
};

}  // namespace spindle::service
