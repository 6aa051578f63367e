#pragma once
// tokenize, detokenize and tokenizer_info: answered on the front thread (a loaded tokenizer is
// immutable and thread-safe, and these are cheap next to a forward). Each throws spindle::Error
// (not_found naming the served bases for an unknown base_model, failed_precondition for a base
// without a tokenizer, invalid_argument naming the bad token id).

#include "daemon_state.h"

namespace spindle::service {

protocol::TokenizeReply tokenize(const Daemon& d, const protocol::TokenizeRequest& req,
                                 protocol::Frames& frames);
protocol::DetokenizeReply detokenize(const Daemon& d, const protocol::DetokenizeRequest& req,
                                     const protocol::Frames& frames);
protocol::TokenizerInfoReply tokenizer_info(const Daemon& d,
                                            const protocol::TokenizerInfoRequest& req);

}  // namespace spindle::service
