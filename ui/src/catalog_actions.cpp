// CatalogModel's multi-select actions: tag/untag, fork, rollback, delete with an undo window,
// PEFT import and export (catalog_model.h). Each captures the rows' addresses when asked, so a
// reply lands on its policy even if rows moved meanwhile (a page, a sort, another delete).

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QSaveFile>

#include <algorithm>

#include "spindle/ui/catalog_model.h"
#include "spindle/ui/connection.h"

namespace spindle::ui {

using namespace protocol;

namespace {

std::vector<std::string> to_std(const QStringList& list) {
  std::vector<std::string> out;
  for (const QString& s : list) {
    if (!s.trimmed().isEmpty()) out.push_back(s.trimmed().toStdString());
  }
  return out;
}

bool write_file(const QString& path, const QByteArray& bytes, QString* why) {
  QSaveFile f(path);
  if (!f.open(QIODevice::WriteOnly) || f.write(bytes) != bytes.size() || !f.commit()) {
    *why = f.errorString();
    return false;
  }
  return true;
}

}  // namespace

void CatalogModel::tagRows(const QList<int>& rows, const QStringList& add,
                           const QStringList& remove) {
  clearError();
  for (int row : rows) {
    if (row < 0 || row >= int(rows_.size())) continue;
    TagRequest q;
    q.address = rows_[size_t(row)].address;
    q.add = to_std(add);
    q.remove = to_std(remove);
    connection_->post(this, Op::catalog_tag, q, [this](const Reply& r) {
      if (!r.ok) return setError(r);
      const auto& p = std::get<PolicyReply>(r.body).policy;
      replacePolicy(p);
      emit actionDone(tr("tags of %1: %2")
                          .arg(QString::fromStdString(p.name),
                               QString::fromStdString([&] {
                                 std::string t;
                                 for (const auto& s : p.tags) t += (t.empty() ? "" : ", ") + s;
                                 return t.empty() ? std::string("(none)") : t;
                               }())));
    });
  }
}

void CatalogModel::forkRow(int row, const QString& name) {
  clearError();
  if (row < 0 || row >= int(rows_.size())) return;
  ForkRequest q;
  q.address = rows_[size_t(row)].address + "@latest";
  q.name = name.trimmed().toStdString();
  const QString from = QString::fromStdString(rows_[size_t(row)].name);
  connection_->post(this, Op::catalog_fork, q, [this, from](const Reply& r) {
    if (!r.ok) return setError(r);
    const auto& p = std::get<PolicyReply>(r.body).policy;
    insertNew(p);
    emit actionDone(tr("forked %1 as %2").arg(from, QString::fromStdString(p.name)));
  });
}

void CatalogModel::rollbackRow(int row, const QString& revision_address) {
  clearError();
  if (row < 0 || row >= int(rows_.size())) return;
  AddressRequest q;
  const QString a = revision_address.trimmed();
  q.address = a.startsWith("spindle://") ? a.toStdString() : rows_[size_t(row)].address + "@" + a.toStdString();
  connection_->post(this, Op::catalog_rollback, q, [this](const Reply& r) {
    if (!r.ok) return setError(r);
    const auto& p = std::get<PolicyReply>(r.body).policy;
    replacePolicy(p);
    emit actionDone(tr("%1: head is now %2")
                        .arg(QString::fromStdString(p.name),
                             QString::fromStdString(p.head.substr(0, 12))));
  });
}

// ---- delete with an undo window -------------------------------------------------------------

void CatalogModel::deleteRows(const QList<int>& rows) {
  clearError();
  QList<int> sorted = rows;
  std::sort(sorted.begin(), sorted.end(), std::greater<int>());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  int hidden = 0;
  // Highest row first, so each recorded row is the position to put it back at when the
  // stack is unwound in reverse (undoDelete).
  for (int row : sorted) {
    if (row < 0 || row >= int(rows_.size())) continue;
    const QString address = QString::fromStdString(rows_[size_t(row)].address);
    beginRemoveRows({}, row, row);
    pending_delete_.push_back({rows_[size_t(row)], row});
    rows_.erase(rows_.begin() + row);
    inserted_.remove(address);
    hidden_addresses_.insert(address);
    endRemoveRows();
    ++hidden;
  }
  if (hidden == 0) return;
  delete_timer_.start(undo_window_ms_);
  emit deletePending(int(pending_delete_.size()));
}

void CatalogModel::undoDelete() {
  if (pending_delete_.isEmpty()) return;
  delete_timer_.stop();
  const int n = int(pending_delete_.size());
  for (auto it = pending_delete_.crbegin(); it != pending_delete_.crend(); ++it) {
    const QString address = QString::fromStdString(it->policy.address);
    hidden_addresses_.remove(address);
    if (rowOfAddress(address) >= 0) continue;  // a page brought it back meanwhile (cannot: hidden)
    const int at = std::min(it->row, int(rows_.size()));
    beginInsertRows({}, at, at);
    rows_.insert(rows_.begin() + at, it->policy);
    inserted_.insert(address);
    endInsertRows();
  }
  pending_delete_.clear();
  emit actionDone(tr("delete of %n policies undone", nullptr, n));
  emit deleteFinished(0);
}

void CatalogModel::commitDelete() {
  delete_timer_.stop();
  if (pending_delete_.isEmpty()) return;
  const QVector<PendingDelete> batch = std::exchange(pending_delete_, {});
  deletes_done_ = 0;
  for (const PendingDelete& d : batch) {
    ++deletes_in_flight_;
    const PolicyInfo policy = d.policy;
    connection_->post(this, Op::catalog_delete, AddressRequest{policy.address},
                      [this, policy](const Reply& r) {
                        const QString address = QString::fromStdString(policy.address);
                        // The name is free again either way: a new policy of that name may show.
                        hidden_addresses_.remove(address);
                        if (r.ok) {
                          ++deletes_done_;
                        } else {
                          setError(r);
                          insertNew(policy);  // it still exists: show it again
                        }
                        if (--deletes_in_flight_ == 0) {
                          emit actionDone(tr("deleted %n policies", nullptr, deletes_done_));
                          emit deleteFinished(deletes_done_);
                        }
                      });
  }
}

// ---- PEFT ---------------------------------------------------------------------------------------

void CatalogModel::importPeft(const QString& dir, const QString& name, const QString& base_id,
                              const QString& description) {
  clearError();
  QFile config(QDir(dir).filePath("adapter_config.json"));
  QFile model(QDir(dir).filePath("adapter_model.safetensors"));
  for (QFile* f : {&config, &model}) {
    if (!f->open(QIODevice::ReadOnly)) {
      return setError("not_found", tr("%1: %2").arg(f->fileName(), f->errorString()));
    }
  }
  ImportPeftRequest q;
  q.name = (name.trimmed().isEmpty() ? QFileInfo(dir).fileName() : name.trimmed()).toStdString();
  q.base_id = base_id.toStdString();
  q.adapter_config_json = config.readAll().toStdString();
  q.description = description.toStdString();
  Frames frames;
  const QByteArray bytes = model.readAll();
  q.adapter_model = add_bytes(frames, std::string_view(bytes.constData(), size_t(bytes.size())));
  connection_->post(this, Op::import_peft, q, std::move(frames), [this, dir](const Reply& r) {
    if (!r.ok) return setError(r);
    const auto& p = std::get<PolicyReply>(r.body).policy;
    insertNew(p);
    emit actionDone(tr("imported %1 as %2").arg(dir, QString::fromStdString(p.name)));
  });
}

void CatalogModel::exportPeft(int row, const QString& dir) {
  clearError();
  if (row < 0 || row >= int(rows_.size())) return;
  AddressRequest q{rows_[size_t(row)].address + "@latest"};
  connection_->post(this, Op::export_peft, q, [this, dir](const Reply& r) {
    if (!r.ok) return setError(r);
    const auto& e = std::get<ExportPeftReply>(r.body);
    QString why;
    if (!QDir().mkpath(dir)) return setError("io_error", tr("cannot create %1").arg(dir));
    std::string_view model;
    try {
      model = read_bytes(e.adapter_model, r.frames, "adapter_model");
    } catch (const ProtocolError& err) {
      return setError(QString::fromStdString(err.code()), QString::fromUtf8(err.what()));
    }
    if (!write_file(QDir(dir).filePath("adapter_config.json"),
                    QByteArray::fromStdString(e.adapter_config_json), &why) ||
        !write_file(QDir(dir).filePath("adapter_model.safetensors"),
                    QByteArray(model.data(), qsizetype(model.size())), &why)) {
      return setError("io_error", why);
    }
    emit actionDone(tr("exported revision %1 to %2")
                        .arg(QString::fromStdString(e.revision_id.substr(0, 12)), dir));
    emit exported(dir);
  });
}

}  // namespace spindle::ui
