#include "spindle/ui/playground_view.h"

#include <QAction>
#include <QHBoxLayout>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSplitter>
#include <QVBoxLayout>

#include "playground_column.h"
#include "spindle/ui/playground_model.h"

namespace spindle::ui {

PlaygroundView::PlaygroundView(Connection* connection, QWidget* parent)
    : StudioView(connection, parent), model_(new PlaygroundModel(connection, this)) {
  auto* top = new QVBoxLayout(this);
  auto* head = new QHBoxLayout;
  prompt_ = new QPlainTextEdit(this);
  prompt_->setPlaceholderText(tr("Prompt (tokenized by the server, BOS added)"));
  prompt_->setMaximumHeight(70);
  auto* buttons = new QVBoxLayout;
  run_button_ = new QPushButton(tr("Run"), this);
  run_button_->setToolTip(tr("Sample every column (Ctrl+Return)"));
  add_button_ = new QPushButton(tr("Add column"), this);
  add_button_->setToolTip(tr("Add a column on the base (Ctrl+Shift+N); at most 4"));
  buttons->addWidget(run_button_);
  buttons->addWidget(add_button_);
  buttons->addStretch();
  head->addWidget(prompt_, 1);
  head->addLayout(buttons);
  top->addLayout(head);
  prompt_error_ = new QLabel(this);
  prompt_error_->setWordWrap(true);
  QPalette pal = prompt_error_->palette();
  pal.setColor(QPalette::WindowText, QColor(0xd0, 0x30, 0x30));
  prompt_error_->setPalette(pal);
  prompt_error_->hide();
  top->addWidget(prompt_error_);
  splitter_ = new QSplitter(Qt::Horizontal, this);
  splitter_->setChildrenCollapsible(false);
  top->addWidget(splitter_, 1);

  run_ = new QAction(tr("Run"), this);
  run_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_Return));
  run_->setShortcutContext(Qt::WidgetWithChildrenShortcut);
  addAction(run_);
  add_ = new QAction(tr("Add column"), this);
  add_->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_N));
  add_->setShortcutContext(Qt::WidgetWithChildrenShortcut);
  addAction(add_);
  connect(run_, &QAction::triggered, this, [this] {
    model_->setPrompt(prompt_->toPlainText());
    model_->run();
  });
  connect(run_button_, &QPushButton::clicked, run_, &QAction::trigger);
  connect(add_, &QAction::triggered, this, [this] { model_->addColumn(model_->baseId()); });
  connect(add_button_, &QPushButton::clicked, add_, &QAction::trigger);
  connect(prompt_, &QPlainTextEdit::textChanged, this,
          [this] { model_->setPrompt(prompt_->toPlainText()); });

  connect(model_, &PlaygroundModel::columnsChanged, this, &PlaygroundView::rebuildColumns);
  connect(model_, &PlaygroundModel::columnChanged, this, [this](int index) {
    const int id = model_->column(index).id;
    for (PlaygroundColumnWidget* w : columns_) {
      if (w->columnId() == id) w->refresh();
    }
  });
  connect(model_, &PlaygroundModel::runningChanged, this, [this](bool running) {
    run_button_->setText(running ? tr("Running…") : tr("Run"));
    if (running) return;
    int done = 0;
    for (int i = 0; i < model_->columnCount(); ++i) {
      done += model_->column(i).state == PlaygroundColumn::State::done;
    }
    emit statusMessage(tr("Playground: %1 of %2 column(s) sampled")
                           .arg(done)
                           .arg(model_->columnCount()));
    if (screenshot_pending_) {
      screenshot_pending_ = false;
      emit readyForScreenshot();
    }
  });
  connect(model_, &PlaygroundModel::promptErrorChanged, this, [this](const QString& e) {
    prompt_error_->setText(e);
    prompt_error_->setVisible(!e.isEmpty());
    if (!e.isEmpty() && screenshot_pending_) {
      screenshot_pending_ = false;
      emit readyForScreenshot();
    }
  });
  connect(model_, &PlaygroundModel::baseChanged, this, &PlaygroundView::onBase);
  model_->fetchBase();
}

void PlaygroundView::onBase(const QString& base_id) {
  // Two columns on the base to start with (different seeds); empty columns get the base.
  for (int i = 0; i < model_->columnCount(); ++i) {
    if (model_->column(i).address.isEmpty()) model_->setAddress(i, base_id);
  }
  while (model_->columnCount() < PlaygroundModel::kMinColumns) {
    PlaygroundParams p;
    p.seed = quint64(model_->columnCount());
    model_->addColumn(base_id, p);
  }
  rebuildColumns();
}

void PlaygroundView::refresh() { model_->fetchBase(); }

void PlaygroundView::setPrompt(const QString& prompt) {
  prompt_->setPlainText(prompt);
  model_->setPrompt(prompt);
}

void PlaygroundView::addColumn(const QString& address) {
  for (int i = 0; i < model_->columnCount(); ++i) {
    const PlaygroundColumn& c = model_->column(i);
    if (c.address.isEmpty() || (c.address == model_->baseId() && c.sequences.empty() && i > 0)) {
      model_->setAddress(i, address);  // an untouched base column makes room
      rebuildColumns();
      return;
    }
  }
  if (model_->addColumn(address) < 0) {
    model_->setAddress(model_->columnCount() - 1, address);
    rebuildColumns();
  }
}

void PlaygroundView::rebuildColumns() {
  for (PlaygroundColumnWidget* w : columns_) w->deleteLater();
  columns_.clear();
  for (int i = 0; i < model_->columnCount(); ++i) {
    auto* w = new PlaygroundColumnWidget(model_, model_->column(i).id, splitter_);
    splitter_->addWidget(w);
    columns_.push_back(w);
  }
  add_button_->setEnabled(model_->columnCount() < PlaygroundModel::kMaxColumns);
  add_->setEnabled(add_button_->isEnabled());
}

void PlaygroundView::prepareScreenshot() {
  if (prompt_->toPlainText().isEmpty()) setPrompt(QStringLiteral("Once upon a time"));
  if (model_->columnCount() == 0) {
    // The base is not known yet: run as soon as it is.
    connect(model_, &PlaygroundModel::baseChanged, this, [this] { prepareScreenshot(); },
            Qt::SingleShotConnection);
    return;
  }
  screenshot_pending_ = true;
  run_->trigger();
}

}  // namespace spindle::ui
