// CatalogModel against a real spindled: filters and paging over a few policies, the
// multi-select actions (tag, untag, fork, rollback, delete with undo, PEFT export/import) and
// an error reply's code in the model's error state. Expected values come from the blocking
// client.

#include <QDir>
#include <QFile>
#include <QTemporaryDir>

#include "catalog_test_util.h"
#include "studio_fixture.h"

namespace spindle::testing {
namespace {

using ui::CatalogModel;

class CatalogModelTest : public StudioTest {};

std::vector<std::string> tags_of(protocol::Client& c, const std::string& address) {
  return c.catalog_show(address).policy.tags;
}

TEST_F(CatalogModelTest, ActionsShowUpInTheModel) {
  auto c = client();
  const std::string prefix = unique("act");
  const TrainedPolicy a = make_policy(*c, prefix + "-a", 2, "the first");
  const TrainedPolicy b = make_policy(*c, prefix + "-b", 1, "the second");
  auto conn = open_connection();
  CatalogModel model(conn.get());
  model.setUndoWindowMs(200);
  ui::CatalogFilter f;
  f.name_prefix = QString::fromStdString(prefix);
  model.setFilter(f);
  ASSERT_TRUE(wait_idle(model));
  ASSERT_EQ(model.rowCount(), 2);
  EXPECT_FALSE(model.canFetchMore());
  const int ra = model.rowOfName(QString::fromStdString(prefix + "-a"));
  ASSERT_GE(ra, 0);
  EXPECT_EQ(model.policyAt(ra).head, a.revisions.back());
  EXPECT_EQ(model.data(model.index(ra, CatalogModel::Description)).toString(), "the first");
  EXPECT_EQ(model.data(model.index(ra, CatalogModel::Head)).toString().toStdString(),
            a.revisions.back().substr(0, 12));

  // Tag both, then untag one: rows change in place and agree with the daemon.
  model.tagRows({0, 1}, {"best", "gsm8k"});
  ASSERT_TRUE(QTest::qWaitFor([&] {
    return model.policyAt(0).tags.size() == 2 && model.policyAt(1).tags.size() == 2;
  }, 30000));
  EXPECT_EQ(tags_of(*c, a.address), (std::vector<std::string>{"best", "gsm8k"}));
  model.untagRows({model.rowOfName(QString::fromStdString(prefix + "-b"))}, {"best"});
  const int rb = model.rowOfName(QString::fromStdString(prefix + "-b"));
  ASSERT_TRUE(QTest::qWaitFor([&] { return model.policyAt(rb).tags.size() == 1; }, 30000));
  EXPECT_EQ(tags_of(*c, b.address), std::vector<std::string>{"gsm8k"});
  EXPECT_EQ(model.data(model.index(rb, CatalogModel::Tags)).toString(), "gsm8k");

  // Fork: a new row where the name order puts it, heads equal.
  const QString fork = QString::fromStdString(prefix + "-c-fork");
  model.forkRow(model.rowOfName(QString::fromStdString(prefix + "-a")), fork);
  ASSERT_TRUE(QTest::qWaitFor([&] { return model.rowOfName(fork) >= 0; }, 30000));
  EXPECT_EQ(model.rowOfName(fork), 2);
  EXPECT_EQ(model.policyAt(2).head, a.revisions.back());
  EXPECT_EQ(c->catalog_show(prefix + "-c-fork").policy.head, a.revisions.back());
  EXPECT_FALSE(model.policyAt(2).forked_from.empty());

  // Rollback a to its first revision.
  model.rollbackRow(model.rowOfName(QString::fromStdString(prefix + "-a")),
                    QString::fromStdString(a.revisions.front()));
  ASSERT_TRUE(QTest::qWaitFor([&] {
    return model.policyAt(model.rowOfName(QString::fromStdString(prefix + "-a"))).head ==
           a.revisions.front();
  }, 30000));
  EXPECT_EQ(c->catalog_show(a.address).policy.head, a.revisions.front());

  // Delete b, then undo inside the window: hidden at once, back after undo, never sent.
  QSignalSpy finished(&model, &CatalogModel::deleteFinished);
  model.deleteRows({model.rowOfName(QString::fromStdString(prefix + "-b"))});
  EXPECT_EQ(model.rowOfName(QString::fromStdString(prefix + "-b")), -1);
  EXPECT_EQ(model.rowCount(), 2);
  EXPECT_TRUE(model.hasPendingDelete());
  model.undoDelete();
  EXPECT_FALSE(model.hasPendingDelete());
  EXPECT_EQ(model.rowOfName(QString::fromStdString(prefix + "-b")), 1);
  ASSERT_EQ(finished.count(), 1);
  EXPECT_EQ(finished.at(0).at(0).toInt(), 0);

  // Delete the fork and let the window pass: the daemon deletes it; b (undone) stays.
  model.deleteRows({model.rowOfName(fork)});
  EXPECT_EQ(model.rowOfName(fork), -1);
  ASSERT_TRUE(QTest::qWaitFor([&] { return finished.count() == 2; }, 30000));
  EXPECT_EQ(finished.at(1).at(0).toInt(), 1);
  EXPECT_THROW(c->catalog_show(prefix + "-c-fork"), protocol::ClientError);
  EXPECT_EQ(c->catalog_show(b.address).policy.name, prefix + "-b");
  EXPECT_TRUE(model.lastErrorCode().isEmpty());

  // A reload from the first page agrees.
  model.reset();
  ASSERT_TRUE(wait_idle(model));
  EXPECT_EQ(model.rowCount(), 2);
  EXPECT_EQ(model.rowOfName(fork), -1);
  EXPECT_GE(model.rowOfName(QString::fromStdString(prefix + "-b")), 0);
}

TEST_F(CatalogModelTest, ErrorReplyKeepsTheServersCode) {
  auto c = client();
  const std::string prefix = unique("err");
  make_policy(*c, prefix + "-a", 1);
  make_policy(*c, prefix + "-b", 1);
  std::string expected_code;
  try {
    c->catalog_fork("spindle://alice/" + prefix + "-a@latest", prefix + "-b");
  } catch (const protocol::ClientError& e) {
    expected_code = e.code();
  }
  ASSERT_FALSE(expected_code.empty()) << "forking onto an existing name must fail";

  auto conn = open_connection();
  CatalogModel model(conn.get());
  ui::CatalogFilter f;
  f.name_prefix = QString::fromStdString(prefix);
  model.setFilter(f);
  ASSERT_TRUE(wait_idle(model));
  ASSERT_EQ(model.rowCount(), 2);
  QSignalSpy errors(&model, &CatalogModel::error);
  model.forkRow(0, QString::fromStdString(prefix + "-b"));
  ASSERT_TRUE(QTest::qWaitFor([&] { return errors.count() == 1; }, 30000));
  EXPECT_EQ(model.lastErrorCode().toStdString(), expected_code);
  EXPECT_EQ(errors.at(0).at(0).toString().toStdString(), expected_code);
  EXPECT_TRUE(model.lastErrorMessage().contains("already exists")) << model.lastErrorMessage().toStdString();
  EXPECT_EQ(model.rowCount(), 2);  // nothing inserted

  // The next action starts clean; a missing revision is the daemon's not_found.
  model.rollbackRow(0, "0123456789abcdef0123456789abcdef");
  ASSERT_TRUE(QTest::qWaitFor([&] { return errors.count() == 2; }, 30000));
  EXPECT_EQ(model.lastErrorCode(), "not_found");
}

TEST_F(CatalogModelTest, FiltersAndSearch) {
  auto c = client();
  const std::string prefix = unique("flt");
  make_policy(*c, prefix + "-x", 1, "zebra crossing");
  make_policy(*c, prefix + "-y", 1, "plain");
  c->catalog_tag("spindle://alice/" + prefix + "-y", {"keep"});
  auto conn = open_connection();
  CatalogModel model(conn.get());
  ui::CatalogFilter f;
  f.name_prefix = QString::fromStdString(prefix);
  f.tag = "keep";
  model.setFilter(f);
  ASSERT_TRUE(wait_idle(model));
  ASSERT_EQ(model.rowCount(), 1);
  EXPECT_EQ(model.policyAt(0).name, prefix + "-y");
  // Updated-since in the future: the client-side bound drops every row.
  f.tag.clear();
  f.updated_since_ms = QDateTime::currentMSecsSinceEpoch() + 3600 * 1000;
  model.setFilter(f);
  ASSERT_TRUE(wait_idle(model));
  EXPECT_EQ(model.rowCount(), 0);
  EXPECT_FALSE(model.canFetchMore());
  // Search replaces the list.
  model.setFilter({});
  model.search("zebra");
  ASSERT_TRUE(wait_idle(model));
  ASSERT_GE(model.rowCount(), 1);
  EXPECT_GE(model.rowOfName(QString::fromStdString(prefix + "-x")), 0);
  EXPECT_EQ(model.rowOfName(QString::fromStdString(prefix + "-y")), -1);
  EXPECT_FALSE(model.canFetchMore());
  // Sorting by a column other than name orders what is loaded.
  model.search("");
  ASSERT_TRUE(wait_idle(model));
  model.sort(CatalogModel::Name, Qt::DescendingOrder);
  for (int i = 1; i < model.rowCount(); ++i) EXPECT_GT(model.policyAt(i - 1).name, model.policyAt(i).name);
}

TEST_F(CatalogModelTest, PeftExportThenImport) {
  auto c = client();
  const std::string prefix = unique("peft");
  const TrainedPolicy a = make_policy(*c, prefix + "-a", 1);
  auto conn = open_connection();
  CatalogModel model(conn.get());
  ui::CatalogFilter f;
  f.name_prefix = QString::fromStdString(prefix);
  model.setFilter(f);
  ASSERT_TRUE(wait_idle(model));
  ASSERT_EQ(model.rowCount(), 1);
  QTemporaryDir dir;
  QSignalSpy exported(&model, &CatalogModel::exported);
  model.exportPeft(0, dir.filePath("out"));
  ASSERT_TRUE(QTest::qWaitFor([&] { return exported.count() == 1; }, 30000))
      << model.lastErrorCode().toStdString() << " " << model.lastErrorMessage().toStdString();
  const protocol::ExportedPeft expected = c->export_peft(a.address);
  QFile config(dir.filePath("out/adapter_config.json")), weights(dir.filePath("out/adapter_model.safetensors"));
  ASSERT_TRUE(config.open(QIODevice::ReadOnly));
  ASSERT_TRUE(weights.open(QIODevice::ReadOnly));
  EXPECT_EQ(config.readAll().toStdString(), expected.adapter_config_json);
  EXPECT_EQ(weights.readAll().toStdString(), expected.adapter_model);

  model.importPeft(dir.filePath("out"), QString::fromStdString(prefix + "-b"));
  ASSERT_TRUE(QTest::qWaitFor([&] { return model.rowCount() == 2; }, 30000))
      << model.lastErrorCode().toStdString() << " " << model.lastErrorMessage().toStdString();
  EXPECT_EQ(model.policyAt(1).name, prefix + "-b");
  EXPECT_EQ(c->catalog_show(prefix + "-b").policy.head, model.policyAt(1).head);
  EXPECT_FALSE(model.policyAt(1).head.empty());
}

}  // namespace
}  // namespace spindle::testing
