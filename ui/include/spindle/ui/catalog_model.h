#pragma once
// The Catalog view's model (STYLE.md 16): a lazy table over the daemon's policy catalog.
//
// Loading: rows arrive in keyset pages of `catalog_list` (kPageSize rows, PolicyListReply::
// next_cursor), Qt's fetchmore pattern: canFetchMore() is true until the last page arrived,
// fetchMore() asks for the next page unless one is already in flight (at most one page request
// at a time). ensureLoaded(row) is the prefetch hook: the view passes the last visible row plus a
// page of margin on every scroll, and the model keeps fetching page after page (one in flight)
// until that many rows are loaded or the list ends. Nothing here waits: replies come back
// through Connection::post on the GUI thread; a reply to a request made before reset() (or a
// filter or search change) is dropped by generation number.
//
// Filters: base, tag and name prefix go to the server (CatalogListRequest); "updated since" has
// no server filter, so it is applied client-side on PolicyInfo::updated_ms to every page (a page
// may then add fewer rows than it holds; an empty one fetches the next at once). search(text)
// replaces the list with catalog_search results (up to kSearchLimit, bm25 order; the client-side
// filters apply to them too) and ends paging; search("") goes back to the list.
//
// Sorting: the server's order is by name, so sorting by Name ascending is exactly the loaded
// order. Any other column (or descending) sorts only what is loaded so far, and pages that
// arrive later are merged into that order (rows the server has not sent yet are not ranked).
//
// Actions (multi-select; rows are model rows): every reply's PolicyReply replaces that policy's
// row in place (dataChanged); a fork or import inserts the new policy where the name order puts
// it (when it is within the loaded range and passes the filters). Delete hides the rows at once
// and sends catalog_delete only when the undo window (undoWindowMs(), 10 s by default) passes
// without undoDelete(); a delete while a window is open joins it and restarts it. A failed
// delete puts its row back. Errors of any request are kept as lastErrorCode()/lastErrorMessage()
// (the server's code and message) and emitted as error(); each action clears them as it starts.
// Deletes still waiting for their window when the model is destroyed are sent then.
//
// Threading: GUI thread only (like Connection::post).

#include <QAbstractTableModel>

#include <deque>
#include <QDateTime>
#include <QHash>
#include <QPointer>
#include <QSet>
#include <QStringList>
#include <QTimer>
#include <QVector>

#include "spindle/protocol/wire.h"

