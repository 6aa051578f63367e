// PolicyView: header, lineage graph and node details bound to LineageModel (policy_view.h).

#include "spindle/ui/policy_view.h"

#include <QAction>
#include <QEvent>
#include <QFormLayout>
#include <QGraphicsView>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QInputDialog>
#include <QLabel>
#include <QPushButton>
#include <QScrollBar>
#include <QSplitter>
#include <QTableWidget>
#include <QVBoxLayout>

#include "lineage_scene.h"
#include "spindle/ui/lineage_model.h"
#include "view_banner.h"

namespace spindle::ui {

namespace {

QString join(const std::vector<std::string>& items) {
  QStringList out;
  for (const auto& s : items) out << QString::fromStdString(s);
  return out.isEmpty() ? QStringLiteral("—") : out.join(", ");
}

QLabel* value_label(QWidget* parent) {
  auto* l = new QLabel(parent);
  l->setTextInteractionFlags(Qt::TextSelectableByMouse);
  l->setWordWrap(true);
  return l;
}

}  // namespace

PolicyView::PolicyView(Connection* connection, QWidget* parent)
    : StudioView(connection, parent),
      model_(new LineageModel(connection, this)),
      scene_(new LineageScene(this)) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(6, 6, 6, 6);
  layout->setSpacing(4);

  // Header: two form columns.
  auto* header = new QWidget(this);
  auto* columns = new QHBoxLayout(header);
  columns->setContentsMargins(4, 0, 4, 0);
  auto* left = new QFormLayout;
  auto* right = new QFormLayout;
  name_ = value_label(header);
  QFont big = name_->font();
  big.setPointSizeF(big.pointSizeF() * 1.35);
  big.setBold(true);
  name_->setFont(big);
  base_ = value_label(header);
  rank_ = value_label(header);
  alpha_ = value_label(header);
  targets_ = value_label(header);
  tags_ = value_label(header);
  description_ = value_label(header);
  forked_from_ = value_label(header);
  head_ = value_label(header);
  metadata_ = value_label(header);
  left->addRow(tr("Policy"), name_);
  left->addRow(tr("Base"), base_);
  left->addRow(tr("Rank / alpha"), rank_);
  left->addRow(tr("Targets"), targets_);
  right->addRow(tr("Tags"), tags_);
  right->addRow(tr("Description"), description_);
  right->addRow(tr("Forked from"), forked_from_);
  right->addRow(tr("Head"), head_);
  right->addRow(tr("User metadata"), metadata_);
  columns->addLayout(left, 1);
  columns->addLayout(right, 1);
  alpha_->hide();  // shown in the rank row

  banner_ = new ViewBanner(this);

  graph_ = new QGraphicsView(scene_, this);
  graph_->setRenderHint(QPainter::Antialiasing);
  graph_->setDragMode(QGraphicsView::ScrollHandDrag);
  graph_->setAlignment(Qt::AlignLeft | Qt::AlignTop);

  // Details of the clicked node.
  auto* details = new QWidget(this);
  auto* dl = new QVBoxLayout(details);
  dl->setContentsMargins(4, 0, 0, 0);
  selected_ = value_label(details);
  lifetime_ = value_label(details);
  hint_ = new QLabel(tr("Click a revision to see its metrics."), details);
  hint_->setEnabled(false);
  metrics_ = new QTableWidget(0, 2, details);
  metrics_->setHorizontalHeaderLabels({tr("Metric"), tr("Value")});
  metrics_->horizontalHeader()->setStretchLastSection(true);
  metrics_->verticalHeader()->hide();
  metrics_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  metrics_->setAlternatingRowColors(true);
  rollback_ = new QPushButton(tr("Rollback to here"), details);
  fork_ = new QPushButton(tr("Fork here…"), details);
  promote_ = new QPushButton(tr("Keep (promote)"), details);
  playground_ = new QPushButton(tr("Open in playground"), details);
  dl->addWidget(selected_);
  dl->addWidget(lifetime_);
  dl->addWidget(hint_);
  dl->addWidget(metrics_, 1);
  auto* buttons = new QHBoxLayout;
  buttons->addWidget(rollback_);
  buttons->addWidget(fork_);
  buttons->addWidget(promote_);
  buttons->addWidget(playground_);
  dl->addLayout(buttons);

