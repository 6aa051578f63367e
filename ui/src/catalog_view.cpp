// CatalogView: layout and bindings (catalog_view.h). The input dialogs are in
// catalog_view_actions.cpp.

#include "spindle/ui/catalog_view.h"

#include <QAction>
#include <QCheckBox>
#include <QDateEdit>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QScrollBar>
#include <QTableView>
#include <QToolBar>
#include <QVBoxLayout>

#include "spindle/ui/catalog_model.h"
#include "view_banner.h"

namespace spindle::ui {

CatalogView::CatalogView(Connection* connection, QWidget* parent)
    : StudioView(connection, parent), model_(new CatalogModel(connection, this)) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(6, 6, 6, 6);
  layout->setSpacing(4);
  auto* bar = new QWidget(this);
  buildFilterBar(bar);
  toolbar_ = new QToolBar(this);
  toolbar_->setToolButtonStyle(Qt::ToolButtonTextOnly);
  banner_ = new ViewBanner(this);
  table_ = new QTableView(this);
  table_->setModel(model_);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::ExtendedSelection);
  table_->setAlternatingRowColors(true);
  table_->setSortingEnabled(true);
  table_->sortByColumn(CatalogModel::Name, Qt::AscendingOrder);
  table_->setWordWrap(false);
  table_->setContextMenuPolicy(Qt::CustomContextMenu);
  table_->verticalHeader()->setDefaultSectionSize(table_->fontMetrics().height() + 8);
  table_->verticalHeader()->hide();
  QHeaderView* header = table_->horizontalHeader();
  header->setContextMenuPolicy(Qt::CustomContextMenu);
  header->setStretchLastSection(true);
  header->setSectionResizeMode(QHeaderView::Interactive);
  const int widths[] = {220, 110, 50, 50, 150, 140, 110, 150, 200};
  for (int c = 0; c < CatalogModel::ColumnCount; ++c) {
    table_->setColumnWidth(c, widths[c]);
    table_->setColumnHidden(c, model_->isColumnHidden(c));
  }
  buildActions();
  layout->addWidget(bar);
  layout->addWidget(toolbar_);
  layout->addWidget(banner_);
  layout->addWidget(table_, 1);

  connect(header, &QHeaderView::customContextMenuRequested, this, &CatalogView::showHeaderMenu);
  connect(table_, &QTableView::customContextMenuRequested, this, &CatalogView::showContextMenu);
  connect(table_, &QTableView::activated, this, [this] { openCurrent(); });
  connect(table_->verticalScrollBar(), &QScrollBar::valueChanged, this, &CatalogView::prefetch);
  connect(model_, &CatalogModel::loaded, this, [this](int rows) {
    emit statusMessage(tr("%n policies loaded", nullptr, rows));
  });
  connect(model_, &CatalogModel::columnHiddenChanged, table_, &QTableView::setColumnHidden);
  connect(model_, &CatalogModel::error, banner_, &ViewBanner::showError);
  connect(model_, &CatalogModel::errorCleared, this, [this] {
    if (banner_->isError()) banner_->clear();
  });
  connect(model_, &CatalogModel::actionDone, this, &StudioView::statusMessage);
  connect(model_, &CatalogModel::deletePending, this, [this](int n) {
    banner_->showNotice(tr("%n policies deleted", nullptr, n), tr("Undo"),
                        [this] { model_->undoDelete(); });
  });
  connect(model_, &CatalogModel::deleteFinished, this, [this] {
    if (!banner_->isError()) banner_->clear();
  });
}

void CatalogView::buildFilterBar(QWidget* bar) {
  auto* row = new QHBoxLayout(bar);
  row->setContentsMargins(0, 0, 0, 0);
  auto field = [&](const QString& label, const QString& hint, int width) {
    row->addWidget(new QLabel(label, bar));
    auto* e = new QLineEdit(bar);
    e->setPlaceholderText(hint);
    e->setClearButtonEnabled(true);
    e->setMaximumWidth(width);
    connect(e, &QLineEdit::editingFinished, this, &CatalogView::applyFilter);
    row->addWidget(e);
    return e;
  };
  base_ = field(tr("Base"), tr("any"), 140);
  tag_ = field(tr("Tag"), tr("any"), 120);
  prefix_ = field(tr("Name"), tr("prefix"), 160);
  since_on_ = new QCheckBox(tr("Updated since"), bar);
  since_ = new QDateEdit(QDate::currentDate().addDays(-7), bar);
  since_->setCalendarPopup(true);
  since_->setDisplayFormat("yyyy-MM-dd");
  since_->setEnabled(false);
  connect(since_on_, &QCheckBox::toggled, since_, &QWidget::setEnabled);
  connect(since_on_, &QCheckBox::toggled, this, &CatalogView::applyFilter);
  connect(since_, &QDateEdit::dateChanged, this, &CatalogView::applyFilter);
  row->addWidget(since_on_);
  row->addWidget(since_);
  row->addSpacing(12);
  search_ = new QLineEdit(bar);
  search_->setPlaceholderText(tr("Search names, descriptions, tags (Ctrl+F, Enter)"));
  search_->setClearButtonEnabled(true);
  connect(search_, &QLineEdit::returnPressed, this, [this] { model_->search(search_->text()); });
  row->addWidget(search_, 1);
  auto* find = new QAction(tr("Search"), this);
  find->setShortcut(QKeySequence::Find);
  find->setShortcutContext(Qt::WidgetWithChildrenShortcut);
  connect(find, &QAction::triggered, this, [this] {
    search_->setFocus();
    search_->selectAll();
  });
  addAction(find);
}

