#pragma once
// A coordinator's GRPO runs spread over its workers (issue 17, docs/cluster.md): the
// rl::PolicyEngine of one run policy whose training session lives on a worker. open() places
// the session by the policy's rendezvous key (tenant/policy, as a client's session of that
// policy would be) and pins every later call to that worker:
//   open               forward open_session with the weights and AdamW state (revision format)
//   sample             forward session_sample: the session's live weights, on the worker
//   base_logprobs      compute_logprobs of the bare base, on the same worker
//   forward_backward   forward_backward / optim_step / close_training requests on the session
//   optim_step, close
//   snapshot           forward snapshot (save_state): weights, AdamW state and step come back
//                      here; the run commits them in this coordinator's catalog
// A call whose worker is lost (in flight, or gone before it was sent) fails, and lost() is true
// from then on: the run fails over (grpo_run.h).
//
// Threading: calls from the run's thread; callbacks on the front thread (they only decode and
// set a promise). State shared with callbacks lives in a shared_ptr, so a callback that runs
// after the engine is gone is harmless.

#include <memory>
#include <string>

#include "daemon_state.h"
#include "spindle/rl/policy_engine.h"

namespace spindle::service {

// The factory a coordinator's run uses: every policy of `tenant` on workers serving `base`.
rl::PolicyEngineFactory worker_policy_engines(Daemon& d, std::string tenant, const ServedBase& base);

}  // namespace spindle::service
