// RunsModel and MetricsModel against a real spindled: a run launched from the form model gets a
// curve point for every step of every policy, equal to the blocking client's run_status;
// stop/resume show in the run list; the CSV export; events stay within their tenant.

#include <QFile>
#include <QSignalSpy>
#include <QTemporaryDir>

#include <set>

#include "runs_test_util.h"
#include "spindle/ui/event_stream.h"
#include "spindle/ui/metrics_model.h"
#include "spindle/ui/runs_model.h"

namespace spindle::testing {
namespace {

using json = nlohmann::json;
using ui::MetricsModel;
using ui::RunConfigForm;
using ui::RunsModel;

class RunsModelsTest : public StudioTest {
 protected:
  static bool live(ui::Connection& c) {
    return QTest::qWaitFor([&] { return c.events()->isLive(); }, 20000);
  }
};

// Every numeric metric of every row of `expected` is in `model` with the same value, and the
// model has no other rows.
void expect_same_metrics(const MetricsModel& model, const std::vector<protocol::RunMetricInfo>& expected) {
  ASSERT_EQ(model.rowCount(), int(expected.size()));
  for (const auto& m : expected) {
    const json j = json::parse(m.metrics_json);
    const QString policy = QString::fromStdString(m.policy);
    for (const auto& [k, v] : j.items()) {
      if (k == "step") continue;
      if (k == "terms") {
        for (const auto& [t, tv] : v.items()) {
          double got = 0;
          ASSERT_TRUE(model.hasValue(m.step, policy, "terms." + QString::fromStdString(t), &got));
          EXPECT_EQ(got, tv.get<double>()) << m.policy << " step " << m.step << " term " << t;
        }
        continue;
      }
      if (!v.is_number()) continue;
      double got = 0;
      ASSERT_TRUE(model.hasValue(m.step, policy, QString::fromStdString(k), &got))
          << m.policy << " step " << m.step << " " << k;
      EXPECT_EQ(got, v.get<double>()) << m.policy << " step " << m.step << " " << k;
    }
  }
}

TEST_F(RunsModelsTest, FormRunGetsAPointForEveryStepOfEveryPolicy) {
  auto conn = open_connection();
  ASSERT_TRUE(live(*conn)) << "the event stream never went live (subscribe)";
  QSignalSpy events(conn->events(), &ui::EventStream::metrics);
  RunConfigForm form(conn.get());
  const std::string prefix = unique("curves");
  constexpr int64_t kSteps = 3;
  fill_tiny_run(form, prefix, kSteps);
  MetricsModel metrics(conn.get());
  QSignalSpy launched(&form, &RunConfigForm::launched);
  QSignalSpy failed(&form, &RunConfigForm::launchFailed);
  form.launch();
  ASSERT_TRUE(QTest::qWaitFor([&] { return launched.count() + failed.count() > 0; }, 60000));
  ASSERT_EQ(failed.count(), 0) << failed.at(0).at(1).toString().toStdString();
  const QString run_id = launched.at(0).at(0).toString();
  EXPECT_EQ(launched.at(0).at(1).toStringList().size(), 2);
  metrics.setRun(run_id);

  ASSERT_TRUE(QTest::qWaitFor([&] { return finished(metrics.run().status); }, 300000))
      << "run " << run_id.toStdString() << " still " << metrics.run().status;
  ASSERT_EQ(metrics.run().status, "done") << metrics.run().error;
  const auto expected = client()->run_status(run_id.toStdString(), 0);
  // Rows arrive per policy; wait for the last ones (events behind the final run record).
  ASSERT_TRUE(QTest::qWaitFor([&] { return metrics.rowCount() >= int(expected.metrics.size()); },
                              30000));
  ASSERT_EQ(expected.metrics.size(), size_t(2 * (kSteps + 1)));  // steps 0..3, two policies
  expect_same_metrics(metrics, expected.metrics);

  const QStringList policies = metrics.policies();
  EXPECT_EQ(policies, (QStringList{QString::fromStdString(prefix + "-cat"),
                                   QString::fromStdString(prefix + "-dog")}));
  for (const QString& p : policies) {
    const QList<QPointF> reward = metrics.series(p, "reward_mean");
    ASSERT_EQ(reward.size(), kSteps) << p.toStdString();  // step 0 evaluates, trains nothing
    for (int s = 0; s < kSteps; ++s) EXPECT_EQ(reward[s].x(), s + 1);
    EXPECT_EQ(metrics.series(p, "terms." + p.section('-', -1)).size(), kSteps);
    EXPECT_EQ(metrics.lastStep(p), kSteps);
  }
  for (const char* k : {"reward_mean", "kl", "entropy", "loss", "clip_fraction",
                        "response_length", "tokens_per_s", "step_time_s"})
    EXPECT_TRUE(metrics.metricKeys().contains(k)) << k;

  // The live events carried this run's rows (the subscribe stream of alice).
  std::set<std::pair<std::string, int64_t>> streamed;
  for (const auto& e : events) {
    const auto r = e.at(0).value<protocol::RunStatusReply>();
    if (r.run.id != run_id.toStdString()) continue;
    for (const auto& m : r.metrics) streamed.insert({m.policy, m.step});
  }
  EXPECT_FALSE(streamed.empty()) << "no metrics event of the run reached the Studio";

  // A catch-up after everything arrived (as after resubscribed()) adds no duplicate point.
  QSignalSpy synced(&metrics, &MetricsModel::synced);
  metrics.catchUp();
  emit conn->events()->resubscribed();
  ASSERT_TRUE(QTest::qWaitFor([&] { return synced.count() >= 2; }, 30000));
  expect_same_metrics(metrics, expected.metrics);

  // A model opened after the run finished catches up entirely from run_status.
  MetricsModel late(conn.get());
  late.setRun(run_id);
  ASSERT_TRUE(QTest::qWaitFor([&] { return late.rowCount() == int(expected.metrics.size()); }, 30000));
  expect_same_metrics(late, expected.metrics);
}

TEST_F(RunsModelsTest, StopAndResumeChangeTheStatusInTheList) {
  auto conn = open_connection();
  auto blocking = client();
  const std::string prefix = unique("stop");
  const std::string run_id = blocking->run_start(tiny_run_json(prefix, 400)).run_id;
  RunsModel runs(conn.get());
  runs.refresh();
  const QString id = QString::fromStdString(run_id);
  auto status = [&] {
    const protocol::RunInfo* r = runs.run(id);
    return r ? r->status : std::string();
  };
  ASSERT_TRUE(QTest::qWaitFor([&] { return status() == "running"; }, 30000)) << status();
  const int row = runs.rowOf(id);
  EXPECT_EQ(runs.data(runs.index(row, RunsModel::StatusColumn)).toString(), "running");
  EXPECT_EQ(runs.data(runs.index(row, RunsModel::IdColumn)).toString(), id);
  EXPECT_TRUE(runs.data(runs.index(row, RunsModel::PoliciesColumn)).toString()
                  .contains(QString::fromStdString(prefix + "-cat")));

  runs.stop(id);
  ASSERT_TRUE(QTest::qWaitFor([&] { return status() == "stopped"; }, 120000)) << status();
  EXPECT_EQ(blocking->run_status(run_id).run.status, "stopped");
  EXPECT_EQ(runs.data(runs.index(runs.rowOf(id), RunsModel::StatusColumn)).toString(), "stopped");
  const int64_t stopped_at = runs.run(id)->step;
  EXPECT_LT(stopped_at, 400);

  runs.resume(id);
  ASSERT_TRUE(QTest::qWaitFor([&] { return status() == "running"; }, 60000)) << status();
  EXPECT_EQ(blocking->run_status(run_id).run.status, "running");

  // A finished run cannot be resumed: the server's error reaches actionFailed.
  QSignalSpy failed(&runs, &RunsModel::actionFailed);
  runs.stop(id);
  ASSERT_TRUE(QTest::qWaitFor([&] { return status() == "stopped"; }, 120000)) << status();
  runs.stop(id);  // stopping a stopped run is a no-op
  QTest::qWait(0);
  EXPECT_EQ(blocking->run_status(run_id).run.status, "stopped");
  EXPECT_EQ(failed.count(), 0);
}

TEST_F(RunsModelsTest, CsvHasOneLinePerStepAndPolicy) {
  auto conn = open_connection();
  auto blocking = client();
  const std::string prefix = unique("csv");
  const std::string run_id = blocking->run_start(tiny_run_json(prefix, 2)).run_id;
  const auto expected = wait_finished(*blocking, run_id);
  ASSERT_EQ(expected.run.status, "done") << expected.run.error;
  MetricsModel metrics(conn.get());
  metrics.setRun(QString::fromStdString(run_id));
  ASSERT_TRUE(QTest::qWaitFor([&] { return metrics.rowCount() == int(expected.metrics.size()); },
                              30000));
  QTemporaryDir dir;
  const QString path = dir.filePath("m.csv");
  ASSERT_TRUE(metrics.writeCsv(path));
  QFile f(path);
  ASSERT_TRUE(f.open(QIODevice::ReadOnly));
  const QStringList lines = QString::fromUtf8(f.readAll()).split('\n', Qt::SkipEmptyParts);
  ASSERT_EQ(lines.size(), int(expected.metrics.size()) + 1);
  const QStringList header = lines[0].split(',');
  ASSERT_GE(header.size(), 3);
  EXPECT_EQ(header[0], "step");
  EXPECT_EQ(header[1], "policy");
  EXPECT_TRUE(header.contains("reward_mean"));
  EXPECT_TRUE(header.contains("terms.cat"));
  // Rows in (step, policy) order, each value as run_status has it (empty where absent).
  for (size_t i = 0; i < expected.metrics.size(); ++i) {
    const auto& m = expected.metrics[i];
    const QStringList cells = lines[int(i) + 1].split(',');
    ASSERT_EQ(cells.size(), header.size()) << lines[int(i) + 1].toStdString();
    EXPECT_EQ(cells[0].toLongLong(), m.step);
    EXPECT_EQ(cells[1].toStdString(), m.policy);
    const json j = json::parse(m.metrics_json);
    for (int c = 2; c < header.size(); ++c) {
      const std::string key = header[c].toStdString();
      const json* v = nullptr;
      if (key.rfind("terms.", 0) == 0) {
        if (j.contains("terms") && j["terms"].contains(key.substr(6))) v = &j["terms"][key.substr(6)];
      } else if (j.contains(key)) {
        v = &j[key];
      }
      if (!v) {
        EXPECT_TRUE(cells[c].isEmpty()) << key << " step " << m.step;
      } else {
        EXPECT_EQ(cells[c].toDouble(), v->get<double>()) << key << " step " << m.step;
      }
    }
  }
}

TEST_F(RunsModelsTest, EventsStayWithinTheirTenant) {
  auto alice = open_connection(kAliceToken);
  auto bob = open_connection(kBobToken);
  ASSERT_TRUE(live(*alice));
  ASSERT_TRUE(live(*bob));
  QSignalSpy alice_events(alice->events(), &ui::EventStream::metrics);
  QSignalSpy bob_events(bob->events(), &ui::EventStream::metrics);
  const std::string run_id = client(kAliceToken)->run_start(tiny_run_json(unique("tenant"), 2)).run_id;
  // Alice's stream carries the run up to its final event.
  auto saw_end = [&] {
    for (const auto& e : alice_events) {
      const auto r = e.at(0).value<protocol::RunStatusReply>();
      if (r.run.id == run_id && r.run.status == "done") return true;
    }
    return false;
  };
  ASSERT_TRUE(QTest::qWaitFor(saw_end, 300000));
  EXPECT_GE(alice_events.count(), 2 * 3);  // steps 0..2 of two policies, then the end
  // Bob's stream is live and gets only bob's events: his own run (after alice's ended) is the
  // marker that everything sent before it has arrived.
  const std::string bobs_run = client(kBobToken)->run_start(tiny_run_json(unique("bob"), 1)).run_id;
  auto bob_saw_end = [&] {
    for (const auto& e : bob_events) {
      const auto r = e.at(0).value<protocol::RunStatusReply>();
      if (r.run.id == bobs_run && finished(r.run.status)) return true;
    }
    return false;
  };
  ASSERT_TRUE(QTest::qWaitFor(bob_saw_end, 300000)) << "bob's own run's events never came";
  for (const auto& e : bob_events) {
    const auto r = e.at(0).value<protocol::RunStatusReply>();
    EXPECT_EQ(r.run.tenant, "bob");
    EXPECT_NE(r.run.id, run_id) << "bob received an event of alice's run";
  }
  for (const auto& e : alice_events)
    EXPECT_NE(e.at(0).value<protocol::RunStatusReply>().run.id, bobs_run);
  RunsModel bobs(bob.get());
  QSignalSpy refreshed(&bobs, &RunsModel::refreshed);
  bobs.refresh();
  ASSERT_TRUE(QTest::qWaitFor([&] { return refreshed.count() > 0; }, 30000));
  EXPECT_EQ(bobs.rowOf(QString::fromStdString(run_id)), -1);
}

}  // namespace
}  // namespace spindle::testing

