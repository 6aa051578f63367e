// The reward designer against a real spindled: histograms (per term and total) and scored
// samples equal the blocking client's reward_test for the same request; rows from a daemon
// dataset and a JSONL file; spec save -> load round trip; autosave restore; the view renders.

#include <QApplication>
#include <QImage>
#include <QPalette>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

#include <fstream>
#include <set>

#include "gui_images.h"
#include "studio_fixture.h"
#include "spindle/ui/theme.h"
#include "spindle/ui/reward_designer_model.h"
#include "spindle/ui/reward_designer_view.h"
#include "../../../ui/src/reward_histogram.h"

namespace spindle::testing {
namespace {


using nlohmann::json;

class RewardDesignerTest : public StudioTest {
 protected:
  // A designer with two terms (keywords, length) on the base, plugins loaded.
  void build_spec(ui::RewardDesignerModel& m) {
    ASSERT_TRUE(QTest::qWaitFor([&] { return m.plugin("length") && m.plugin("keywords"); }, 20000));
    const int kw = m.addTerm("keywords", "story");
    m.setTermValue(kw, "present", json::array({"the", "dog", "happy"}));
    const int len = m.addTerm("length", "len");
    m.setTermValue(len, "target", 16);
    m.setTermValue(len, "tolerance", 3);
    m.setTermWeight(len, 0.5);
  }
};

TEST_F(RewardDesignerTest, HistogramsEqualTheBlockingRewardTest) {
  auto conn = open_connection();
  auto* model = new ui::RewardDesignerModel(conn.get());
  model->setAutosavePath({});
  ui::RewardDesignerView view(conn.get(), model);
  build_spec(*model);
  auto c = client();
  model->setAddress(QString::fromStdString(c->capabilities().bases.at(0).id));
  model->rows()->setRows({{"Once upon a time", "", ""},
                          {"The little dog", "", ""},
                          {"Lily was happy because", "", R"({"topic": "feelings"})"}});
  model->setNumSamples(6);
  protocol::SamplingParamsMsg p;
  p.max_tokens = 20;
  p.temperature = 1.0f;
  p.seed = 42;
  model->setSamplingParams(p);
  model->setBins(5);
  QSignalSpy done(model, &ui::RewardDesignerModel::outcomeChanged);
  view.runAction()->trigger();
  ASSERT_TRUE(QTest::qWaitFor([&] { return done.count() > 0 || !model->error().isEmpty(); }, 120000))
      << "no reply";
  ASSERT_TRUE(model->error().isEmpty()) << model->error().toStdString();

  const auto expected = c->reward_test(model->request());
  const auto& got = model->outcome();
  ASSERT_EQ(got.terms.size(), 2u);
  ASSERT_EQ(expected.terms.size(), 2u);
  for (size_t t = 0; t < 2; ++t) {
    EXPECT_EQ(got.terms[t].name, expected.terms[t].name);
    EXPECT_EQ(got.terms[t].scores.histogram, expected.terms[t].scores.histogram) << t;
    EXPECT_EQ(got.terms[t].scores.n, 18u);
    EXPECT_DOUBLE_EQ(got.terms[t].scores.mean, expected.terms[t].scores.mean);
  }
  EXPECT_EQ(got.total.histogram, expected.total.histogram);
  EXPECT_EQ(got.total.histogram.size(), 5u);
  EXPECT_DOUBLE_EQ(got.total.min, expected.total.min);
  EXPECT_DOUBLE_EQ(got.total.max, expected.total.max);

  // The charts show the same counts: one per term and the total.
  const auto charts = view.histograms();
  ASSERT_EQ(charts.size(), 3);
  EXPECT_EQ(charts[0]->counts(), expected.terms[0].scores.histogram);
  EXPECT_EQ(charts[1]->counts(), expected.terms[1].scores.histogram);
  EXPECT_EQ(charts[2]->counts(), expected.total.histogram);
  // Bin ranges span [min, max].
  const auto bins = ui::histogramBins(expected.total);
  ASSERT_EQ(bins.size(), 5u);
  EXPECT_DOUBLE_EQ(bins.front().lo, expected.total.min);
  EXPECT_DOUBLE_EQ(bins.back().hi, expected.total.max);

  // The samples table: every sample with its prompt, text, scores and total.
  auto* samples = model->samples();
  ASSERT_EQ(samples->rowCount(), int(expected.samples.size()));
  ASSERT_EQ(samples->columnCount(), 3 + 2 * 2 + 1);
  EXPECT_EQ(samples->headerData(3, Qt::Horizontal, Qt::DisplayRole).toString(), "story");
  EXPECT_EQ(samples->headerData(6, Qt::Horizontal, Qt::DisplayRole).toString(), "len info");
  for (int i = 0; i < samples->rowCount(); ++i) {
    const auto& want = expected.samples[size_t(i)];
    const auto& s = samples->samples()[size_t(i)];
    EXPECT_EQ(s.row, want.row);
    EXPECT_EQ(s.prompt.toStdString(), model->rows()->rows()[want.row].prompt);
    EXPECT_EQ(s.text.toStdString(), want.text);
    EXPECT_EQ(s.scores, want.scores);
    EXPECT_DOUBLE_EQ(s.total, want.total);
    EXPECT_EQ(samples->data(samples->index(i, 2), Qt::DisplayRole).toString().toStdString(), want.text);
    EXPECT_EQ(samples->data(samples->index(i, 6), Qt::DisplayRole).toString().toStdString(),
              want.infos[1]);
  }
}

TEST_F(RewardDesignerTest, RowsFromADatasetAndAJsonlFile) {
  auto conn = open_connection();
  ui::RewardDesignerModel model(conn.get());
  model.setAutosavePath({});
  model.refreshDatasets();
  ASSERT_TRUE(QTest::qWaitFor([&] { return !model.datasets().empty(); }, 20000));
  auto c = client();
  const auto expected = c->datasets(20);
  ASSERT_EQ(model.datasets().size(), expected.datasets.size());
  const protocol::DatasetInfo* arith = nullptr;
  for (const auto& d : expected.datasets) {
    if (d.name == "arith") arith = &d;
  }
  ASSERT_NE(arith, nullptr);
  ASSERT_TRUE(model.useDataset("arith"));
  EXPECT_EQ(model.rows()->rows(), arith->examples);

  QTemporaryDir dir;
  const QString path = dir.filePath("rows.jsonl");
  std::ofstream(path.toStdString())
      << R"({"prompt": "Two plus two is", "reference": "4", "level": 1})" << "\n\n"
      << R"({"question": "What is 3+5?", "answer": "#### 8"})" << "\n";
  ASSERT_EQ(model.loadJsonl(path), QString());
  const auto& rows = model.rows()->rows();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].prompt, "Two plus two is");
  EXPECT_EQ(rows[0].reference, "4");
  EXPECT_EQ(json::parse(rows[0].metadata_json), json({{"level", 1}}));
  EXPECT_EQ(rows[1].prompt, "What is 3+5?");
  EXPECT_EQ(rows[1].reference, "#### 8");
  EXPECT_EQ(rows[1].metadata_json, "");
  std::ofstream(dir.filePath("bad.jsonl").toStdString()) << "{\"prompt\": \"a\"}\nnot json\n";
  EXPECT_TRUE(model.loadJsonl(dir.filePath("bad.jsonl")).contains("line 2"));
  EXPECT_EQ(model.rows()->rows().size(), 2u) << "a bad file leaves the rows alone";
  // Editing a cell edits the row.
  model.rows()->setData(model.rows()->index(1, ui::RewardRowsModel::reference_col), "#### 9", Qt::EditRole);
  EXPECT_EQ(model.rows()->rows()[1].reference, "#### 9");
}

