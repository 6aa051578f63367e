#include "spindle/ui/reward_designer_view.h"

#include <QAction>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QGridLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QScrollArea>
#include <QSpinBox>
#include <QSplitter>
#include <QTabWidget>
#include <QTableView>
#include <QVBoxLayout>

#include <climits>

#include "reward_histogram.h"
#include "reward_term_editor.h"
#include "spindle/ui/plugin_project.h"
#include "spindle/ui/reward_designer_model.h"

namespace spindle::ui {

namespace {

QAction* make_action(QWidget* owner, const QString& text, const QKeySequence& key) {
  auto* a = new QAction(text, owner);
  a->setShortcut(key);
  a->setShortcutContext(Qt::WidgetWithChildrenShortcut);
  a->setToolTip(QStringLiteral("%1 (%2)").arg(text, key.toString(QKeySequence::NativeText)));
  owner->addAction(a);
  return a;
}

QPushButton* button_for(QAction* a, QWidget* parent) {
  auto* b = new QPushButton(a->text(), parent);
  b->setToolTip(a->toolTip());
  QObject::connect(b, &QPushButton::clicked, a, &QAction::trigger);
  return b;
}

}  // namespace

RewardDesignerView::RewardDesignerView(Connection* connection, QWidget* parent)
    : RewardDesignerView(connection, new RewardDesignerModel(connection), parent) {
  model_->restoreAutosave();
  pullSettings();
  rebuildTerms();
}

RewardDesignerView::RewardDesignerView(Connection* connection, RewardDesignerModel* model,
                                       QWidget* parent)
    : StudioView(connection, parent), model_(model), builder_(new PluginBuilder(this)) {
  if (!model_->parent()) model_->setParent(this);
  build();
  pullSettings();
  rebuildTerms();
  model_->refreshPlugins();
  model_->refreshDatasets();
}

void RewardDesignerView::build() {
  auto* top = new QHBoxLayout(this);
  auto* split = new QSplitter(Qt::Horizontal, this);
  top->addWidget(split);

  // ---- left: plugins and the spec ----
  auto* left = new QWidget(split);
  auto* lv = new QVBoxLayout(left);
  auto* plugin_box = new QGroupBox(tr("Reward plugins"), left);
  auto* pv = new QVBoxLayout(plugin_box);
  plugins_ = new QListWidget(plugin_box);
  plugins_->setMaximumHeight(130);
  plugins_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  plugins_->setTextElideMode(Qt::ElideRight);
  plugins_->setToolTip(tr("Double-click a plugin to add a term with it"));
  pv->addWidget(plugins_);
  auto* pb = new QHBoxLayout;
  // F5 is StudioView::refresh()'s key, bound by the main window (a second F5 action here would
  // make the shortcut ambiguous); refresh() rescans.
  QAction* rescan = new QAction(tr("Rescan plugins"), this);
  rescan->setToolTip(tr("Rescan the daemon's plugin folders (F5)"));
  QAction* new_plugin = make_action(this, tr("New plugin…"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_P));
  QAction* add_term = make_action(this, tr("Add term"), QKeySequence(Qt::CTRL | Qt::Key_T));
  pb->addWidget(button_for(add_term, plugin_box));
  pb->addWidget(button_for(rescan, plugin_box));
  pb->addWidget(button_for(new_plugin, plugin_box));
  pv->addLayout(pb);
  lv->addWidget(plugin_box);

  auto* spec_box = new QGroupBox(tr("Spec (Σ weight × score)"), left);
  auto* sv = new QVBoxLayout(spec_box);
  auto* scroll = new QScrollArea(spec_box);
  scroll->setWidgetResizable(true);
  auto* terms = new QWidget(scroll);
  terms_layout_ = new QVBoxLayout(terms);
  terms_layout_->addStretch();
  scroll->setWidget(terms);
  sv->addWidget(scroll);
  auto* sb = new QHBoxLayout;
  QAction* save = make_action(this, tr("Save spec…"), QKeySequence(Qt::CTRL | Qt::Key_S));
  QAction* load = make_action(this, tr("Load spec…"), QKeySequence(Qt::CTRL | Qt::Key_O));
  sb->addWidget(button_for(save, spec_box));
  sb->addWidget(button_for(load, spec_box));
  sv->addLayout(sb);
  lv->addWidget(spec_box, 1);

  // ---- right: data, settings, results ----
  auto* right = new QWidget(split);
  auto* rv = new QVBoxLayout(right);
  auto* data_box = new QGroupBox(tr("Rows"), right);
  auto* dv = new QVBoxLayout(data_box);
  auto* db = new QHBoxLayout;
  datasets_ = new QComboBox(data_box);
  datasets_->setToolTip(tr("The daemon's datasets (their first rows)"));
  auto* use = new QPushButton(tr("Use dataset"), data_box);
  QAction* jsonl = make_action(this, tr("Load JSONL…"), QKeySequence(Qt::CTRL | Qt::Key_L));
  auto* add_row = new QPushButton(tr("+ row"), data_box);
  auto* del_row = new QPushButton(tr("− row"), data_box);
  db->addWidget(datasets_, 1);
  db->addWidget(use);
  db->addWidget(button_for(jsonl, data_box));
  db->addWidget(add_row);
  db->addWidget(del_row);
  dv->addLayout(db);
  rows_view_ = new QTableView(data_box);
  rows_view_->setModel(model_->rows());
  rows_view_->horizontalHeader()->setSectionResizeMode(RewardRowsModel::prompt_col, QHeaderView::Stretch);
  rows_view_->horizontalHeader()->resizeSection(RewardRowsModel::reference_col, 140);
  rows_view_->horizontalHeader()->resizeSection(RewardRowsModel::metadata_col, 200);
  rows_view_->verticalHeader()->setDefaultSectionSize(22);
  rows_view_->setMaximumHeight(150);
  dv->addWidget(rows_view_);
  rv->addWidget(data_box);

  auto* test_box = new QGroupBox(tr("Test"), right);
  auto* tg = new QGridLayout(test_box);
  address_ = new QLineEdit(test_box);
  address_->setPlaceholderText(tr("spindle://tenant/policy@latest or the base id"));
  num_samples_ = new QSpinBox(test_box);
  num_samples_->setRange(1, 64);
  max_tokens_ = new QSpinBox(test_box);
  max_tokens_->setRange(1, 4096);
  temperature_ = new QDoubleSpinBox(test_box);
  temperature_->setRange(0, 5);
  temperature_->setSingleStep(0.1);
  seed_ = new QSpinBox(test_box);
  seed_->setRange(0, INT_MAX);
  bins_ = new QSpinBox(test_box);
  bins_->setRange(1, 1000);
  tg->addWidget(new QLabel(tr("address"), test_box), 0, 0);
  tg->addWidget(address_, 0, 1, 1, 9);
  const std::pair<QString, QWidget*> knobs[] = {{tr("samples"), num_samples_},
                                                {tr("max tokens"), max_tokens_},
                                                {tr("T"), temperature_},
                                                {tr("seed"), seed_},
                                                {tr("bins"), bins_}};
  int col = 0;
  for (const auto& [label, w] : knobs) {
    tg->addWidget(new QLabel(label, test_box), 1, col++);
    tg->addWidget(w, 1, col++);
  }
  run_ = make_action(this, tr("Run test"), QKeySequence(Qt::CTRL | Qt::Key_Return));
  QAction* validate = make_action(this, tr("Validate"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_V));
  auto* tb = new QHBoxLayout;
  tb->addStretch();
  tb->addWidget(button_for(validate, test_box));
  tb->addWidget(button_for(run_, test_box));
  tg->addLayout(tb, 2, 0, 1, 10);
  rv->addWidget(test_box);

  error_ = new QLabel(right);
  error_->setWordWrap(true);
  error_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  QPalette pal = error_->palette();
  pal.setColor(QPalette::WindowText, QColor(0xd0, 0x30, 0x30));
  error_->setPalette(pal);
  error_->hide();
  rv->addWidget(error_);
  summary_ = new QLabel(right);
  rv->addWidget(summary_);

  results_ = new QTabWidget(right);
  auto* chart_scroll = new QScrollArea(results_);
  chart_scroll->setWidgetResizable(true);
  charts_ = new QWidget(chart_scroll);
  new QGridLayout(charts_);
  chart_scroll->setWidget(charts_);
  results_->addTab(chart_scroll, tr("Histograms"));
  samples_view_ = new QTableView(results_);
  samples_view_->setModel(model_->samples());
  samples_view_->setWordWrap(true);
  samples_view_->horizontalHeader()->setSectionResizeMode(QHeaderView::Interactive);
  results_->addTab(samples_view_, tr("Samples"));
  auto* build_tab = new QWidget(results_);
  auto* bv = new QVBoxLayout(build_tab);
  build_log_ = new QPlainTextEdit(build_tab);
  build_log_->setReadOnly(true);
  build_log_->setPlaceholderText(tr("New plugin… writes a project here; Build runs cmake"));
  build_button_ = new QPushButton(tr("Build plugin"), build_tab);
  build_button_->setEnabled(false);
  bv->addWidget(build_log_);
  bv->addWidget(build_button_);
  results_->addTab(build_tab, tr("Plugin build"));
  rv->addWidget(results_, 1);
  split->addWidget(left);
  split->addWidget(right);
  split->setStretchFactor(0, 2);
  split->setStretchFactor(1, 3);
  split->setSizes({440, 960});

  // ---- bindings ----
  connect(rescan, &QAction::triggered, model_, &RewardDesignerModel::rescanPlugins);
  connect(new_plugin, &QAction::triggered, this, &RewardDesignerView::newPlugin);
  connect(build_button_, &QPushButton::clicked, this, &RewardDesignerView::buildPlugin);
  connect(add_term, &QAction::triggered, this, [this] {
    QListWidgetItem* item = plugins_->currentItem();
    const QString plugin = item ? item->data(Qt::UserRole).toString()
                                : (model_->plugins().empty() ? QString()
                                   : QString::fromStdString(model_->plugins().front().name));
    if (!plugin.isEmpty()) model_->addTerm(plugin);
  });
  connect(plugins_, &QListWidget::itemDoubleClicked, this,
          [this](QListWidgetItem* item) { model_->addTerm(item->data(Qt::UserRole).toString()); });
  connect(save, &QAction::triggered, this, [this] {
    const QString path = QFileDialog::getSaveFileName(this, tr("Save reward spec"), {},
                                                      tr("JSON (*.json)"));
    if (path.isEmpty()) return;
    const QString e = model_->saveSpec(path);
    emit statusMessage(e.isEmpty() ? tr("spec saved to %1").arg(path) : e);
  });
  connect(load, &QAction::triggered, this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, tr("Load reward spec"), {},
                                                      tr("JSON (*.json)"));
    if (path.isEmpty()) return;
    if (const QString e = model_->loadSpec(path); !e.isEmpty()) {
      error_->setText(e);
      error_->show();
    }
  });
  connect(use, &QPushButton::clicked, this,
          [this] { model_->useDataset(datasets_->currentData().toString()); });
  connect(jsonl, &QAction::triggered, this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, tr("Rows from JSONL"), {},
                                                      tr("JSON lines (*.jsonl *.json)"));
    if (path.isEmpty()) return;
    if (const QString e = model_->loadJsonl(path); !e.isEmpty()) {
      error_->setText(e);
      error_->show();
    }
  });
  connect(add_row, &QPushButton::clicked, this, [this] { model_->rows()->addRow(); });
  connect(del_row, &QPushButton::clicked, this,
          [this] { model_->rows()->removeRowAt(rows_view_->currentIndex().row()); });
  connect(address_, &QLineEdit::textEdited, this, [this] { pushSettings(); });
  for (QSpinBox* s : {num_samples_, max_tokens_, seed_, bins_}) {
    connect(s, qOverload<int>(&QSpinBox::valueChanged), this, [this] { pushSettings(); });
  }
  connect(temperature_, qOverload<double>(&QDoubleSpinBox::valueChanged), this,
          [this] { pushSettings(); });
  connect(run_, &QAction::triggered, model_, &RewardDesignerModel::run);
  connect(validate, &QAction::triggered, model_, &RewardDesignerModel::validate);

  connect(model_, &RewardDesignerModel::pluginsChanged, this, [this] {
    rebuildPlugins();
    for (RewardTermEditor* e : editors_) e->sync();
  });
  connect(model_, &RewardDesignerModel::datasetsChanged, this, &RewardDesignerView::rebuildDatasets);
  connect(model_, &RewardDesignerModel::termsChanged, this, &RewardDesignerView::rebuildTerms);
  connect(model_, &RewardDesignerModel::termChanged, this, [this](int i) {
    if (i >= 0 && i < editors_.size()) editors_[i]->sync();
  });
  connect(model_, &RewardDesignerModel::settingsChanged, this, &RewardDesignerView::pullSettings);
  connect(model_, &RewardDesignerModel::runningChanged, this, [this](bool running) {
    run_->setEnabled(!running);
    summary_->setText(running ? tr("sampling and scoring…") : summary_->text());
  });
  connect(model_, &RewardDesignerModel::errorChanged, this, [this](const QString& e) {
    error_->setText(e);
    error_->setVisible(!e.isEmpty());
    if (!e.isEmpty()) finishScreenshot();
  });
  connect(model_, &RewardDesignerModel::validated, this, [this](bool ok, const QString& m) {
    if (ok) summary_->setText(m);
    emit statusMessage(m);
  });
  connect(model_, &RewardDesignerModel::outcomeChanged, this, &RewardDesignerView::showOutcome);
  connect(builder_, &PluginBuilder::output, this, [this](const QString& text) {
    build_log_->moveCursor(QTextCursor::End);
    build_log_->insertPlainText(text);
    build_log_->moveCursor(QTextCursor::End);
  });
  connect(builder_, &PluginBuilder::finished, this,
          [this](bool ok, const QString& library, const QString& error) {
            build_button_->setEnabled(true);
            build_log_->appendPlainText(ok ? tr("built %1").arg(library) : error);
            if (ok) installPlugin(library);
          });
}