void CatalogView::buildActions() {
  auto make = [this](const QString& text, const QKeySequence& key, auto slot) {
    auto* a = new QAction(text, this);
    if (!key.isEmpty()) {
      a->setShortcut(key);
      a->setToolTip(QStringLiteral("%1 (%2)").arg(text, key.toString(QKeySequence::NativeText)));
    }
    a->setShortcutContext(Qt::WidgetWithChildrenShortcut);
    connect(a, &QAction::triggered, this, slot);
    toolbar_->addAction(a);
    addAction(a);
    return a;
  };
  tag_action_ = make(tr("Tag…"), QKeySequence(tr("Ctrl+T")), [this] { askTag(false); });
  untag_action_ = make(tr("Untag…"), QKeySequence(tr("Ctrl+Shift+T")), [this] { askTag(true); });
  fork_action_ = make(tr("Fork…"), QKeySequence(tr("Ctrl+K")), [this] { askFork(); });
  rollback_action_ =
      make(tr("Rollback…"), QKeySequence(tr("Ctrl+Shift+R")), [this] { askRollback(); });
  delete_action_ = make(tr("Delete"), QKeySequence(QKeySequence::Delete), [this] { deleteSelected(); });
  toolbar_->addSeparator();
  import_action_ = make(tr("Import PEFT…"), QKeySequence(tr("Ctrl+I")), [this] { askImport(); });
  export_action_ = make(tr("Export PEFT…"), QKeySequence(tr("Ctrl+E")), [this] { askExport(); });
  toolbar_->addSeparator();
  refresh_action_ = make(tr("Refresh"), QKeySequence(QKeySequence::Refresh), [this] { refresh(); });
  auto* open = new QAction(tr("Open"), this);
  open->setShortcuts({QKeySequence(Qt::Key_Return), QKeySequence(Qt::Key_Enter)});
  open->setShortcutContext(Qt::WidgetShortcut);
  connect(open, &QAction::triggered, this, [this] { openCurrent(); });
  table_->addAction(open);
}

void CatalogView::applyFilter() {
  CatalogFilter f;
  f.base_id = base_->text().trimmed();
  f.tag = tag_->text().trimmed();
  f.name_prefix = prefix_->text().trimmed();
  if (since_on_->isChecked()) f.updated_since_ms = QDateTime(since_->date(), QTime(0, 0)).toMSecsSinceEpoch();
  if (f == model_->filter() && !model_->isSearch()) return;
  search_->clear();
  model_->setFilter(f);
}

void CatalogView::prefetch() {
  int last = table_->rowAt(table_->viewport()->height() - 1);
  if (last < 0) last = model_->rowCount() - 1;
  model_->ensureLoaded(last + CatalogModel::kPageSize);
}

void CatalogView::refresh() {
  banner_->clear();
  model_->reset();
}

void CatalogView::prepareScreenshot() {
  auto* once = new QObject(this);
  connect(model_, &CatalogModel::loaded, once, [this, once] {
    once->deleteLater();
    if (model_->rowCount() > 0) table_->selectRow(0);
    emit readyForScreenshot();
  });
  model_->reset();
}

QList<int> CatalogView::selectedRows() const {
  QList<int> rows;
  for (const QModelIndex& i : table_->selectionModel()->selectedRows()) rows << i.row();
  std::sort(rows.begin(), rows.end());
  return rows;
}

void CatalogView::openCurrent() {
  const QModelIndex i = table_->currentIndex();
  if (i.isValid()) emit openPolicy(model_->addressAt(i.row()));
}

void CatalogView::showHeaderMenu(const QPoint& at) {
  QMenu menu(this);
  for (int c = CatalogModel::Name + 1; c < CatalogModel::ColumnCount; ++c) {
    QAction* a = menu.addAction(model_->headerData(c, Qt::Horizontal).toString());
    a->setCheckable(true);
    a->setChecked(!model_->isColumnHidden(c));
    connect(a, &QAction::toggled, this, [this, c](bool on) { model_->setColumnHidden(c, !on); });
  }
  menu.exec(table_->horizontalHeader()->mapToGlobal(at));
}

void CatalogView::showContextMenu(const QPoint& at) {
  const QModelIndex i = table_->indexAt(at);
  if (!i.isValid()) return;
  const QString address = model_->addressAt(i.row());
  QMenu menu(this);
  connect(menu.addAction(tr("Open")), &QAction::triggered, this,
          [this, address] { emit openPolicy(address); });
  connect(menu.addAction(tr("Open in playground")), &QAction::triggered, this,
          [this, address] { emit openInPlayground(address + "@latest"); });
  connect(menu.addAction(tr("Use in reward designer")), &QAction::triggered, this,
          [this, address] { emit useInRewardDesigner(address + "@latest"); });
  menu.addSeparator();
  for (QAction* a : {tag_action_, untag_action_, fork_action_, rollback_action_, delete_action_,
                     export_action_})
    menu.addAction(a);
  menu.exec(table_->viewport()->mapToGlobal(at));
}

}  // namespace spindle::ui