TEST_F(RewardDesignerTest, SpecSaveLoadRoundTripAndAutosaveRestore) {
  auto conn = open_connection();
  QTemporaryDir dir;
  const QString autosave = dir.filePath("autosave/reward-designer-autosave.json");
  std::string spec;
  json state;
  {
    ui::RewardDesignerModel model(conn.get());
    model.setAutosavePath(autosave);
    model.refreshPlugins();
    build_spec(model);
    model.setAddress("spindle://alice/some-policy@latest");
    model.setNumSamples(3);
    model.rows()->setRows({{"Once", "ref", R"({"k": 2})"}});
    spec = model.specJson();
    state = model.stateJson();

    // Save -> load gives the same spec, in the exact spec_json format.
    const QString path = dir.filePath("spec.json");
    ASSERT_EQ(model.saveSpec(path), QString());
    std::ifstream in(path.toStdString());
    const json saved = json::parse(in);
    ASSERT_TRUE(saved.contains("terms"));
    EXPECT_EQ(saved.size(), 1u);
    EXPECT_EQ(saved["terms"][0], json({{"name", "story"},
                                       {"plugin", "keywords"},
                                       {"weight", 1.0},
                                       {"config", {{"case_sensitive", false},
                                                   {"mode", "fraction"},
                                                   {"present", {"the", "dog", "happy"}},
                                                   {"whole_words", false}}}}));
    EXPECT_EQ(saved["terms"][1]["config"], json({{"target", 16}, {"tolerance", 3}, {"unit", "tokens"}, {"floor", 0.0}}));
    ui::RewardDesignerModel other(conn.get());
    other.setAutosavePath({});
    ASSERT_EQ(other.loadSpec(path), QString());  // before its plugins are known
    EXPECT_EQ(other.specJson(), spec);
    other.refreshPlugins();
    ASSERT_TRUE(QTest::qWaitFor([&] { return other.plugin("length") != nullptr; }, 20000));
    EXPECT_EQ(other.specJson(), spec) << "the forms rebuilt from the schemas keep the config";
    EXPECT_FALSE(other.term(1).form.fields().empty());
    EXPECT_EQ(other.term(1).form.value("target"), json(16));
    EXPECT_TRUE(other.setSpecJson(R"({"terms": [{"plugin": "length"}]})").contains("name"));

    // The edits were autosaved (debounced): wait for the write, then "crash" (no flush).
    QSignalSpy saved_spy(&model, &ui::RewardDesignerModel::autosaved);
    model.setTermWeight(1, 0.25);
    state["spec"]["terms"][1]["weight"] = 0.25;
    spec = model.specJson();
    ASSERT_TRUE(QTest::qWaitFor([&] { return saved_spy.count() > 0; }, 5000));
    EXPECT_EQ(saved_spy.count(), 1) << "one write per burst of edits";
    model.setAutosavePath({});  // what the destructor flushes is not what we check
  }
  ASSERT_TRUE(QFile::exists(autosave));
  ui::RewardDesignerModel restored(conn.get());
  restored.setAutosavePath(autosave);
  ASSERT_TRUE(restored.restoreAutosave()) << restored.error().toStdString();
  EXPECT_EQ(restored.specJson(), spec);
  EXPECT_EQ(restored.address(), "spindle://alice/some-policy@latest");
  EXPECT_EQ(restored.numSamples(), 3);
  EXPECT_EQ(restored.stateJson(), state);
  ASSERT_EQ(restored.rows()->rows().size(), 1u);
  EXPECT_EQ(restored.rows()->rows()[0].metadata_json, R"({"k": 2})");
}

