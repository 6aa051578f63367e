#include "reply_counters.h"

namespace spindle::service {

void ReplyCounters::count(const protocol::Reply& reply) {
  if (!protocol::is_final_reply(reply)) return;
  std::string op = reply.op_unknown ? "unknown" : protocol::op_name(reply.op);
  std::lock_guard lock(mutex_);
  ++counts_[{std::move(op), reply.ok ? std::string("ok") : reply.error.code}];
}

void ReplyCounters::count(const std::string& op, const std::string& code) {
  std::lock_guard lock(mutex_);
  ++counts_[{op, code}];
}

ReplyCounters::Counts ReplyCounters::snapshot() const {
  std::lock_guard lock(mutex_);
  return counts_;
}

}  // namespace spindle::service
