#include "op_table.h"

#include "catalog_ops.h"
#include "engine_ops.h"
#include "front.h"
#include "reward_tests.h"

namespace spindle::service {

using protocol::Op;
using protocol::RequestBody;

namespace {

template <class Body>
constexpr OpRoute at_front(Op op, const char* type, FrontHandler handler) {
  static_assert(VariantIndex<Body, RequestBody>::value < std::variant_size_v<RequestBody>,
                "a request type must be a RequestBody alternative");
  return {op, VariantIndex<Body, RequestBody>::value, type, OpCategory::front, handler, nullptr};
}

template <class Body>
constexpr OpRoute queued(Op op, const char* type, OpCategory category, DispatchHandler handler) {
  static_assert(VariantIndex<Body, RequestBody>::value < std::variant_size_v<RequestBody>,
                "a request type must be a RequestBody alternative");
  return {op, VariantIndex<Body, RequestBody>::value, type, category, nullptr, handler};
}

}  // namespace

// Front befriends this struct, so the table may name its private serve_* handlers.
struct OpTable {
#define SPINDLE_FRONT(OP, BODY, HANDLER) at_front<protocol::BODY>(Op::OP, #BODY, &Front::HANDLER)
#define SPINDLE_QUEUED(OP, BODY, CATEGORY, HANDLER) \
  queued<protocol::BODY>(Op::OP, #BODY, OpCategory::CATEGORY, &HANDLER)

  // One entry per Op, in enum order (wire.h).
  static constexpr std::array<OpRoute, protocol::kOpCount> kRoutes = {{
      SPINDLE_FRONT(handshake, HandshakeRequest, serve_handshake),
      SPINDLE_FRONT(capabilities, Empty, serve_capabilities),
      SPINDLE_FRONT(status, Empty, serve_status),
      SPINDLE_QUEUED(create_training, CreateTrainingRequest, training, dispatch_training_op),
      SPINDLE_QUEUED(create_training_from_state, CreateTrainingFromStateRequest, training,
                     dispatch_training_op),
      SPINDLE_QUEUED(forward, ForwardBackwardRequest, session, dispatch_training_op),
      SPINDLE_QUEUED(forward_backward, ForwardBackwardRequest, session, dispatch_training_op),
      SPINDLE_QUEUED(optim_step, OptimStepRequest, session, dispatch_training_op),
      SPINDLE_QUEUED(save_weights, SaveRequest, session, dispatch_training_op),
      SPINDLE_QUEUED(save_state, SaveRequest, session, dispatch_training_op),
      SPINDLE_QUEUED(load_state, LoadStateRequest, session, dispatch_training_op),
      SPINDLE_QUEUED(close_training, SessionRequest, session, dispatch_training_op),
      SPINDLE_QUEUED(sample, SampleRequest, sampling, dispatch_sampling_op),
      SPINDLE_QUEUED(compute_logprobs, ComputeLogprobsRequest, sampling, dispatch_sampling_op),
      SPINDLE_QUEUED(catalog_list, CatalogListRequest, catalog, dispatch_catalog_op),
      SPINDLE_QUEUED(catalog_search, CatalogSearchRequest, catalog, dispatch_catalog_op),
      SPINDLE_QUEUED(catalog_show, AddressRequest, catalog, dispatch_catalog_op),
      SPINDLE_QUEUED(catalog_lineage, LineageRequest, catalog, dispatch_catalog_op),
      SPINDLE_QUEUED(catalog_fork, ForkRequest, catalog, dispatch_catalog_op),
      SPINDLE_QUEUED(catalog_rollback, AddressRequest, catalog, dispatch_catalog_op),
      SPINDLE_QUEUED(catalog_tag, TagRequest, catalog, dispatch_catalog_op),
      SPINDLE_QUEUED(catalog_delete, AddressRequest, catalog, dispatch_catalog_op),
      SPINDLE_QUEUED(import_peft, ImportPeftRequest, catalog, dispatch_catalog_op),
      SPINDLE_QUEUED(export_peft, AddressRequest, catalog, dispatch_catalog_op),
      SPINDLE_FRONT(tokenize, TokenizeRequest, serve_tokenize),
      SPINDLE_QUEUED(run_start, RunStartRequest, run, dispatch_run_op),
      SPINDLE_QUEUED(run_list, RunListRequest, run, dispatch_run_op),
      SPINDLE_QUEUED(run_status, RunStatusRequest, run, dispatch_run_op),
      SPINDLE_QUEUED(run_stop, RunIdRequest, run, dispatch_run_op),
      SPINDLE_QUEUED(run_resume, RunIdRequest, run, dispatch_run_op),
      SPINDLE_QUEUED(reward_test, RewardTestRequest, worker, dispatch_reward_test),
      SPINDLE_QUEUED(reward_plugins, Empty, worker, dispatch_reward_test),
      SPINDLE_QUEUED(plugin_rescan, Empty, worker, dispatch_reward_test),
      SPINDLE_QUEUED(datasets, DatasetsRequest, worker, dispatch_reward_test),
      SPINDLE_QUEUED(sample_stream, SampleRequest, sampling, dispatch_sampling_op),
      SPINDLE_FRONT(subscribe, SubscribeRequest, serve_subscribe),
      SPINDLE_FRONT(unsubscribe, UnsubscribeRequest, serve_unsubscribe),
      SPINDLE_FRONT(detokenize, DetokenizeRequest, serve_detokenize),
      SPINDLE_FRONT(tokenizer_info, TokenizerInfoRequest, serve_tokenizer_info),
      SPINDLE_FRONT(heartbeat, HeartbeatRequest, serve_heartbeat),
      SPINDLE_QUEUED(catalog_promote, AddressRequest, catalog, dispatch_catalog_op),
      SPINDLE_FRONT(cluster_status, Empty, serve_cluster_status),
  }};

#undef SPINDLE_FRONT
#undef SPINDLE_QUEUED

  // kOpCount when every entry routes its own op with the handler its category needs, else the
  // first index that does not. A missing entry is value-initialised: op handshake, category
  // front, no handler, so it fails here too.
  static constexpr size_t first_bad_route() {
    for (size_t i = 0; i < kRoutes.size(); ++i) {
      const OpRoute& r = kRoutes[i];
      const bool at_front = r.category == OpCategory::front;
      if (size_t(r.op) != i || at_front != (r.front != nullptr) ||
          at_front == (r.dispatch != nullptr) || r.request_type == nullptr)
        return i;
    }
    return kRoutes.size();
  }
};

static_assert(OpTable::kRoutes.size() == size_t(protocol::kOpCount),
              "op_table.cpp needs one route per protocol::Op");
static_assert(OpTable::first_bad_route() == size_t(protocol::kOpCount),
              "op_table.cpp: route i must be op i (enum order) with the handler its category "
              "needs (front: a Front member; others: a dispatch function); an Op added to "
              "wire.h needs its route here");

const char* op_category_name(OpCategory category) {
  switch (category) {
    case OpCategory::front: return "front";
    case OpCategory::session: return "session";
    case OpCategory::training: return "training";
    case OpCategory::sampling: return "sampling";
    case OpCategory::catalog: return "catalog";
    case OpCategory::run: return "run";
    case OpCategory::worker: return "worker";
  }
  return "?";
}

const OpRoute& op_route(Op op) { return OpTable::kRoutes.at(size_t(op)); }

const std::array<OpRoute, protocol::kOpCount>& op_routes() { return OpTable::kRoutes; }

}  // namespace spindle::service
