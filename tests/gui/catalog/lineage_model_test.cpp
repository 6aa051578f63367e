// LineageModel against a real spindled: a policy with 3 saved revisions r1 <- r2 <- r3 and a
// fork at r2 into another policy that saved r4 (parent r2). The model's nodes and edges must
// be exactly those revisions and parent links, agree with the blocking client's
// catalog_lineage, mark the head and the other policy, and lay the main line out on lane 0.

#include <QSignalSpy>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>

#include "catalog_test_util.h"
#include "spindle/ui/lineage_model.h"
#include "studio_fixture.h"

namespace spindle::testing {
namespace {

using ui::LineageModel;

class LineageModelTest : public StudioTest {};

struct ForkedFamily {
  TrainedPolicy main;
  std::string fork_name;
  std::string fork_revision;  // r4
};

ForkedFamily make_family(protocol::Client& c, const std::string& name) {
  ForkedFamily f;
  f.main = make_policy(c, name, 3);
  f.fork_name = name + "-fork";
  c.catalog_fork(f.main.address + "@" + f.main.revisions[1], f.fork_name);
  const auto s = c.create_training_from_state("spindle://alice/" + f.fork_name + "@latest");
  f.fork_revision = train_and_save(c, s.session_id, "fork", "{\"reward_mean\": 0.75}");
  c.close_training(s.session_id);
  return f;
}

TEST_F(LineageModelTest, NodesAndEdgesOfThreeRevisionsAndAFork) {
  auto c = client();
  const std::string name = unique("lin");
  const ForkedFamily fam = make_family(*c, name);
  const auto& r = fam.main.revisions;
  ASSERT_EQ(c->catalog_show("spindle://alice/" + fam.fork_name + "@" + fam.fork_revision).revision.parent, r[1]);

  auto conn = open_connection();
  LineageModel model(conn.get());
  QSignalSpy ready(&model, &LineageModel::ready);
  model.load(QString::fromStdString(fam.main.address));
  ASSERT_TRUE(QTest::qWaitFor([&] { return ready.count() == 1; }, 60000));
  ASSERT_TRUE(model.lastErrorCode().isEmpty()) << model.lastErrorMessage().toStdString();
  EXPECT_EQ(model.policy().name, name);
  EXPECT_EQ(model.policy().head, r[2]);

  // Nodes: exactly r1..r3 and the fork's r4.
  std::set<std::string> ids;
  for (const auto& n : model.nodes()) ids.insert(n.id.toStdString());
  EXPECT_EQ(ids, (std::set<std::string>{r[0], r[1], r[2], fam.fork_revision}));
  // The same set the blocking client's catalog_lineage gives from the root down.
  const auto expected = c->catalog_lineage(fam.main.address + "@" + r[0], 0, 1000);
  std::set<std::string> expected_ids{expected.revision.id};
  for (const auto& e : expected.descendants) expected_ids.insert(e.revision.id);
  EXPECT_EQ(ids, expected_ids);

  // Edges: the parent links.
  auto edges = model.edges();
  std::set<std::pair<std::string, std::string>> got;
  for (const auto& e : edges) got.insert({e.from.toStdString(), e.to.toStdString()});
  EXPECT_EQ(got, (std::set<std::pair<std::string, std::string>>{
                     {r[0], r[1]}, {r[1], r[2]}, {r[1], fam.fork_revision}}));

  // Per node: policy, parent, step, key metric, marks and layout.
  for (int i = 0; i < 3; ++i) {
    const int k = model.indexOf(QString::fromStdString(r[i]));
    ASSERT_GE(k, 0);
    const auto& n = model.nodes()[k];
    EXPECT_EQ(n.policy.toStdString(), name);
    EXPECT_TRUE(n.own);
    EXPECT_EQ(n.head, i == 2);
    EXPECT_EQ(n.step, i + 1);
    EXPECT_EQ(n.column, i);
    EXPECT_EQ(n.lane, 0);  // the main line
    EXPECT_EQ(n.metric_name, "loss");
    EXPECT_NEAR(n.metric_value, 2.5 - 0.5 * i, 1e-9);
    EXPECT_EQ(n.parent.toStdString(), i == 0 ? "" : r[i - 1]);
  }
  const auto& f = model.nodes()[model.indexOf(QString::fromStdString(fam.fork_revision))];
  EXPECT_EQ(f.policy.toStdString(), fam.fork_name);
  EXPECT_FALSE(f.own);
  EXPECT_FALSE(f.head);
  EXPECT_EQ(f.column, 2);
  EXPECT_EQ(f.lane, 1);
  const auto r4 = c->catalog_show("spindle://alice/" + fam.fork_name + "@" + fam.fork_revision).revision;
  EXPECT_EQ(f.step, r4.step);
  EXPECT_EQ(f.metrics_json.toStdString(), r4.metrics_json);
  EXPECT_EQ(f.metric_name, "reward_mean");
  EXPECT_EQ(f.label().toStdString(), "step " + std::to_string(r4.step) + "\nreward_mean 0.75");
  EXPECT_EQ(model.lanes(), 2);
  EXPECT_EQ(model.columns(), 3);

  // Selecting a node: its metrics as rows; the playground address names its own policy.
  model.selectNode(QString::fromStdString(fam.fork_revision));
  const auto metrics = model.selectedMetrics();
  const auto r4_metrics = nlohmann::json::parse(r4.metrics_json);
  EXPECT_EQ(metrics.size(), qsizetype(r4_metrics.size()));
  EXPECT_TRUE(std::find(metrics.begin(), metrics.end(),
                        QPair<QString, QString>("reward_mean", "0.75")) != metrics.end());
  EXPECT_EQ(model.addressOf(QString::fromStdString(fam.fork_revision)).toStdString(),
            "spindle://alice/" + fam.fork_name + "@" + fam.fork_revision);

  // Rollback to r1 from the graph: header and head mark follow, and the daemon agrees.
  QSignalSpy done(&model, &LineageModel::actionDone);
  model.rollbackTo(QString::fromStdString(r[0]));
  ASSERT_TRUE(QTest::qWaitFor([&] { return done.count() == 1; }, 30000))
      << model.lastErrorMessage().toStdString();
  EXPECT_EQ(model.policy().head, r[0]);
  EXPECT_TRUE(model.nodes()[model.indexOf(QString::fromStdString(r[0]))].head);
  EXPECT_EQ(c->catalog_show(fam.main.address).policy.head, r[0]);

  // The fork's own view: its ancestry reaches into the main policy (other colour there).
  model.load(QString::fromStdString("spindle://alice/" + fam.fork_name));
  ASSERT_TRUE(QTest::qWaitFor([&] { return ready.count() == 2; }, 60000));
  EXPECT_EQ(model.nodes().size(), 4);
  EXPECT_TRUE(model.nodes()[model.indexOf(QString::fromStdString(fam.fork_revision))].own);
  EXPECT_FALSE(model.nodes()[model.indexOf(QString::fromStdString(r[1]))].own);
  EXPECT_EQ(model.policy().forked_from, r[1]);  // the revision it was forked at
}

TEST_F(LineageModelTest, MissingPolicyIsTheServersNotFound) {
  auto conn = open_connection();
  LineageModel model(conn.get());
  QSignalSpy ready(&model, &LineageModel::ready);
  model.load("spindle://alice/" + QString::fromStdString(unique("nope")));
  ASSERT_TRUE(QTest::qWaitFor([&] { return ready.count() == 1; }, 30000));
  EXPECT_EQ(model.lastErrorCode(), "not_found");
  EXPECT_TRUE(model.nodes().isEmpty());
}

TEST(LineageKeyMetric, PicksTheFirstKnownNumber) {
  QString name;
  double v = 0;
  EXPECT_TRUE(LineageModel::keyMetric(R"({"loss": 1.5, "reward_mean": 0.25})", &name, &v));
  EXPECT_EQ(name, "reward_mean");
  EXPECT_EQ(v, 0.25);
  EXPECT_TRUE(LineageModel::keyMetric(R"({"eval_accuracy": 0.5, "loss": 1})", &name, &v));
  EXPECT_EQ(name, "eval_accuracy");
  EXPECT_FALSE(LineageModel::keyMetric(R"({"imported": "peft"})", &name, &v));
  EXPECT_FALSE(LineageModel::keyMetric("", &name, &v));
}

}  // namespace
}  // namespace spindle::testing