  auto* split = new QSplitter(Qt::Horizontal, this);
  split->addWidget(graph_);
  split->addWidget(details);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 1);
  split->setSizes({700, 320});

  layout->addWidget(header);
  layout->addWidget(banner_);
  layout->addWidget(split, 1);

  auto action = [this](const QString& text, const QKeySequence& key, auto slot) {
    auto* a = new QAction(text, this);
    a->setShortcut(key);
    a->setShortcutContext(Qt::WidgetWithChildrenShortcut);
    connect(a, &QAction::triggered, this, slot);
    addAction(a);
    return a;
  };
  rollback_action_ = action(tr("Rollback to here"), QKeySequence(tr("Ctrl+Shift+R")),
                            [this] { model_->rollbackTo(model_->selectedId()); });
  fork_action_ = action(tr("Fork here…"), QKeySequence(tr("Ctrl+K")), [this] { askFork(); });
  promote_action_ = action(tr("Keep (promote)"), QKeySequence(tr("Ctrl+Shift+K")),
                           [this] { model_->promote(model_->selectedId()); });
  playground_action_ = action(tr("Open in playground"), QKeySequence(tr("Ctrl+P")), [this] {
    if (!model_->selectedId().isEmpty())
      emit openInPlayground(model_->addressOf(model_->selectedId()));
  });
  action(tr("Reload"), QKeySequence(QKeySequence::Refresh), [this] { refresh(); });
  rollback_->setToolTip(rollback_action_->shortcut().toString(QKeySequence::NativeText));
  fork_->setToolTip(fork_action_->shortcut().toString(QKeySequence::NativeText));
  promote_->setToolTip(tr("Make this ephemeral revision durable, so it is not collected at "
                          "expiry (%1)")
                           .arg(promote_action_->shortcut().toString(QKeySequence::NativeText)));
  playground_->setToolTip(playground_action_->shortcut().toString(QKeySequence::NativeText));
  connect(rollback_, &QPushButton::clicked, rollback_action_, &QAction::trigger);
  connect(fork_, &QPushButton::clicked, fork_action_, &QAction::trigger);
  connect(promote_, &QPushButton::clicked, promote_action_, &QAction::trigger);
  connect(playground_, &QPushButton::clicked, playground_action_, &QAction::trigger);

  connect(model_, &LineageModel::headerChanged, this, &PolicyView::updateHeader);
  connect(model_, &LineageModel::lineageChanged, this, &PolicyView::updateGraph);
  connect(model_, &LineageModel::lineageChanged, this, &PolicyView::updateHeader);
  connect(model_, &LineageModel::lineageChanged, this, &PolicyView::updateDetails);
  connect(model_, &LineageModel::selectionChanged, this, &PolicyView::updateDetails);
  connect(model_, &LineageModel::error, banner_, &ViewBanner::showError);
  connect(model_, &LineageModel::actionDone, this, [this](const QString& m) {
    banner_->clear();
    emit statusMessage(m);
  });
  connect(model_, &LineageModel::forked, this, &StudioView::openPolicy);
  // model_ as the context: children die in creation order, the model before the scene, and
  // the scene's clear() on destruction emits selectionChanged.
  connect(scene_, &QGraphicsScene::selectionChanged, model_,
          [this] { model_->selectNode(scene_->selectedId()); });
  updateHeader();
  updateDetails();
}

QGraphicsScene* PolicyView::scene() const { return scene_; }

void PolicyView::changeEvent(QEvent* event) {
  StudioView::changeEvent(event);
  if (event->type() == QEvent::PaletteChange) updateGraph();
}

void PolicyView::showPolicy(const QString& address) {
  banner_->clear();
  model_->load(address);
}

void PolicyView::refresh() {
  banner_->clear();
  model_->reload();
}

void PolicyView::prepareScreenshot() {
  auto* once = new QObject(this);
  connect(model_, &LineageModel::ready, once, [this, once] {
    once->deleteLater();
    // Show a node's metrics too: the head's, else the newest.
    QString pick;
    for (const LineageNode& n : model_->nodes())
      if (n.head) pick = n.id;
    if (pick.isEmpty() && !model_->nodes().isEmpty()) pick = model_->nodes().back().id;
    scene_->selectId(pick);
    emit readyForScreenshot();
  });
  banner_->clear();
  model_->loadRichest();
}

