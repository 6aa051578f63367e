// The front's op table (backend/service/src/op_table.h): its size and order are static_asserted
// there; here, each route's request type is the body the protocol decodes for that op, and the
// categories are the routing the front had before the table (so the overload and in-flight
// rules are unchanged).

#include <gtest/gtest.h>

#include <set>

#include "../../../backend/service/src/op_table.h"

namespace spindle::service {
namespace {

using protocol::Op;

TEST(OpTable, EveryRouteTakesTheBodyTheProtocolDecodes) {
  ASSERT_EQ(op_routes().size(), size_t(protocol::kOpCount));
  for (int i = 0; i < protocol::kOpCount; ++i) {
    const Op op = Op(i);
    const OpRoute& r = op_route(op);
    EXPECT_EQ(r.op, op);
    EXPECT_EQ(r.request_index, protocol::empty_request_body(op).index())
        << protocol::op_name(op) << " is routed with " << r.request_type;
    EXPECT_EQ(r.category == OpCategory::front, r.front != nullptr) << protocol::op_name(op);
    EXPECT_EQ(r.category != OpCategory::front, r.dispatch != nullptr) << protocol::op_name(op);
  }
}

std::set<Op> ops_in(OpCategory c) {
  std::set<Op> out;
  for (const OpRoute& r : op_routes())
    if (r.category == c) out.insert(r.op);
  return out;
}

TEST(OpTable, CategoriesAreTheFrontsRouting) {
  EXPECT_EQ(ops_in(OpCategory::front),
            (std::set<Op>{Op::handshake, Op::capabilities, Op::status, Op::tokenize,
                          Op::detokenize, Op::tokenizer_info, Op::heartbeat, Op::subscribe,
                          Op::unsubscribe, Op::cluster_status}));
  // PROTOCOL.md 6: never refused as overloaded.
  EXPECT_EQ(ops_in(OpCategory::session),
            (std::set<Op>{Op::forward, Op::forward_backward, Op::optim_step, Op::save_weights,
                          Op::save_state, Op::load_state, Op::close_training}));
  EXPECT_EQ(ops_in(OpCategory::training),
            (std::set<Op>{Op::create_training, Op::create_training_from_state}));
  EXPECT_EQ(ops_in(OpCategory::sampling),
            (std::set<Op>{Op::sample, Op::sample_stream, Op::compute_logprobs}));
  EXPECT_EQ(ops_in(OpCategory::run), (std::set<Op>{Op::run_start, Op::run_list, Op::run_status,
                                                    Op::run_stop, Op::run_resume}));
  EXPECT_EQ(ops_in(OpCategory::worker), (std::set<Op>{Op::reward_test, Op::reward_plugins,
                                                       Op::plugin_rescan, Op::datasets}));
  EXPECT_EQ(ops_in(OpCategory::catalog),
            (std::set<Op>{Op::catalog_list, Op::catalog_search, Op::catalog_show,
                          Op::catalog_lineage, Op::catalog_fork, Op::catalog_rollback,
                          Op::catalog_tag, Op::catalog_delete, Op::import_peft, Op::export_peft,
                          Op::catalog_promote}));
  for (const OpRoute& r : op_routes()) {
    EXPECT_EQ(counts_in_flight(r.category), r.category != OpCategory::front);
    EXPECT_EQ(may_be_overloaded(r.category),
              r.category != OpCategory::front && r.category != OpCategory::session);
    EXPECT_STRNE(op_category_name(r.category), "?");
  }
}

}  // namespace
}  // namespace spindle::service
