#include "playground_column.h"

#include <QCompleter>
#include <QEvent>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QTextCursor>
#include <QTextEdit>
#include <QScrollArea>
#include <QSpinBox>
#include <QStringListModel>
#include <QToolButton>
#include <QVBoxLayout>

#include <climits>

#include "spindle/ui/playground_model.h"
#include "token_strip.h"

namespace spindle::ui {

PlaygroundColumnWidget::PlaygroundColumnWidget(PlaygroundModel* model, int column_id,
                                               QWidget* parent)
    : QWidget(parent), model_(model), id_(column_id) {
  auto* top = new QVBoxLayout(this);
  top->setContentsMargins(4, 4, 4, 4);

  auto* head = new QHBoxLayout;
  address_ = new QLineEdit(this);
  address_->setPlaceholderText(tr("spindle://tenant/policy@latest or the base id"));
  address_->setToolTip(tr("A policy address (any revision) or the bare base id"));
  completions_ = new QStringListModel(this);
  completer_ = new QCompleter(completions_, this);
  completer_->setCaseSensitivity(Qt::CaseInsensitive);
  completer_->setFilterMode(Qt::MatchContains);
  address_->setCompleter(completer_);
  remove_ = new QToolButton(this);
  remove_->setText(tr("✕"));
  remove_->setToolTip(tr("Remove this column"));
  head->addWidget(address_, 1);
  head->addWidget(remove_);
  top->addLayout(head);

  auto* params = new QFormLayout;
  params->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
  auto* row1 = new QHBoxLayout;
  max_tokens_ = new QSpinBox(this);
  max_tokens_->setRange(1, 4096);
  max_tokens_->setToolTip(tr("max_tokens"));
  temperature_ = new QDoubleSpinBox(this);
  temperature_->setRange(0, 5);
  temperature_->setSingleStep(0.1);
  temperature_->setToolTip(tr("temperature (0 = greedy)"));
  top_k_ = new QSpinBox(this);
  top_k_->setRange(0, 100000);
  top_k_->setToolTip(tr("top_k (0 = off)"));
  top_p_ = new QDoubleSpinBox(this);
  top_p_->setRange(0.01, 1);
  top_p_->setSingleStep(0.05);
  top_p_->setToolTip(tr("top_p"));
  row1->addWidget(new QLabel(tr("max tokens"), this));
  row1->addWidget(max_tokens_);
  row1->addWidget(new QLabel(tr("temp"), this));
  row1->addWidget(temperature_);
  row1->addWidget(new QLabel(tr("top-k"), this));
  row1->addWidget(top_k_);
  row1->addWidget(new QLabel(tr("top-p"), this));
  row1->addWidget(top_p_);
  params->addRow(row1);
  auto* row2 = new QHBoxLayout;
  seed_ = new QSpinBox(this);
  seed_->setRange(0, INT_MAX);
  seed_->setToolTip(tr("seed"));
  samples_ = new QSpinBox(this);
  samples_->setRange(1, 64);
  samples_->setToolTip(tr("num_samples"));
  stops_ = new QLineEdit(this);
  stops_->setPlaceholderText(tr("stop strings, | separated"));
  row2->addWidget(new QLabel(tr("seed"), this));
  row2->addWidget(seed_);
  row2->addWidget(new QLabel(tr("samples"), this));
  row2->addWidget(samples_);
  row2->addWidget(stops_, 1);
  params->addRow(row2);
  top->addLayout(params);

  auto* status = new QHBoxLayout;
  state_ = new QLabel(this);
  state_->setWordWrap(true);
  state_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  browse_ = new QSpinBox(this);
  browse_->setPrefix(tr("sample "));
  browse_->setRange(1, 1);
  browse_->setToolTip(tr("Browse the column's samples"));
  status->addWidget(state_, 1);
  status->addWidget(browse_);
  top->addLayout(status);

  text_ = new QTextEdit(this);
  text_->setReadOnly(true);
  text_->setAcceptRichText(false);
  text_->setPlaceholderText(tr("The completion appears here (the prompt in grey)"));
  top->addWidget(text_, 3);
  auto* legend = new QLabel(tr("Tokens as their text (· = space), shaded by p = exp(logprob) "
                               "(darker = more likely); hover one for its id and logprob"),
                            this);
  legend->setWordWrap(true);
  legend->setForegroundRole(QPalette::PlaceholderText);
  top->addWidget(legend);

  auto* scroll = new QScrollArea(this);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::StyledPanel);
  strip_ = new TokenStrip(scroll);
  scroll->setWidget(strip_);
  top->addWidget(scroll, 2);

  // Initial values from the model, then every edit goes back to it.
  const PlaygroundColumn& c = model_->column(index());
  address_->setText(c.address);
  max_tokens_->setValue(c.params.max_tokens);
  temperature_->setValue(c.params.temperature);
  top_k_->setValue(c.params.top_k);
  top_p_->setValue(c.params.top_p);
  seed_->setValue(int(std::min<quint64>(c.params.seed, INT_MAX)));
  samples_->setValue(c.params.num_samples);
  stops_->setText(c.params.stop_strings.join('|'));