void PolicyView::updateHeader() {
  const auto& p = model_->policy();
  if (!model_->hasPolicy()) {
    name_->setText(model_->isLoading() ? tr("Loading…") : tr("No policy selected"));
    for (QLabel* l : {base_, rank_, targets_, tags_, description_, forked_from_, head_, metadata_})
      l->setText(QStringLiteral("—"));
    metadata_->setToolTip({});
    return;
  }
  name_->setText(QString::fromStdString(p.name));
  name_->setToolTip(QString::fromStdString(p.address));
  base_->setText(QString::fromStdString(p.base_id));
  rank_->setText(tr("%1 / %2").arg(p.rank).arg(double(p.alpha), 0, 'g', 4));
  alpha_->setText(QString::number(double(p.alpha)));
  targets_->setText(join(p.targets));
  tags_->setText(join(p.tags));
  description_->setText(p.description.empty() ? QStringLiteral("—")
                                              : QString::fromStdString(p.description));
  // forked_from is the revision forked at; name its policy once the lineage has it.
  const QString from = QString::fromStdString(p.forked_from);
  const int k = model_->indexOf(from);
  forked_from_->setText(from.isEmpty() ? QStringLiteral("—")
                        : k >= 0       ? model_->nodes()[k].policy + " @ " + from.left(12)
                                       : from.left(12));
  forked_from_->setToolTip(QString::fromStdString(p.forked_from));
  QString head = p.head.empty() ? tr("(no revision yet)") : QString::fromStdString(p.head.substr(0, 12));
  if (const int h = model_->indexOf(QString::fromStdString(p.head)); h >= 0) {
    const QString badge = model_->nodes()[h].lifetimeText();
    if (!badge.isEmpty()) head += QStringLiteral(" · ") + badge;
  }
  head_->setText(head);
  head_->setToolTip(QString::fromStdString(p.head));
  // User metadata: compact on one line (elided), indented in the tooltip.
  const QString meta = model_->userMetadataText();
  metadata_->setText(meta.isEmpty() ? QStringLiteral("—")
                                    : metadata_->fontMetrics().elidedText(meta, Qt::ElideRight, 420));
  metadata_->setToolTip(model_->userMetadataPretty());
}

void PolicyView::updateGraph() {
  const QString keep = model_->selectedId();
  {
    const QSignalBlocker block(scene_);  // rebuilding is not a user's deselection
    scene_->rebuild(*model_, palette());
  }
  scene_->selectId(keep);
  graph_->setSceneRect(scene_->sceneRect());
  // A long lineage scrolls to its head; a short one starts at the top left.
  graph_->horizontalScrollBar()->setValue(graph_->horizontalScrollBar()->minimum());
  graph_->verticalScrollBar()->setValue(graph_->verticalScrollBar()->minimum());
  if (scene_->sceneRect().width() > graph_->viewport()->width()) {
    for (const LineageNode& n : model_->nodes()) {
      if (n.head) graph_->centerOn(scene_->centerOf(n.id));
    }
  }
  if (model_->truncated()) {
    banner_->showNotice(tr("The lineage is longer than the daemon returns at once; "
                           "the oldest or newest revisions are not drawn."));
  }
}

void PolicyView::updateDetails() {
  const QString id = model_->selectedId();
  const int i = model_->indexOf(id);
  const bool on = i >= 0;
  const LineageNode* n_ptr = on ? &model_->nodes()[i] : nullptr;
  // An expired node cannot be served, forked or made the head; only an ephemeral one promoted.
  const bool live = on && !n_ptr->expired;
  const bool ephemeral = on && n_ptr->ephemeral();
  for (QPushButton* b : {rollback_, fork_, playground_}) b->setEnabled(live);
  for (QAction* a : {rollback_action_, fork_action_, playground_action_}) a->setEnabled(live);
  promote_->setEnabled(ephemeral);
  promote_action_->setEnabled(ephemeral);
  promote_->setVisible(ephemeral);
  hint_->setVisible(!on);
  metrics_->setRowCount(0);
  if (!on) {
    selected_->setText(QString());
    lifetime_->setText(QString());
    lifetime_->hide();
    return;
  }
  const LineageNode& n = *n_ptr;
  lifetime_->setText(n.lifetimeDetail());
  lifetime_->setEnabled(!n.expired);  // greyed, as the node is
  lifetime_->setVisible(true);
  selected_->setText(tr("<b>%1</b>@%2 · step %3").arg(n.policy.toHtmlEscaped(), id.left(12)).arg(n.step));
  selected_->setToolTip(model_->addressOf(id));
  const auto rows = model_->selectedMetrics();
  metrics_->setRowCount(int(rows.size()));
  for (int r = 0; r < rows.size(); ++r) {
    metrics_->setItem(r, 0, new QTableWidgetItem(rows[r].first));
    metrics_->setItem(r, 1, new QTableWidgetItem(rows[r].second));
  }
  metrics_->resizeColumnToContents(0);
}

void PolicyView::askFork() {
  const QString id = model_->selectedId();
  if (id.isEmpty()) return;
  bool ok = false;
  const QString name = QInputDialog::getText(
      this, tr("Fork here"), tr("New policy starting at revision %1:").arg(id.left(12)),
      QLineEdit::Normal, QString::fromStdString(model_->policy().name) + "-fork", &ok);
  if (ok && !name.trimmed().isEmpty()) model_->forkAt(id, name);
}

}  // namespace spindle::ui