QString RewardDesignerView::errorText() const { return error_->isVisible() ? error_->text() : QString(); }

void RewardDesignerView::setAddress(const QString& address) { model_->setAddress(address); }

void RewardDesignerView::refresh() {
  model_->rescanPlugins();
  model_->refreshDatasets();
}

void RewardDesignerView::pushSettings() {
  model_->setAddress(address_->text());
  model_->setNumSamples(num_samples_->value());
  model_->setBins(uint32_t(bins_->value()));
  protocol::SamplingParamsMsg p = model_->samplingParams();
  p.max_tokens = max_tokens_->value();
  p.temperature = float(temperature_->value());
  p.seed = quint64(seed_->value());
  model_->setSamplingParams(p);
}

void RewardDesignerView::pullSettings() {
  const QSignalBlocker b1(num_samples_), b2(max_tokens_), b3(temperature_), b4(seed_), b5(bins_);
  if (!address_->hasFocus()) address_->setText(model_->address());
  num_samples_->setValue(model_->numSamples());
  max_tokens_->setValue(model_->samplingParams().max_tokens);
  temperature_->setValue(model_->samplingParams().temperature);
  seed_->setValue(int(std::min<quint64>(model_->samplingParams().seed, INT_MAX)));
  bins_->setValue(int(model_->bins()));
}

