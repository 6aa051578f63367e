#pragma once
// Setup for the catalog suites, through the blocking client only (never the GUI path): policies
// on stories260K with real saved revisions (one forward_backward + optim_step between saves,
// so steps are 1, 2, 3 ...), and a wait for a model's loaded() signals.

#include <QSignalSpy>
#include <QTest>

#include <string>
#include <vector>

#include "spindle/protocol/client.h"
#include "spindle/ui/catalog_model.h"

namespace spindle::testing {

struct TrainedPolicy {
  std::string session_id;
  std::string address;                 // spindle://alice/<name>
  std::vector<std::string> revisions;  // oldest first
};

// One optimizer step on a short story, then save_weights with `metrics_json`.
inline std::string train_and_save(protocol::Client& c, const std::string& session,
                                  const std::string& label, const std::string& metrics_json) {
  const std::vector<int32_t> tokens = c.tokenize("Once upon a time there was a cat named Tom.");
  protocol::Datum d;
  d.model_input.assign(tokens.begin(), tokens.end() - 1);
  d.target_tokens.assign(tokens.begin() + 1, tokens.end());
  c.forward_backward(session, {d});
  protocol::AdamParamsMsg adam;
  adam.learning_rate = 5e-3f;
  c.optim_step(session, adam);
  return c.save_weights(session, label, metrics_json).revision_id;
}

// A policy `name` with `revisions` saved revisions (metrics {"loss": 2.5, 2.0, ...}); the
// session stays open (close_training when done, or let the daemon end with the suite).
inline TrainedPolicy make_policy(protocol::Client& c, const std::string& name, int revisions,
                                 const std::string& description = "") {
  protocol::CreateTrainingRequest q;
  q.policy = name;
  q.rank = 4;
  q.alpha = 8;
  q.seed = 11;
  q.description = description;
  const auto s = c.create_training(q);
  TrainedPolicy out{s.session_id, s.policy_address, {}};
  for (int i = 0; i < revisions; ++i) {
    out.revisions.push_back(train_and_save(c, s.session_id, "r" + std::to_string(i + 1),
                                           "{\"loss\": " + std::to_string(2.5 - 0.5 * i) + "}"));
  }
  return out;
}

// Waits until the model has answered its page request(s) in flight.
inline bool wait_idle(const ui::CatalogModel& m, int ms = 60000) {
  return QTest::qWaitFor([&] { return !m.isLoading(); }, ms);
}

}  // namespace spindle::testing