TEST_F(RewardDesignerTest, ScreenshotWithRealScores) {
  auto conn = open_connection();
  auto* model = new ui::RewardDesignerModel(conn.get());
  model->setAutosavePath({});
  ui::RewardDesignerView view(conn.get(), model);
  view.resize(1500, 950);
  QSignalSpy ready(&view, &ui::StudioView::readyForScreenshot);
  view.prepareScreenshot();
  ASSERT_TRUE(QTest::qWaitFor([&] { return ready.count() > 0; }, 120000));
  EXPECT_TRUE(view.errorText().isEmpty()) << view.errorText().toStdString();
  EXPECT_EQ(view.histograms().size(), 3);
  view.show();
  QApplication::processEvents();
  const QImage image = view.grab().toImage();
  image.save(screenshot_dir() + "/rewards.png");
  QApplication::setPalette(ui::dark_palette());  // the Studio's own dark theme
  QApplication::processEvents();
  const QImage dark = view.grab().toImage();
  dark.save(screenshot_dir() + "/rewards_dark.png");
  QApplication::setPalette(QPalette());
  EXPECT_NE(dark.pixel(5, 5), image.pixel(5, 5)) << "the palette did not apply";
  EXPECT_GT(sampled_colours(image), 8u);
}

}  // namespace
}  // namespace spindle::testing