namespace spindle::testing {
namespace {

// Fork a policy of a finished run at its head and train the fork further (PROTOCOL.md "Forking
// a run": catalog_fork, then run_start with resume: true).
TEST_F(RunsModelsTest, ForkAPolicyOfARunAndTrainIt) {
  auto conn = open_connection();
  auto blocking = client();
  const std::string prefix = unique("forked");
  const std::string run_id = blocking->run_start(tiny_run_json(prefix, 2)).run_id;
  ASSERT_EQ(wait_finished(*blocking, run_id).run.status, "done");
  RunsModel runs(conn.get());
  QSignalSpy refreshed(&runs, &RunsModel::refreshed);
  runs.refresh();
  ASSERT_TRUE(QTest::qWaitFor([&] { return refreshed.count() > 0; }, 30000));
  const QString id = QString::fromStdString(run_id);
  ASSERT_NE(runs.run(id), nullptr);
  const QString cat = QString::fromStdString(runs.run(id)->policies.at(0));
  ASSERT_EQ(RunsModel::policyName(cat).toStdString(), prefix + "-cat");

  QSignalSpy forked(&runs, &RunsModel::forked);
  QSignalSpy started(&runs, &RunsModel::forkRunStarted);
  QSignalSpy failed(&runs, &RunsModel::actionFailed);
  const QString fork_name = QString::fromStdString(prefix + "-cat-fork");
  runs.forkPolicy(id, cat, fork_name, /*steps=*/4);
  ASSERT_TRUE(QTest::qWaitFor([&] { return started.count() + failed.count() > 0; }, 60000));
  ASSERT_EQ(failed.count(), 0) << failed.at(0).at(1).toString().toStdString();
  ASSERT_EQ(forked.count(), 1);
  EXPECT_TRUE(forked.at(0).at(0).toString().endsWith("/" + fork_name));
  const std::string fork_run = started.at(0).at(0).toString().toStdString();
  const auto fin = wait_finished(*blocking, fork_run);
  ASSERT_EQ(fin.run.status, "done") << fin.run.error;
  EXPECT_EQ(fin.run.step, 4);
  ASSERT_EQ(fin.run.policies.size(), 1u);
  // The fork starts at the forked revision's step: it trains steps 3 and 4 only.
  std::set<int64_t> steps;
  for (const auto& m : fin.metrics)
    if (json::parse(m.metrics_json).contains("reward_mean")) steps.insert(m.step);
  EXPECT_EQ(steps, (std::set<int64_t>{3, 4}));
  // The model lists the fork's run (it refreshes after starting it).
  EXPECT_TRUE(QTest::qWaitFor([&] { return runs.rowOf(QString::fromStdString(fork_run)) >= 0; },
                              30000));
}

}  // namespace
}  // namespace spindle::testing
