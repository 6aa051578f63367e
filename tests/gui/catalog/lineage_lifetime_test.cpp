// Ephemeral and expired revisions in the Policy view, and the policy's user metadata.
//  - LineageNode's badge and details text for each lifetime (fixed clock).
//  - LineageModel::setLineage with fake RevisionInfo rows (durable, expired, ephemeral head):
//    the nodes carry the lifetime; the PolicyView draws the badges, greys the expired node,
//    shows the metadata and offers "Keep (promote)" only for the ephemeral one; rendered to
//    $SPINDLE_SCREENSHOT_DIR/policy_lifetimes(.png|_dark.png).
//  - Against a real spindled: save_weights with ttl_seconds gives an ephemeral node with the
//    daemon's expires_ms, and promote() through the model makes it durable.

#include <QApplication>
#include <QDateTime>
#include <QGraphicsItem>
#include <QGraphicsScene>
#include <QGraphicsSimpleTextItem>
#include <QImage>
#include <QLabel>
#include <QPushButton>
#include <QRegularExpression>

#include "catalog_test_util.h"
#include "gui_images.h"
#include "spindle/ui/lineage_model.h"
#include "spindle/ui/policy_view.h"
#include "spindle/ui/theme.h"
#include "studio_fixture.h"

namespace spindle::testing {
namespace {

using ui::LineageModel;
using ui::LineageNode;

constexpr qint64 kNow = 1'718'200'000'000;  // 2024-06-12 13:46:40 UTC

TEST(LineageLifetime, BadgeAndDetailTexts) {
  LineageNode n;
  EXPECT_EQ(n.lifetimeText(kNow), "");
  EXPECT_EQ(n.lifetimeDetail(), "durable");
  EXPECT_FALSE(n.ephemeral());
  n.expires_ms = kNow + 19 * 60 * 1000;  // 14:05:40, the same UTC day
  EXPECT_TRUE(n.ephemeral());
  EXPECT_EQ(n.lifetimeText(kNow), "ephemeral · expires 14:05 UTC");
  EXPECT_EQ(n.lifetimeDetail(),
            "ephemeral, expires 2024-06-12 14:05:40 UTC (promote it to keep it)");
  n.expires_ms = kNow + 24 * 3600 * 1000;  // tomorrow: the date too
  EXPECT_EQ(n.lifetimeText(kNow), "ephemeral · expires Jun 13 13:46 UTC");
  n.expired = true;
  EXPECT_FALSE(n.ephemeral());
  EXPECT_EQ(n.lifetimeText(kNow), "expired");
  EXPECT_EQ(n.lifetimeDetail(),
            "expired at 2024-06-13 13:46:40 UTC (not servable: its weights were released)");
}

protocol::RevisionInfo rev(const std::string& id, const std::string& parent, int64_t step,
                           int64_t expires_ms, bool expired, const std::string& metrics) {
  protocol::RevisionInfo r;
  r.id = id;
  r.policy = "rl-loop";
  r.parent = parent;
  r.step = step;
  r.metrics_json = metrics;
  r.expires_ms = expires_ms;
  r.expired = expired;
  return r;
}

struct FakeLineage {
  protocol::PolicyInfo policy;
  std::vector<protocol::RevisionInfo> revisions;
  std::string durable, expired, ephemeral;
};

FakeLineage fake_lineage() {
  FakeLineage f;
  f.durable = std::string(64, 'a');
  f.expired = std::string(64, 'b');
  f.ephemeral = std::string(64, 'c');
  const std::string later = std::string(64, 'd');
  f.policy.address = "spindle://alice/rl-loop";
  f.policy.tenant = "alice";
  f.policy.name = "rl-loop";
  f.policy.base_id = "Qwen/Qwen3-0.6B";
  f.policy.rank = 32;
  f.policy.alpha = 32;
  f.policy.targets = {"q_proj", "v_proj"};
  f.policy.head = f.ephemeral;
  f.policy.description = "cookbook rl_loop, sampler weights saved with ttl_seconds";
  f.policy.user_metadata_json = R"({"recipe": "rl_loop", "group_size": 4, "lr": 4e-05})";
  const qint64 now = QDateTime::currentMSecsSinceEpoch();
  f.revisions = {rev(f.durable, "", 10, 0, false, R"({"reward_mean": 0.22, "name": "checkpoint"})"),
                 rev(f.expired, f.durable, 11, now - 60'000, true, R"({"reward_mean": 0.41})"),
                 rev(later, f.expired, 12, now - 30'000, true, R"({"reward_mean": 0.63})"),
                 rev(f.ephemeral, later, 13, now + 3'600'000, false, R"({"reward_mean": 0.87})"),
                 // A branch saved with a long TTL (its badge names the day).
                 rev(std::string(64, 'e'), f.durable, 11, now + 3 * 86'400'000LL, false,
                     R"({"reward_mean": 0.35, "name": "eval"})")};
  return f;
}

QStringList scene_texts(QGraphicsScene* scene) {
  QStringList out;
  for (QGraphicsItem* item : scene->items())
    if (auto* t = dynamic_cast<QGraphicsSimpleTextItem*>(item)) out << t->text();
  return out;
}

TEST(LineageLifetime, ModelAndViewShowEphemeralExpiredAndMetadata) {
  const FakeLineage f = fake_lineage();
  ui::PolicyView view(/*connection=*/nullptr);
  view.resize(1280, 620);
  view.show();
  LineageModel* model = view.model();
  QSignalSpy ready(model, &LineageModel::ready);
  model->setLineage(f.policy, f.revisions);
  EXPECT_EQ(ready.count(), 1);
  ASSERT_EQ(model->nodes().size(), 5);
  ASSERT_EQ(model->edges().size(), 4);
  const auto node = [&](const std::string& id) {
    return model->nodes()[model->indexOf(QString::fromStdString(id))];
  };
  EXPECT_EQ(node(f.durable).expires_ms, 0);
  EXPECT_FALSE(node(f.durable).expired);
  EXPECT_TRUE(node(f.expired).expired);
  EXPECT_FALSE(node(f.expired).ephemeral());
  EXPECT_TRUE(node(f.ephemeral).ephemeral());
  EXPECT_EQ(node(f.ephemeral).expires_ms, f.revisions[3].expires_ms);
  EXPECT_TRUE(node(f.ephemeral).head);
  EXPECT_EQ(model->userMetadataText(), R"({"group_size":4,"lr":4e-05,"recipe":"rl_loop"})");

  // The graph: one badge per non-durable node, on its box.
  const QStringList texts = scene_texts(view.scene());
  EXPECT_EQ(texts.count("expired"), 2) << texts.join("|").toStdString();
  EXPECT_EQ(
      texts
          .filter(QRegularExpression("^ephemeral · expires \\d\\d:\\d\\d UTC$|"
                                     "^ephemeral · expires [A-Z][a-z]{2} \\d+ \\d\\d:\\d\\d UTC$"))
          .size(),
      2)
      << texts.join("|").toStdString();
  // The header: metadata (its tooltip indented) and the head's badge.
  EXPECT_TRUE(view.userMetadataLabel()->text().contains("\"recipe\":\"rl_loop\""))
      << view.userMetadataLabel()->text().toStdString();
  EXPECT_TRUE(view.userMetadataLabel()->toolTip().contains("\n"));

  // Details: an expired node offers nothing that would serve it; an ephemeral one "Keep".
  QPushButton *keep = nullptr, *rollback = nullptr;
  for (QPushButton* b : view.findChildren<QPushButton*>()) {
    if (b->text() == "Keep (promote)") keep = b;
    if (b->text() == "Rollback to here") rollback = b;
  }
  ASSERT_TRUE(keep && rollback);
  model->selectNode(QString::fromStdString(f.expired));
  EXPECT_TRUE(view.lifetimeLabel()->text().startsWith("expired at "))
      << view.lifetimeLabel()->text().toStdString();
  EXPECT_FALSE(rollback->isEnabled());
  EXPECT_FALSE(keep->isVisible());
  model->selectNode(QString::fromStdString(f.durable));
  EXPECT_EQ(view.lifetimeLabel()->text(), "durable");
  EXPECT_TRUE(rollback->isEnabled());
  EXPECT_FALSE(keep->isVisible());
  model->selectNode(QString::fromStdString(f.ephemeral));
  EXPECT_TRUE(view.lifetimeLabel()->text().startsWith("ephemeral, expires "));
  EXPECT_TRUE(keep->isVisible());
  EXPECT_TRUE(keep->isEnabled());

  const QString dir = screenshot_dir();
  const QImage light = view.grab().toImage();
  EXPECT_TRUE(light.save(dir + "/policy_lifetimes.png"));
  EXPECT_GT(pixel_variance(light), 50.0);
  ui::apply_theme(/*dark=*/true);
  QCoreApplication::processEvents();
  const QImage dark = view.grab().toImage();
  EXPECT_TRUE(dark.save(dir + "/policy_lifetimes_dark.png"));
  EXPECT_GT(pixel_variance(dark), 50.0);
  ui::apply_theme(/*dark=*/false);
}

class LineageLifetimeDaemon : public StudioTest {};

TEST_F(LineageLifetimeDaemon, EphemeralSaveShowsItsExpiryAndPromoteMakesItDurable) {
  auto c = client();
  const std::string name = unique("eph");
  protocol::CreateTrainingRequest q;
  q.policy = name;
  q.rank = 4;
  q.alpha = 8;
  q.user_metadata_json = R"({"recipe": "sl_loop"})";
  const auto s = c->create_training(q);
  const std::string durable = train_and_save(*c, s.session_id, "d", "{\"loss\": 2.0}");
  protocol::SaveRequest save;
  save.session_id = s.session_id;
  save.ttl_seconds = 3600;
  const auto eph = std::get<protocol::SaveReply>(c->call(protocol::Op::save_weights, save).body);
  ASSERT_GT(eph.expires_ms, 0);

  auto conn = open_connection();
  LineageModel model(conn.get());
  QSignalSpy ready(&model, &LineageModel::ready);
  model.load(QString::fromStdString(s.policy_address));
  ASSERT_TRUE(QTest::qWaitFor([&] { return ready.count() == 1; }, 60000));
  ASSERT_TRUE(model.lastErrorCode().isEmpty()) << model.lastErrorMessage().toStdString();
  EXPECT_EQ(model.userMetadataText(), R"({"recipe":"sl_loop"})");
  const QString eph_id = QString::fromStdString(eph.revision_id);
  ASSERT_GE(model.indexOf(eph_id), 0);
  EXPECT_EQ(model.nodes()[model.indexOf(eph_id)].expires_ms, eph.expires_ms);
  EXPECT_TRUE(model.nodes()[model.indexOf(eph_id)].ephemeral());
  EXPECT_EQ(model.nodes()[model.indexOf(QString::fromStdString(durable))].expires_ms, 0);

  QSignalSpy done(&model, &LineageModel::actionDone);
  model.promote(eph_id);
  ASSERT_TRUE(QTest::qWaitFor([&] { return done.count() == 1; }, 30000))
      << model.lastErrorMessage().toStdString();
  EXPECT_EQ(model.nodes()[model.indexOf(eph_id)].expires_ms, 0);
  EXPECT_EQ(c->catalog_show(s.policy_address + "@" + eph.revision_id).revision.expires_ms, 0);
  c->close_training(s.session_id);
}

}  // namespace
}  // namespace spindle::testing