void RewardDesignerView::rebuildPlugins() {
  plugins_->clear();
  for (const auto& p : model_->plugins()) {
    const QString name = QString::fromStdString(p.name);
    auto* item = new QListWidgetItem(
        QStringLiteral("%1  %2 — %3")
            .arg(name, p.version.empty() ? QString() : "v" + QString::fromStdString(p.version),
                 QString::fromStdString(p.description)),
        plugins_);
    item->setData(Qt::UserRole, name);
    item->setToolTip(QString::fromStdString(p.description + "\n" + p.path + "\n" +
                                            p.config_schema_json));
  }
}

void RewardDesignerView::rebuildDatasets() {
  datasets_->clear();
  for (const auto& d : model_->datasets()) {
    const QString name = QString::fromStdString(d.name);
    datasets_->addItem(d.available ? tr("%1 (%2 rows)").arg(name).arg(d.rows)
                                   : tr("%1 (unavailable)").arg(name),
                       name);
    datasets_->setItemData(datasets_->count() - 1,
                           QString::fromStdString(d.available ? d.description : d.error),
                           Qt::ToolTipRole);
  }
}

void RewardDesignerView::rebuildTerms() {
  for (RewardTermEditor* e : editors_) {
    e->parentWidget()->deleteLater();  // its group box
  }
  editors_.clear();
  for (int i = 0; i < model_->termCount(); ++i) {
    auto* box = new QGroupBox(tr("term %1").arg(i + 1), terms_layout_->parentWidget());
    auto* v = new QVBoxLayout(box);
    v->setContentsMargins(2, 2, 2, 2);
    auto* e = new RewardTermEditor(model_, i, box);
    v->addWidget(e);
    terms_layout_->insertWidget(terms_layout_->count() - 1, box);
    editors_.push_back(e);
  }
}

