// The Playground against a real spindled: columns of completions equal the blocking client's
// `sample` with the same prompt tokens, seeds and parameters (tokens, logprobs, text), tokens
// arrive over several stream messages with one text piece each (concatenating to the text,
// shown while streaming), chips show the pieces and tooltips name id, piece and logprob, errors
// show in their column, and the view renders.

#include <QApplication>
#include <QImage>
#include <QPalette>
#include <QSignalSpy>
#include <QTest>

#include <cctype>
#include <cmath>
#include <set>

#include "gui_images.h"
#include "studio_fixture.h"
#include "spindle/ui/theme.h"
#include "spindle/ui/playground_model.h"
#include "spindle/ui/playground_view.h"
#include "../../../ui/src/playground_column.h"
#include "../../../ui/src/token_strip.h"

namespace spindle::testing {
namespace {


using protocol::SamplingParamsMsg;

// A policy that samples unlike the base: a fresh LoRA has B = 0, so train it a few steps on a
// short text first. Returns its address at the saved revision.
std::string trained_policy(protocol::Client& client, const std::string& name) {
  protocol::CreateTrainingRequest req;
  req.policy = name;
  req.rank = 4;
  req.alpha = 8.0f;
  req.seed = 3;
  const auto session = client.create_training(req);
  const auto tokens = client.tokenize("Once upon a time there was a big red ball in the park.");
  protocol::Datum d;
  d.model_input.assign(tokens.begin(), tokens.end() - 1);
  d.target_tokens.assign(tokens.begin() + 1, tokens.end());
  protocol::AdamParamsMsg adam;
  adam.learning_rate = 5e-2f;
  for (int step = 0; step < 3; ++step) {
    client.forward_backward(session.session_id, {d});
    client.optim_step(session.session_id, adam);
  }
  const auto saved = client.save_weights(session.session_id, "playground-test");
  client.close_training(session.session_id);
  return saved.address;
}

ui::PlaygroundParams params(quint64 seed) {
  ui::PlaygroundParams p;
  p.max_tokens = 24;
  p.temperature = 1.0;
  p.top_k = 0;
  p.top_p = 0.95;
  p.seed = seed;
  p.num_samples = 3;
  return p;
}

bool all_finished(const ui::PlaygroundModel& m) {
  for (int i = 0; i < m.columnCount(); ++i) {
    const auto s = m.column(i).state;
    if (s != ui::PlaygroundColumn::State::done && s != ui::PlaygroundColumn::State::failed) {
      return false;
    }
  }
  return !m.running();
}

class PlaygroundTest : public StudioTest {};

TEST_F(PlaygroundTest, TwoColumnsEqualBlockingSampleAndStreamTokens) {
  auto blocking = client();
  const std::string policy = trained_policy(*blocking, unique("pg-policy"));
  const std::string base = blocking->capabilities().bases.at(0).id;
  auto conn = open_connection();
  ui::PlaygroundView view(conn.get());
  auto* model = view.model();
  ASSERT_TRUE(QTest::qWaitFor([&] { return model->columnCount() == 2; }, 20000));
  EXPECT_EQ(model->baseId().toStdString(), base);
  model->setAddress(0, QString::fromStdString(base));
  model->setParams(0, params(11));
  view.addColumn(QString::fromStdString(policy));  // replaces the untouched second base column
  ASSERT_EQ(model->columnCount(), 2);
  EXPECT_EQ(model->column(1).address.toStdString(), policy);
  model->setParams(1, params(11));

  // While streaming, every sequence has one piece per token and shows their concatenation.
  int streamed_updates = 0, misaligned = 0;
  const auto watch =
      QObject::connect(model, &ui::PlaygroundModel::columnChanged, model, [&](int index) {
        for (const ui::PlaygroundSequence& seq : model->column(index).sequences) {
          if (seq.final || seq.tokens.empty()) continue;
          std::string joined;
          for (const auto& piece : seq.pieces) joined += piece;
          if (seq.pieces.size() != seq.tokens.size() ||
              seq.text != QString::fromStdString(joined)) {
            ++misaligned;
          }
          if (!seq.text.isEmpty()) ++streamed_updates;
        }
      });

  const QString prompt = QStringLiteral("Once upon a time, a little girl");
  view.setPrompt(prompt);
  view.runAction()->trigger();
  ASSERT_TRUE(QTest::qWaitFor([&] { return all_finished(*model); }, 120000));

  const auto prompt_tokens = blocking->tokenize(prompt.toStdString(), /*add_special_tokens=*/true);
  EXPECT_EQ(model->promptTokens(), prompt_tokens);
  std::vector<std::vector<float>> first_logprobs;
  for (int c = 0; c < 2; ++c) {
    const ui::PlaygroundColumn& col = model->column(c);
    ASSERT_EQ(col.state, ui::PlaygroundColumn::State::done) << col.error.toStdString();
    const auto expected = blocking->sample(col.address.toStdString(), prompt_tokens, 3,
                                           params(11).toMsg());
    EXPECT_EQ(col.revision_id.toStdString(), expected.revision_id);
    ASSERT_EQ(col.sequences.size(), expected.sequences.size());
    for (size_t s = 0; s < expected.sequences.size(); ++s) {
      const auto& got = col.sequences[s];
      const auto& want = expected.sequences[s];
      EXPECT_TRUE(got.final);
      EXPECT_EQ(got.tokens, want.tokens) << "column " << c << " sample " << s;
      // Logprobs agree to float rounding only: the columns ran concurrently, so the policy's
      // rows shared a mixed-adapter batch with the base's, unlike the blocking call's.
      ASSERT_EQ(got.logprobs.size(), want.logprobs.size());
      for (size_t k = 0; k < want.logprobs.size(); ++k) {
        EXPECT_NEAR(got.logprobs[k], want.logprobs[k], 1e-4) << "column " << c << " token " << k;
      }
      EXPECT_EQ(got.text.toStdString(), want.text) << "column " << c << " sample " << s;
      // The blocking reply has no pieces; the streamed ones concatenate to its text exactly
      // (no stop strings or stop tokens here; PROTOCOL.md "Streaming sample").
      ASSERT_EQ(got.pieces.size(), want.tokens.size());
      std::string joined;
      for (const auto& piece : got.pieces) joined += piece;
      EXPECT_EQ(joined, want.text) << "column " << c << " sample " << s;
      EXPECT_EQ(got.stop_reason.toStdString(), want.stop_reason);
      // Streamed: one message per engine step, so a sequence of several tokens came in several.
      if (want.tokens.size() >= 2) EXPECT_GT(got.messages, 1) << "column " << c << " sample " << s;
      if (want.stop_reason == "length") EXPECT_EQ(got.tokens.size(), 24u);
    }
    first_logprobs.push_back(col.sequences[0].logprobs);
  }
  EXPECT_NE(first_logprobs[0], first_logprobs[1]) << "the trained policy samples like the base";
  QObject::disconnect(watch);
  EXPECT_EQ(misaligned, 0);
  EXPECT_GT(streamed_updates, 0) << "no text was shown before the final message";

  // The widgets show what the model holds: text of the browsed sample and one chip per token.
  const auto columns = view.columnWidgets();
  ASSERT_EQ(columns.size(), 2);
  for (int c = 0; c < 2; ++c) {
    for (int s = 0; s < 3; ++s) {
      columns[c]->showSample(s);
      const auto& seq = model->column(c).sequences[size_t(s)];
      EXPECT_EQ(columns[c]->shownText(), seq.text);
      EXPECT_EQ(columns[c]->tokenStrip()->tokenCount(), int(seq.tokens.size()));
    }
  }
  const auto& seq0 = model->column(0).sequences[0];
  columns[0]->showSample(0);
  const ui::TokenStrip* strip = columns[0]->tokenStrip();
  // A token whose piece is a word after a space (stories text is ASCII): the tooltip quotes the
  // piece as is, the chip shows the space as '·'.
  size_t k = 0;
  while (k < seq0.pieces.size() && !(seq0.pieces[k].size() > 1 && seq0.pieces[k][0] == ' ' &&
                                     std::isalpha(static_cast<unsigned char>(seq0.pieces[k][1])))) {
    ++k;
  }
  ASSERT_LT(k, seq0.pieces.size()) << "no ' word' piece in " << seq0.text.toStdString();
  const QString piece = QString::fromStdString(seq0.pieces[k]);
  const QString tip = strip->tokenToolTip(int(k));
  EXPECT_TRUE(tip.startsWith(QStringLiteral("id %1 · ").arg(seq0.tokens[k]))) << tip.toStdString();
  EXPECT_TRUE(tip.contains("'" + piece + "'")) << tip.toStdString();
  EXPECT_TRUE(tip.contains(QString::number(seq0.logprobs[k], 'f', 4))) << tip.toStdString();
  EXPECT_TRUE(tip.contains(QString::number(std::exp(double(seq0.logprobs[k])), 'f', 4)))
      << tip.toStdString();
  EXPECT_EQ(strip->chipText(int(k)), QChar(0x00B7) + piece.mid(1));
  // Whitespace and split characters stay visible on chips; a token without text shows its id.
  EXPECT_EQ(ui::TokenStrip::displayPiece(" a\n", /*visible_spaces=*/true),
            QString(QChar(0x00B7)) + "a\\n");
  EXPECT_EQ(ui::TokenStrip::displayPiece("\xe2\x9c", /*visible_spaces=*/false),
            QStringLiteral("\\xE2\\x9C"));
  EXPECT_EQ(ui::TokenStrip::displayPiece("✓", /*visible_spaces=*/false), QStringLiteral("✓"));
  ui::TokenStrip stop_strip;
  stop_strip.setTokens({7, 2}, {-0.5f, -1.0f}, {"hi", ""});
  EXPECT_EQ(stop_strip.chipText(1), QStringLiteral("[2]"));
  EXPECT_TRUE(stop_strip.tokenToolTip(1).startsWith(QStringLiteral("id 2 · '' · ")));
  EXPECT_GT(ui::TokenStrip::shadeAlpha(-0.01f), ui::TokenStrip::shadeAlpha(-5.0f));
}

TEST_F(PlaygroundTest, ErrorShowsInItsColumnAndOthersStillRun) {
  auto conn = open_connection();
  ui::PlaygroundModel model(conn.get());
  model.fetchBase();
  ASSERT_TRUE(QTest::qWaitFor([&] { return !model.baseId().isEmpty(); }, 10000));
  ui::PlaygroundParams p = params(5);
  p.num_samples = 1;
  p.max_tokens = 8;
  model.addColumn(model.baseId(), p);
  model.addColumn(QStringLiteral("spindle://alice/no-such-policy@latest"), p);
  model.setPrompt(QStringLiteral("The dog"));
  model.run();
  ASSERT_TRUE(QTest::qWaitFor([&] { return all_finished(model); }, 60000));
  EXPECT_EQ(model.column(0).state, ui::PlaygroundColumn::State::done);
  EXPECT_EQ(model.column(1).state, ui::PlaygroundColumn::State::failed);
  EXPECT_TRUE(model.column(1).error.startsWith("not_found: ")) << model.column(1).error.toStdString();
  EXPECT_FALSE(model.column(0).sequences.at(0).tokens.empty());

  // An empty prompt is refused locally, inline.
  model.setPrompt({});
  model.run();
  EXPECT_FALSE(model.promptError().isEmpty());
  EXPECT_EQ(model.addColumn(model.baseId()), 2);
  EXPECT_EQ(model.addColumn(model.baseId()), 3);
  EXPECT_EQ(model.addColumn(model.baseId()), -1) << "at most 4 columns";
}

TEST_F(PlaygroundTest, AddressCompletionFromTheCatalog) {
  auto blocking = client();
  const std::string name = unique("pgcomplete");
  protocol::CreateTrainingRequest req;
  req.policy = name;
  req.rank = 2;
  const auto session = blocking->create_training(req);
  const auto saved = blocking->save_weights(session.session_id);
  blocking->close_training(session.session_id);
  auto conn = open_connection();
  ui::PlaygroundModel model(conn.get());
  QSignalSpy spy(&model, &ui::PlaygroundModel::completions);
  model.requestCompletions(QString::fromStdString(name));
  ASSERT_TRUE(QTest::qWaitFor([&] { return spy.count() > 0; }, 10000));
  const QStringList got = spy.last().at(1).toStringList();
  EXPECT_TRUE(got.contains(QString::fromStdString("spindle://alice/" + name + "@latest")))
      << got.join(", ").toStdString();
}

TEST_F(PlaygroundTest, ScreenshotWithRealCompletions) {
  auto conn = open_connection();
  ui::PlaygroundView view(conn.get());
  view.resize(1400, 800);
  QSignalSpy ready(&view, &ui::StudioView::readyForScreenshot);
  view.prepareScreenshot();
  ASSERT_TRUE(QTest::qWaitFor([&] { return ready.count() > 0; }, 60000));
  view.show();
  QApplication::processEvents();  // pending layout requests
  const QImage image = view.grab().toImage();
  image.save(screenshot_dir() + "/playground.png");
  QApplication::setPalette(ui::dark_palette());  // the Studio's own dark theme
  QApplication::processEvents();
  const QImage dark = view.grab().toImage();
  dark.save(screenshot_dir() + "/playground_dark.png");
  QApplication::setPalette(QPalette());
  EXPECT_NE(dark.pixel(5, 5), image.pixel(5, 5)) << "the palette did not apply";
  // Not blank: the pixels vary.
  EXPECT_GT(sampled_colours(image), 8u);
  for (int i = 0; i < view.model()->columnCount(); ++i) {
    EXPECT_EQ(view.model()->column(i).state, ui::PlaygroundColumn::State::done);
  }
}

}  // namespace
}  // namespace spindle::testing