  connect(address_, &QLineEdit::textEdited, this, [this](const QString& t) {
    model_->setAddress(index(), t);
    model_->requestCompletions(t);
  });
  connect(address_, &QLineEdit::editingFinished, this,
          [this] { model_->setAddress(index(), address_->text()); });
  connect(completer_, qOverload<const QString&>(&QCompleter::activated), this,
          [this](const QString& t) { model_->setAddress(index(), t); });
  connect(model_, &PlaygroundModel::completions, this,
          [this](const QString& text, const QStringList& addresses) {
            if (!address_->hasFocus() || text != address_->text().trimmed()) return;
            completions_->setStringList(addresses);
            completer_->complete();
          });
  for (QSpinBox* s : {max_tokens_, top_k_, seed_, samples_}) {
    connect(s, qOverload<int>(&QSpinBox::valueChanged), this, [this] { pushParams(); });
  }
  for (QDoubleSpinBox* s : {temperature_, top_p_}) {
    connect(s, qOverload<double>(&QDoubleSpinBox::valueChanged), this, [this] { pushParams(); });
  }
  connect(stops_, &QLineEdit::textEdited, this, [this] { pushParams(); });
  connect(remove_, &QToolButton::clicked, this, [this] { model_->removeColumn(index()); });
  connect(browse_, qOverload<int>(&QSpinBox::valueChanged), this, [this] { refresh(); });
  refresh();
}

int PlaygroundColumnWidget::index() const { return model_->indexOfColumn(id_); }

void PlaygroundColumnWidget::pushParams() {
  PlaygroundParams p;
  p.max_tokens = max_tokens_->value();
  p.temperature = temperature_->value();
  p.top_k = top_k_->value();
  p.top_p = top_p_->value();
  p.seed = quint64(seed_->value());
  p.num_samples = samples_->value();
  p.stop_strings = stops_->text().split('|', Qt::SkipEmptyParts);
  model_->setParams(index(), p);
}

void PlaygroundColumnWidget::showSample(int i) { browse_->setValue(i + 1); }
int PlaygroundColumnWidget::shownSample() const { return browse_->value() - 1; }
QString PlaygroundColumnWidget::shownText() const { return shown_text_; }

// The prompt in the placeholder colour, then the completion in the text colour.
void PlaygroundColumnWidget::showText(const QString& text) {
  const QString prompt = model_->prompt();
  if (text == shown_text_ && prompt == shown_prompt_) return;
  shown_text_ = text;
  shown_prompt_ = prompt;
  text_->clear();
  if (text.isEmpty()) return;
  QTextCursor cursor(text_->document());
  QTextCharFormat muted;
  muted.setForeground(palette().color(QPalette::PlaceholderText));
  cursor.insertText(prompt, muted);
  cursor.insertText(text, QTextCharFormat());  // no colour: the palette's text colour
}

void PlaygroundColumnWidget::changeEvent(QEvent* event) {
  QWidget::changeEvent(event);
  if (event->type() == QEvent::PaletteChange) {
    // The prompt's muted colour was baked into the document: render it again.
    const QString text = shown_text_;
    shown_text_ = QStringLiteral("\x01");
    showText(text);
  }
}

void PlaygroundColumnWidget::refresh() {
  const int i = index();
  if (i < 0) return;
  const PlaygroundColumn& c = model_->column(i);
  const int n = int(c.sequences.size());
  browse_->setRange(1, std::max(1, n));
  browse_->setSuffix(QStringLiteral(" / %1").arg(std::max(1, n)));
  browse_->setEnabled(n > 1);
  const int shown = std::clamp(browse_->value() - 1, 0, std::max(0, n - 1));

  QString state;
  QPalette pal = palette();
  switch (c.state) {
    case PlaygroundColumn::State::idle: state = tr("idle"); break;
    case PlaygroundColumn::State::running: state = tr("streaming…"); break;
    case PlaygroundColumn::State::done: state = tr("done"); break;
    case PlaygroundColumn::State::failed: state = c.error; break;
  }
  if (c.state == PlaygroundColumn::State::failed) {
    pal.setColor(QPalette::WindowText, QColor(0xd0, 0x30, 0x30));
  }
  if (shown < n) {
    const PlaygroundSequence& s = c.sequences[size_t(shown)];
    state += tr(" · %n token(s)", nullptr, int(s.tokens.size()));
    if (s.final) state += tr(" · stop: %1").arg(s.stop_reason);
    if (!c.revision_id.isEmpty()) state += tr(" · revision %1").arg(c.revision_id.left(12));
    showText(s.text);  // the streamed pieces, then the server's final text
    strip_->setTokens(s.tokens, s.logprobs, s.pieces);
  } else {
    showText({});
    strip_->setTokens({}, {}, {});
  }
  state_->setPalette(pal);
  state_->setText(state);
}

}  // namespace spindle::ui