void RewardDesignerView::showOutcome() {
  for (RewardHistogram* h : histograms_) h->deleteLater();
  histograms_.clear();
  auto* grid = static_cast<QGridLayout*>(charts_->layout());
  const RewardTestOutcome& o = model_->outcome();
  int k = 0;
  for (const auto& t : o.terms) {
    auto* h = new RewardHistogram(charts_);
    h->setDistribution(tr("%1 (%2, × %3)")
                           .arg(QString::fromStdString(t.name), QString::fromStdString(t.plugin))
                           .arg(t.weight),
                       t.scores);
    grid->addWidget(h, k / 2, k % 2);
    histograms_.push_back(h);
    ++k;
  }
  auto* total = new RewardHistogram(charts_);
  total->setDistribution(tr("total"), o.total);
  grid->addWidget(total, k / 2, k % 2);
  histograms_.push_back(total);
  summary_->setText(tr("%1 samples from %2 · total mean %3")
                        .arg(o.total.n)
                        .arg(o.revision_id.isEmpty() ? tr("the base") : o.revision_id.left(12))
                        .arg(o.total.mean, 0, 'g', 4));
  samples_view_->resizeColumnsToContents();
  for (int c = 1; c <= 2; ++c) {
    samples_view_->setColumnWidth(c, std::min(samples_view_->columnWidth(c), 260));
  }
  emit statusMessage(summary_->text());
  finishScreenshot();
}

}  // namespace spindle::ui