namespace spindle::ui {

class Connection;

// The catalog_list filters, plus the client-side updated-since bound.
struct CatalogFilter {
  QString base_id;      // "" = any
  QString tag;          // "" = any
  QString name_prefix;  // "" = all
  qint64 updated_since_ms = 0;  // 0 = no bound; else keep rows with updated_ms >= it
  bool operator==(const CatalogFilter&) const = default;
};

class CatalogModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Name, Base, Rank, Alpha, Targets, Tags, Head, Updated, Description, ColumnCount };
  enum Role { AddressRole = Qt::UserRole + 1, NameRole, HeadRole, UpdatedMsRole };
  static constexpr int kPageSize = 200;
  static constexpr int kSearchLimit = 1000;

  explicit CatalogModel(Connection* connection, QObject* parent = nullptr);
  ~CatalogModel() override;

  // ---- QAbstractItemModel ---------------------------------------------------------------------
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;
  bool canFetchMore(const QModelIndex& parent = {}) const override;
  void fetchMore(const QModelIndex& parent = {}) override;
  void sort(int column, Qt::SortOrder order = Qt::AscendingOrder) override;

  // ---- loading ------------------------------------------------------------------------------
  // Drops every row and loads from the first page (list mode: the current filter).
  void reset();
  // Prefetch: keep fetching pages until rowCount() > row (or the list ends).
  void ensureLoaded(int row);
  void setFilter(const CatalogFilter& filter);  // resets when it changed
  const CatalogFilter& filter() const { return filter_; }
  // Replaces the rows with catalog_search results; "" goes back to the filtered list.
  void search(const QString& text);
  bool isSearch() const { return !search_text_.isEmpty(); }
  bool isLoading() const { return in_flight_; }
  quint64 pageRequests() const { return page_requests_; }  // catalog_list requests sent

  // ---- rows ---------------------------------------------------------------------------------
  const protocol::PolicyInfo& policyAt(int row) const { return rows_.at(size_t(row)); }
  int rowOfName(const QString& name) const;  // -1 when not loaded (or hidden)
  QString addressAt(int row) const;          // "spindle://tenant/name"

  // Column visibility, kept in QSettings (group "catalog", key "hidden_columns").
  bool isColumnHidden(int column) const { return hidden_columns_.contains(column); }
  void setColumnHidden(int column, bool hidden);

  // ---- multi-select actions (catalog_actions.cpp) -------------------------------------------
  void tagRows(const QList<int>& rows, const QStringList& add, const QStringList& remove = {});
  void untagRows(const QList<int>& rows, const QStringList& tags) { tagRows(rows, {}, tags); }
  // catalog_fork of the row's head (@latest) into a new policy `name`.
  void forkRow(int row, const QString& name);
  // catalog_rollback: make `revision_address` (spindle://t/p@<rev>, or a bare revision id of
  // the row's policy) the head.
  void rollbackRow(int row, const QString& revision_address);
  void deleteRows(const QList<int>& rows);
  void undoDelete();
  bool hasPendingDelete() const { return !pending_delete_.isEmpty(); }
  int pendingDeleteCount() const { return pending_delete_.size(); }
  void setUndoWindowMs(int ms) { undo_window_ms_ = ms; }
  int undoWindowMs() const { return undo_window_ms_; }
  // Sends the pending deletes now (the window closed early, e.g. the Studio quits).
  void commitDelete();
  // import_peft of `dir`/adapter_config.json + adapter_model.safetensors as policy `name`.
  // Reading the two files is the only disk work on the GUI thread (a LoRA adapter's size).
  void importPeft(const QString& dir, const QString& name, const QString& base_id = {},
                  const QString& description = {});
  // export_peft of the row's head into `dir` (both files written, created if missing).
  void exportPeft(int row, const QString& dir);

  QString lastErrorCode() const { return error_code_; }
  QString lastErrorMessage() const { return error_message_; }
  void clearError();

 signals:
  void loaded(int rows);  // a page (or search result) arrived; rows = rowCount()
  void error(QString code, QString message);
  void errorCleared();
  void actionDone(QString message);  // one line for the status bar / banner
  void deletePending(int count);     // rows hidden, undo window open
  void deleteFinished(int deleted);  // the window closed and deletes were answered (or undone: 0)
  void exported(QString dir);
  void columnHiddenChanged(int column, bool hidden);

 private:
  struct PendingDelete {
    protocol::PolicyInfo policy;
    int row = 0;  // where it was, to put it back
  };

  void requestPage();
  void onPage(quint64 generation, const protocol::Reply& reply, bool search);
  bool passes(const protocol::PolicyInfo& p) const;  // the client-side filters
  bool lessThan(const protocol::PolicyInfo& a, const protocol::PolicyInfo& b) const;
  bool isNameOrder() const { return sort_column_ == Name && sort_order_ == Qt::AscendingOrder; }
  // A policy made here (fork, import): inserted where the order puts it, if loaded range.
  void insertNew(const protocol::PolicyInfo& p);
  void applySort();
  void replacePolicy(const protocol::PolicyInfo& p);  // in place, by address
  void setError(const protocol::Reply& reply);
  void setError(const QString& code, const QString& message);
  int rowOfAddress(const QString& address) const;

  QPointer<Connection> connection_;
  // A deque: appending a page never moves the rows already loaded (a QVector of 10^6
  // PolicyInfo reallocating cost a 230 ms GUI stall in `spindle-bench studio`).
  std::deque<protocol::PolicyInfo> rows_;
  // Addresses of rows this model inserted itself (a fork, an import, an undone delete): keyset
  // pages never overlap, so only these can arrive again with a later page. (A set of every
  // loaded address rehashing at 10^6 rows stalled the GUI thread.)
  QSet<QString> inserted_;
  CatalogFilter filter_;
  QString search_text_;
  std::string cursor_;
  bool at_end_ = false;
  bool in_flight_ = false;
  quint64 generation_ = 0;
  quint64 page_requests_ = 0;
  int prefetch_to_ = -1;
  int sort_column_ = Name;
  Qt::SortOrder sort_order_ = Qt::AscendingOrder;
  QSet<int> hidden_columns_;

  QVector<PendingDelete> pending_delete_;
  QSet<QString> hidden_addresses_;  // pending or in-flight deletes: never shown again
  QTimer delete_timer_;
  int undo_window_ms_ = 10000;
  int deletes_in_flight_ = 0;
  int deletes_done_ = 0;

  QString error_code_, error_message_;
};

}  // namespace spindle::ui
