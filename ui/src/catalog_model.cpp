// CatalogModel: paging, filters, search, sorting and the table's data (catalog_model.h).
// The multi-select actions are in catalog_actions.cpp.

#include "spindle/ui/catalog_model.h"

#include <QSettings>

#include <algorithm>

#include "spindle/ui/connection.h"

namespace spindle::ui {

using namespace protocol;

namespace {

QString joined(const std::vector<std::string>& items) {
  QStringList out;
  for (const auto& s : items) out << QString::fromStdString(s);
  return out.join(", ");
}

QString local_time(qint64 ms) {
  if (ms <= 0) return {};
  return QDateTime::fromMSecsSinceEpoch(ms).toLocalTime().toString("yyyy-MM-dd HH:mm:ss");
}

// Ascending order of `column`, ties broken by name (names are unique per tenant).
bool column_less(int column, const PolicyInfo& a, const PolicyInfo& b) {
  auto tie = [&](const auto& x, const auto& y) { return x != y ? x < y : a.name < b.name; };
  switch (column) {
    case CatalogModel::Base: return tie(a.base_id, b.base_id);
    case CatalogModel::Rank: return tie(a.rank, b.rank);
    case CatalogModel::Alpha: return tie(a.alpha, b.alpha);
    case CatalogModel::Targets: return tie(joined(a.targets), joined(b.targets));
    case CatalogModel::Tags: return tie(joined(a.tags), joined(b.tags));
    case CatalogModel::Head: return tie(a.head, b.head);
    case CatalogModel::Updated: return tie(a.updated_ms, b.updated_ms);
    case CatalogModel::Description: return tie(a.description, b.description);
    default: return a.name < b.name;
  }
}

constexpr const char* kHiddenColumnsKey = "catalog/hidden_columns";

}  // namespace

CatalogModel::CatalogModel(Connection* connection, QObject* parent)
    : QAbstractTableModel(parent), connection_(connection) {
  delete_timer_.setSingleShot(true);
  connect(&delete_timer_, &QTimer::timeout, this, &CatalogModel::commitDelete);
  const QSettings settings;
  for (const QVariant& v : settings.value(kHiddenColumnsKey).toList()) {
    const int c = v.toInt();
    if (c > Name && c < ColumnCount) hidden_columns_.insert(c);  // the name always shows
  }
}

CatalogModel::~CatalogModel() {
  if (connection_) commitDelete();
}

int CatalogModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : int(rows_.size());
}

int CatalogModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

QVariant CatalogModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= int(rows_.size())) return {};
  const PolicyInfo& p = rows_[size_t(index.row())];
  switch (role) {
    case Qt::DisplayRole:
      switch (index.column()) {
        case Name: return QString::fromStdString(p.name);
        case Base: return QString::fromStdString(p.base_id);
        case Rank: return qlonglong(p.rank);
        case Alpha: return double(p.alpha);
        case Targets: return joined(p.targets);
        case Tags: return joined(p.tags);
        case Head: return QString::fromStdString(p.head.substr(0, 12));
        case Updated: return local_time(p.updated_ms);
        case Description: return QString::fromStdString(p.description);
      }
      return {};
    case Qt::ToolTipRole:
      if (index.column() == Head && !p.head.empty()) return QString::fromStdString(p.head);
      if (index.column() == Description) return QString::fromStdString(p.description);
      return QString::fromStdString(p.address + (p.forked_from.empty()
                                                     ? std::string()
                                                     : "\nforked from " + p.forked_from));
    case Qt::TextAlignmentRole:
      if (index.column() == Rank || index.column() == Alpha)
        return int(Qt::AlignRight | Qt::AlignVCenter);
      return int(Qt::AlignLeft | Qt::AlignVCenter);
    case AddressRole: return QString::fromStdString(p.address);
    case NameRole: return QString::fromStdString(p.name);
    case HeadRole: return QString::fromStdString(p.head);
    case UpdatedMsRole: return qlonglong(p.updated_ms);
  }
  return {};
}

QVariant CatalogModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (section) {
    case Name: return tr("Name");
    case Base: return tr("Base");
    case Rank: return tr("Rank");
    case Alpha: return tr("Alpha");
    case Targets: return tr("Targets");
    case Tags: return tr("Tags");
    case Head: return tr("Head");
    case Updated: return tr("Updated");
    case Description: return tr("Description");
  }
  return {};
}

