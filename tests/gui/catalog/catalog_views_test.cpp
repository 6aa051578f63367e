// The Catalog and Policy views on real data: prepareScreenshot() fills them and signals ready,
// the widgets show what the models hold, and each renders to a PNG that is not blank (pixel
// variance). The PNGs go to $SPINDLE_SCREENSHOT_DIR when set (to look at them), else a
// temporary folder.

#include <QApplication>
#include <QGraphicsItem>
#include <QGraphicsScene>
#include <QImage>
#include <QLabel>
#include <QTableView>
#include <QTableWidget>
#include <QTemporaryDir>

#include <cmath>
#include <cstdlib>

#include "catalog_test_util.h"
#include "spindle/ui/catalog_view.h"
#include "spindle/ui/lineage_model.h"
#include "spindle/ui/policy_view.h"
#include "spindle/ui/theme.h"
#include "gui_images.h"
#include "studio_fixture.h"

namespace spindle::testing {
namespace {

class CatalogViewsTest : public StudioTest {};

TEST_F(CatalogViewsTest, CatalogAndPolicyViewsRenderRealData) {
  auto c = client();
  const std::string name = unique("view");
  const TrainedPolicy p = make_policy(*c, name, 3, "story policy for the screenshots");
  for (int i = 0; i < 6; ++i) make_policy(*c, name + "-sib" + std::to_string(i), 1, "a sibling");
  c->catalog_tag(p.address, {"demo", "stories"});
  c->catalog_fork(p.address + "@" + p.revisions[1], name + "-fork");
  const auto s = c->create_training_from_state("spindle://alice/" + name + "-fork@latest");
  train_and_save(*c, s.session_id, "fork", "{\"reward_mean\": 0.4}");
  c->close_training(s.session_id);

  auto conn = open_connection();
  const QString dir = screenshot_dir();

  ui::CatalogView catalog(conn.get());
  catalog.resize(1280, 560);
  catalog.show();
  QSignalSpy catalog_ready(&catalog, &ui::StudioView::readyForScreenshot);
  catalog.prepareScreenshot();
  ASSERT_TRUE(QTest::qWaitFor([&] { return catalog_ready.count() == 1; }, 60000));
  EXPECT_GE(catalog.model()->rowCount(), 8);  // the policy, 6 siblings, the fork
  EXPECT_EQ(catalog.table()->model()->rowCount(), catalog.model()->rowCount());
  const QImage ci = catalog.grab().toImage();
  EXPECT_TRUE(ci.save(dir + "/catalog.png"));
  EXPECT_GT(pixel_variance(ci), 50.0);

  // Double-click / Enter opens the policy: the Policy view shows it.
  QSignalSpy open(&catalog, &ui::StudioView::openPolicy);
  const int row = catalog.model()->rowOfName(QString::fromStdString(name));
  ASSERT_GE(row, 0);
  catalog.table()->setFocus();
  catalog.table()->setCurrentIndex(catalog.model()->index(row, 0));
  QTest::keyClick(catalog.table(), Qt::Key_Return);
  ASSERT_EQ(open.count(), 1);
  EXPECT_EQ(open.at(0).at(0).toString().toStdString(), p.address);

  ui::PolicyView policy(conn.get());
  policy.resize(1280, 620);
  policy.show();
  QSignalSpy ready(policy.model(), &ui::LineageModel::ready);
  policy.showPolicy(open.at(0).at(0).toString());
  ASSERT_TRUE(QTest::qWaitFor([&] { return ready.count() == 1; }, 60000));
  EXPECT_EQ(policy.model()->nodes().size(), 4);
  // One selectable box per revision in the scene; clicking one fills the metrics table.
  int boxes = 0;
  for (QGraphicsItem* item : policy.scene()->items())
    if (item->flags() & QGraphicsItem::ItemIsSelectable) ++boxes;
  EXPECT_EQ(boxes, 4);
  for (QGraphicsItem* item : policy.scene()->items()) {
    if (item->data(0).toString().toStdString() == p.revisions[2]) item->setSelected(true);
  }
  EXPECT_EQ(policy.model()->selectedId().toStdString(), p.revisions[2]);
  QStringList keys;
  for (int i = 0; i < policy.metricsTable()->rowCount(); ++i)
    keys << policy.metricsTable()->item(i, 0)->text();
  EXPECT_TRUE(keys.contains("loss")) << keys.join(",").toStdString();
  QSignalSpy play(&policy, &ui::StudioView::openInPlayground);
  QTest::keyClick(&policy, Qt::Key_P, Qt::ControlModifier);
  ASSERT_EQ(play.count(), 1);
  EXPECT_EQ(play.at(0).at(0).toString().toStdString(), p.address + "@" + p.revisions[2]);
  const QImage pi = policy.grab().toImage();
  EXPECT_TRUE(pi.save(dir + "/policy.png"));
  EXPECT_GT(pixel_variance(pi), 50.0);

  // The dark theme (the Studio's default): both still render, the graph redrawn in its colours.
  ui::apply_theme(/*dark=*/true);
  QCoreApplication::processEvents();
  const QImage cd = catalog.grab().toImage(), pd = policy.grab().toImage();
  EXPECT_TRUE(cd.save(dir + "/catalog_dark.png"));
  EXPECT_TRUE(pd.save(dir + "/policy_dark.png"));
  EXPECT_GT(pixel_variance(cd), 50.0);
  EXPECT_GT(pixel_variance(pd), 50.0);
  EXPECT_EQ(policy.scene()->backgroundBrush().color(), QApplication::palette().color(QPalette::Base));
  ui::apply_theme(/*dark=*/false);

  // The screenshot path picks a policy by itself and waits for header and lineage.
  ui::PolicyView auto_policy(conn.get());
  auto_policy.resize(1280, 620);
  QSignalSpy auto_ready(&auto_policy, &ui::StudioView::readyForScreenshot);
  auto_policy.prepareScreenshot();
  ASSERT_TRUE(QTest::qWaitFor([&] { return auto_ready.count() == 1; }, 60000));
  EXPECT_TRUE(auto_policy.model()->hasPolicy());
  EXPECT_GE(auto_policy.model()->nodes().size(), 1);
  EXPECT_TRUE(auto_policy.grab().toImage().save(dir + "/policy_auto.png"));
}

}  // namespace
}  // namespace spindle::testing
