// CatalogView: the actions that ask for input first (a tag, a name, a revision, a folder) and
// then call the model (catalog_view.h). Nothing here talks to the daemon or shows an error box:
// a missing selection is said in the banner, a reply's error arrives there from the model.

#include <QFileDialog>
#include <QFileInfo>
#include <QInputDialog>
#include <QRegularExpression>
#include <QTableView>

#include "spindle/ui/catalog_model.h"
#include "spindle/ui/catalog_view.h"
#include "view_banner.h"

namespace spindle::ui {

namespace {

QStringList split_tags(const QString& text) {
  return text.split(QRegularExpression("[,\\s]+"), Qt::SkipEmptyParts);
}

}  // namespace

void CatalogView::askTag(bool remove) {
  const QList<int> rows = selectedRows();
  if (rows.isEmpty()) return banner_->showNotice(tr("Select one or more policies first."));
  bool ok = false;
  const QString text = QInputDialog::getText(
      this, remove ? tr("Untag") : tr("Tag"),
      tr("%1 %n policies (comma-separated tags):", nullptr, int(rows.size()))
          .arg(remove ? tr("Remove from") : tr("Add to")),
      QLineEdit::Normal, {}, &ok);
  if (!ok || split_tags(text).isEmpty()) return;
  if (remove) {
    model_->untagRows(rows, split_tags(text));
  } else {
    model_->tagRows(rows, split_tags(text));
  }
}

void CatalogView::askFork() {
  const QList<int> rows = selectedRows();
  if (rows.size() != 1) return banner_->showNotice(tr("Select one policy to fork."));
  const QString from = model_->policyAt(rows.front()).name.c_str();
  bool ok = false;
  const QString name = QInputDialog::getText(this, tr("Fork"),
                                             tr("Fork the head of %1 into a new policy:").arg(from),
                                             QLineEdit::Normal, from + "-fork", &ok);
  if (ok && !name.trimmed().isEmpty()) model_->forkRow(rows.front(), name);
}

void CatalogView::askRollback() {
  const QList<int> rows = selectedRows();
  if (rows.size() != 1) return banner_->showNotice(tr("Select one policy to roll back."));
  const auto& p = model_->policyAt(rows.front());
  bool ok = false;
  const QString rev = QInputDialog::getText(
      this, tr("Rollback"),
      tr("Make this revision the head of %1 (revision id or spindle:// address):")
          .arg(QString::fromStdString(p.name)),
      QLineEdit::Normal, {}, &ok);
  if (ok && !rev.trimmed().isEmpty()) model_->rollbackRow(rows.front(), rev);
}

void CatalogView::deleteSelected() {
  const QList<int> rows = selectedRows();
  if (rows.isEmpty()) return banner_->showNotice(tr("Select one or more policies first."));
  model_->deleteRows(rows);
}

void CatalogView::askImport() {
  const QString dir = QFileDialog::getExistingDirectory(
      this, tr("Import a PEFT adapter (adapter_config.json + adapter_model.safetensors)"));
  if (dir.isEmpty()) return;
  bool ok = false;
  const QString name = QInputDialog::getText(this, tr("Import PEFT"), tr("New policy name:"),
                                             QLineEdit::Normal, QFileInfo(dir).fileName(), &ok);
  if (ok && !name.trimmed().isEmpty()) model_->importPeft(dir, name);
}

void CatalogView::askExport() {
  const QList<int> rows = selectedRows();
  if (rows.size() != 1) return banner_->showNotice(tr("Select one policy to export."));
  const QString dir = QFileDialog::getExistingDirectory(this, tr("Export PEFT into folder"));
  if (!dir.isEmpty()) model_->exportPeft(rows.front(), dir);
}

}  // namespace spindle::ui