// ---- paging -----------------------------------------------------------------------------------

bool CatalogModel::canFetchMore(const QModelIndex& parent) const {
  return !parent.isValid() && !at_end_;
}

void CatalogModel::fetchMore(const QModelIndex& parent) {
  if (parent.isValid() || at_end_ || in_flight_) return;
  requestPage();
}

void CatalogModel::ensureLoaded(int row) {
  prefetch_to_ = std::max(prefetch_to_, row);
  if (row >= rowCount() && !at_end_ && !in_flight_) requestPage();
}

void CatalogModel::requestPage() {
  in_flight_ = true;
  const quint64 generation = generation_;
  if (isSearch()) {
    CatalogSearchRequest q;
    q.text = search_text_.toStdString();
    q.limit = kSearchLimit;
    connection_->post(this, Op::catalog_search, q, [this, generation](const Reply& r) {
      onPage(generation, r, /*search=*/true);
    });
    return;
  }
  CatalogListRequest q;
  q.base_id = filter_.base_id.toStdString();
  q.tag = filter_.tag.toStdString();
  q.name_prefix = filter_.name_prefix.toStdString();
  q.limit = kPageSize;
  q.cursor = cursor_;
  ++page_requests_;
  connection_->post(this, Op::catalog_list, q, [this, generation](const Reply& r) {
    onPage(generation, r, /*search=*/false);
  });
}

void CatalogModel::onPage(quint64 generation, const Reply& reply, bool search) {
  if (generation != generation_) return;  // answered a request from before a reset
  in_flight_ = false;
  if (!reply.ok) {
    at_end_ = true;  // stop paging; reset() (F5) tries again
    setError(reply);
    emit loaded(rowCount());
    return;
  }
  const auto& page = std::get<PolicyListReply>(reply.body);
  QVector<PolicyInfo> fresh;
  for (const PolicyInfo& p : page.policies) {
    const QString address = QString::fromStdString(p.address);
    if (!passes(p) || hidden_addresses_.contains(address) || inserted_.contains(address)) continue;
    fresh.push_back(p);
  }
  if (search) {
    at_end_ = true;
  } else {
    cursor_ = page.next_cursor;
    at_end_ = page.next_cursor.empty();
  }
  if (!fresh.isEmpty()) {
    beginInsertRows({}, rowCount(), rowCount() + int(fresh.size()) - 1);
    rows_.insert(rows_.end(), std::make_move_iterator(fresh.begin()), std::make_move_iterator(fresh.end()));
    endInsertRows();
    // Search results keep their relevance order unless the user picked a column to sort by.
    if (!isNameOrder()) applySort();
  }
  emit loaded(rowCount());
  // Keep going: the prefetch target is not reached, or a page of filtered-out rows added
  // nothing a view could scroll to (it would never ask again).
  if (!at_end_ && (fresh.isEmpty() || prefetch_to_ >= rowCount())) requestPage();
}

bool CatalogModel::passes(const PolicyInfo& p) const {
  if (filter_.updated_since_ms > 0 && p.updated_ms < filter_.updated_since_ms) return false;
  if (!filter_.base_id.isEmpty() && p.base_id != filter_.base_id.toStdString()) return false;
  if (!filter_.tag.isEmpty() &&
      std::find(p.tags.begin(), p.tags.end(), filter_.tag.toStdString()) == p.tags.end())
    return false;
  return filter_.name_prefix.isEmpty() ||
         QString::fromStdString(p.name).startsWith(filter_.name_prefix);
}

void CatalogModel::reset() {
  ++generation_;
  beginResetModel();
  rows_.clear();
  inserted_.clear();
  cursor_.clear();
  at_end_ = false;
  in_flight_ = false;
  prefetch_to_ = -1;
  endResetModel();
  requestPage();
}

void CatalogModel::setFilter(const CatalogFilter& filter) {
  if (filter == filter_ && !isSearch()) return;
  filter_ = filter;
  search_text_.clear();
  reset();
}

void CatalogModel::search(const QString& text) {
  search_text_ = text.trimmed();
  reset();
}

// ---- rows ---------------------------------------------------------------------------------------

int CatalogModel::rowOfName(const QString& name) const {
  const std::string n = name.toStdString();
  for (int i = 0; i < int(rows_.size()); ++i)
    if (rows_[size_t(i)].name == n) return i;
  return -1;
}

int CatalogModel::rowOfAddress(const QString& address) const {
  const std::string a = address.toStdString();
  for (int i = 0; i < int(rows_.size()); ++i)
    if (rows_[size_t(i)].address == a) return i;
  return -1;
}

QString CatalogModel::addressAt(int row) const {
  return row >= 0 && row < int(rows_.size()) ? QString::fromStdString(rows_[size_t(row)].address) : QString();
}

void CatalogModel::setColumnHidden(int column, bool hidden) {
  if (column <= Name || column >= ColumnCount || isColumnHidden(column) == hidden) return;
  if (hidden) {
    hidden_columns_.insert(column);
  } else {
    hidden_columns_.remove(column);
  }
  QVariantList list;
  for (int c = 0; c < ColumnCount; ++c)
    if (hidden_columns_.contains(c)) list << c;
  QSettings().setValue(kHiddenColumnsKey, list);
  emit columnHiddenChanged(column, hidden);
}

// ---- sorting ------------------------------------------------------------------------------------

bool CatalogModel::lessThan(const PolicyInfo& a, const PolicyInfo& b) const {
  // Descending is ascending with the operands swapped.
  return sort_order_ == Qt::DescendingOrder ? column_less(sort_column_, b, a)
                                            : column_less(sort_column_, a, b);
}

void CatalogModel::sort(int column, Qt::SortOrder order) {
  if (column < 0 || column >= ColumnCount) return;
  if (column == sort_column_ && order == sort_order_) return;
  sort_column_ = column;
  sort_order_ = order;
  applySort();
}

// Sorts the loaded rows only (see the header): the server pages by name, so any other order
// is an order of what has arrived; persistent indexes (the view's selection) follow their rows.
void CatalogModel::applySort() {
  emit layoutAboutToBeChanged({}, QAbstractItemModel::VerticalSortHint);
  const QModelIndexList before = persistentIndexList();
  QStringList addresses;
  for (const QModelIndex& i : before) addresses << addressAt(i.row());
  std::stable_sort(rows_.begin(), rows_.end(),
                   [this](const PolicyInfo& a, const PolicyInfo& b) { return lessThan(a, b); });
  QHash<QString, int> where;
  for (int i = 0; i < int(rows_.size()); ++i) where.insert(QString::fromStdString(rows_[size_t(i)].address), i);
  QModelIndexList after;
  for (int k = 0; k < before.size(); ++k) {
    const int row = where.value(addresses[k], -1);
    after << (row < 0 ? QModelIndex() : index(row, before[k].column()));
  }
  changePersistentIndexList(before, after);
  emit layoutChanged({}, QAbstractItemModel::VerticalSortHint);
}

void CatalogModel::insertNew(const PolicyInfo& p) {
  const QString address = QString::fromStdString(p.address);
  if (rowOfAddress(address) >= 0) return replacePolicy(p);
  if (!passes(p) || isSearch()) return;
  // In name order a row past the last loaded one arrives with a later page: leave it to it.
  if (!at_end_ && !rows_.empty() && p.name > rows_.back().name) return;
  int at = int(rows_.size());
  for (int i = 0; i < int(rows_.size()); ++i) {
    if (isNameOrder() ? p.name < rows_[size_t(i)].name : lessThan(p, rows_[size_t(i)])) {
      at = i;
      break;
    }
  }
  beginInsertRows({}, at, at);
  rows_.insert(rows_.begin() + at, p);
  inserted_.insert(address);
  endInsertRows();
}

void CatalogModel::replacePolicy(const PolicyInfo& p) {
  const int row = rowOfAddress(QString::fromStdString(p.address));
  if (row < 0) return;
  rows_[size_t(row)] = p;
  emit dataChanged(index(row, 0), index(row, ColumnCount - 1));
}

// ---- errors -------------------------------------------------------------------------------------

void CatalogModel::setError(const Reply& reply) {
  setError(QString::fromStdString(reply.error.code), QString::fromStdString(reply.error.message));
}

void CatalogModel::setError(const QString& code, const QString& message) {
  error_code_ = code;
  error_message_ = message;
  emit error(code, message);
}

void CatalogModel::clearError() {
  if (error_code_.isEmpty()) return;
  error_code_.clear();
  error_message_.clear();
  emit errorCleared();
}

}  // namespace spindle::ui
