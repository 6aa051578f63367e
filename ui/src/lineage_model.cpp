// LineageModel: the three requests of load(), the graph, its layout and the node actions
// (lineage_model.h).

#include "spindle/ui/lineage_model.h"

#include <QDateTime>
#include <QHash>
#include <QJsonArray>
#include <QLocale>
#include <QJsonDocument>
#include <QJsonObject>

#include <algorithm>
#include <functional>

#include "spindle/ui/connection.h"

namespace spindle::ui {

using namespace protocol;

namespace {

constexpr int kMaxLineage = 1000;  // per direction, the protocol's default cap

void flatten(const QString& prefix, const QJsonValue& v, QVector<QPair<QString, QString>>* out) {
  if (v.isObject()) {
    const QJsonObject o = v.toObject();
    for (auto it = o.begin(); it != o.end(); ++it)
      flatten(prefix.isEmpty() ? it.key() : prefix + "." + it.key(), it.value(), out);
    return;
  }
  QString text;
  if (v.isDouble()) {
    text = QString::number(v.toDouble(), 'g', 6);
  } else if (v.isString()) {
    text = v.toString();
  } else if (v.isBool()) {
    text = v.toBool() ? "true" : "false";
  } else if (v.isArray()) {
    text = QString::fromUtf8(QJsonDocument(v.toArray()).toJson(QJsonDocument::Compact));
  } else {
    text = "null";
  }
  out->push_back({prefix, text});
}

}  // namespace

QString LineageNode::label() const {
  QString s = QStringLiteral("step %1").arg(step);
  if (!metric_name.isEmpty()) s += QStringLiteral("\n%1 %2").arg(metric_name).arg(metric_value, 0, 'g', 4);
  return s;
}

namespace {

QDateTime utc(qint64 ms) {
  return QDateTime::fromMSecsSinceEpoch(ms).toUTC();
}

QString utc_text(qint64 ms, const char* format) {
  return QLocale::c().toString(utc(ms), QLatin1String(format)) + QStringLiteral(" UTC");
}

}  // namespace

QString LineageNode::lifetimeText(qint64 now_ms) const {
  if (expired) return QObject::tr("expired");
  if (expires_ms == 0) return {};
  const bool same_day = utc(expires_ms).date() == utc(now_ms).date();
  return QObject::tr("ephemeral · expires %1")
      .arg(utc_text(expires_ms, same_day ? "HH:mm" : "MMM d HH:mm"));
}

QString LineageNode::lifetimeText() const {
  return lifetimeText(QDateTime::currentMSecsSinceEpoch());
}

QString LineageNode::lifetimeDetail() const {
  const QString when = utc_text(expires_ms, "yyyy-MM-dd HH:mm:ss");
  if (expired) return QObject::tr("expired at %1 (not servable: its weights were released)").arg(when);
  if (expires_ms == 0) return QObject::tr("durable");
  return QObject::tr("ephemeral, expires %1 (promote it to keep it)").arg(when);
}

LineageModel::LineageModel(Connection* connection, QObject* parent)
    : QObject(parent), connection_(connection) {}

bool LineageModel::keyMetric(const QString& metrics_json, QString* name, double* value) {
  const QJsonObject o = QJsonDocument::fromJson(metrics_json.toUtf8()).object();
  for (const char* key : {"reward_mean", "eval_accuracy", "reward", "accuracy", "eval_loss", "loss"}) {
    const QJsonValue v = o.value(QLatin1String(key));
    if (v.isDouble()) {
      *name = QLatin1String(key);
      *value = v.toDouble();
      return true;
    }
  }
  return false;
}

void LineageModel::load(const QString& address) {
  // The policy part of the address: the header is the policy's, the lineage its head's.
  const int at = address.indexOf('@', address.startsWith("spindle://") ? 10 : 0);
  address_ = at < 0 ? address : address.left(at);
  const quint64 generation = ++generation_;
  loading_ = true;
  error_code_.clear();
  error_message_.clear();
  policy_ = {};
  nodes_.clear();
  edges_.clear();
  lanes_ = columns_ = 0;
  truncated_ = false;
  selected_.clear();
  emit headerChanged();
  emit lineageChanged();
  emit selectionChanged({});
  connection_->post(this, Op::catalog_show, AddressRequest{address_.toStdString()},
                    [this, generation](const Reply& r) { onShow(generation, r); });
}

bool LineageModel::fail(const Reply& reply) {
  if (reply.ok) return false;
  error_code_ = QString::fromStdString(reply.error.code);
  error_message_ = QString::fromStdString(reply.error.message);
  emit error(error_code_, error_message_);
  return true;
}

void LineageModel::onShow(quint64 generation, const Reply& reply) {
  if (generation != generation_) return;
  if (fail(reply)) {
    loading_ = false;
    emit ready();
    return;
  }
  policy_ = std::get<PolicyReply>(reply.body).policy;
  emit headerChanged();
  if (policy_.head.empty()) return finish();
  LineageRequest q;
  q.address = policy_.address + "@" + policy_.head;
  q.max_ancestors = kMaxLineage;
  q.max_descendants = 0;
  connection_->post(this, Op::catalog_lineage, q,
                    [this, generation](const Reply& r) { onAncestry(generation, r); });
}

void LineageModel::onAncestry(quint64 generation, const Reply& reply) {
  if (generation != generation_) return;
  if (fail(reply)) return finish();
  const auto& l = std::get<LineageReply>(reply.body);
  truncated_ = truncated_ || l.ancestors_truncated;
  addRevision(l.revision);
  const RevisionInfo* root = &l.revision;
  int deepest = 0;
  for (const auto& e : l.ancestors) {
    addRevision(e.revision);
    if (e.depth > deepest) {
      deepest = e.depth;
      root = &e.revision;
    }
  }
  LineageRequest q;
  q.address = "spindle://" + policy_.tenant + "/" + root->policy + "@" + root->id;
  q.max_ancestors = 0;
  q.max_descendants = kMaxLineage;
  connection_->post(this, Op::catalog_lineage, q,
                    [this, generation](const Reply& r) { onTree(generation, r); });
}

void LineageModel::onTree(quint64 generation, const Reply& reply) {
  if (generation != generation_) return;
  if (!reply.ok) {
    // The ancestry alone still tells the head's story (e.g. the root's policy was deleted).
    fail(reply);
    return finish();
  }
  const auto& l = std::get<LineageReply>(reply.body);
  truncated_ = truncated_ || l.descendants_truncated;
  addRevision(l.revision);
  for (const auto& e : l.descendants) addRevision(e.revision);
  finish();
}

void LineageModel::addRevision(const RevisionInfo& r) {
  const QString id = QString::fromStdString(r.id);
  if (id.isEmpty() || indexOf(id) >= 0) return;
  LineageNode n;
  n.id = id;
  n.policy = QString::fromStdString(r.policy);
  n.parent = QString::fromStdString(r.parent);
  n.step = r.step;
  n.metrics_json = QString::fromStdString(r.metrics_json);
  keyMetric(n.metrics_json, &n.metric_name, &n.metric_value);
  n.own = r.policy == policy_.name;
  n.expires_ms = r.expires_ms;
  n.expired = r.expired;
  nodes_.push_back(n);
}

void LineageModel::setLineage(const PolicyInfo& policy, const std::vector<RevisionInfo>& revisions) {
  ++generation_;  // drops replies to an earlier load()
  address_ = QString::fromStdString(policy.address);
  loading_ = false;
  error_code_.clear();
  error_message_.clear();
  policy_ = policy;
  nodes_.clear();
  edges_.clear();
  lanes_ = columns_ = 0;
  truncated_ = false;
  selected_.clear();
  emit selectionChanged({});
  emit headerChanged();
  for (const RevisionInfo& r : revisions) addRevision(r);
  finish();
}

QString LineageModel::userMetadataText() const {
  if (policy_.user_metadata_json.empty()) return {};
  const QJsonDocument doc = QJsonDocument::fromJson(QByteArray::fromStdString(policy_.user_metadata_json));
  return doc.isObject() ? QString::fromUtf8(doc.toJson(QJsonDocument::Compact))
                        : QString::fromStdString(policy_.user_metadata_json);
}

QString LineageModel::userMetadataPretty() const {
  if (policy_.user_metadata_json.empty()) return {};
  const QJsonDocument doc = QJsonDocument::fromJson(QByteArray::fromStdString(policy_.user_metadata_json));
  return doc.isObject() ? QString::fromUtf8(doc.toJson(QJsonDocument::Indented)).trimmed()
                        : QString::fromStdString(policy_.user_metadata_json);
}

int LineageModel::indexOf(const QString& id) const {
  for (int i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].id == id) return i;
  return -1;
}

void LineageModel::markHead() {
  const QString head = QString::fromStdString(policy_.head);
  for (LineageNode& n : nodes_) {
    n.head = n.id == head;
    n.own = n.policy.toStdString() == policy_.name;
  }
}

void LineageModel::finish() {
  edges_.clear();
  for (const LineageNode& n : nodes_) {
    if (!n.parent.isEmpty() && indexOf(n.parent) >= 0) edges_.push_back({n.parent, n.id});
  }
  markHead();
  layout();
  loading_ = false;
  emit lineageChanged();
  emit ready();
}

void LineageModel::layout() {
  QHash<QString, int> index;
  for (int i = 0; i < nodes_.size(); ++i) index.insert(nodes_[i].id, i);
  QHash<QString, QVector<int>> children;
  QVector<int> roots;
  for (int i = 0; i < nodes_.size(); ++i) {
    if (index.contains(nodes_[i].parent)) {
      children[nodes_[i].parent].push_back(i);
    } else {
      roots.push_back(i);
    }
  }
  // The shown policy's own line first, then the rest by step and id (a stable drawing).
  auto before = [this](int a, int b) {
    const LineageNode &x = nodes_[a], &y = nodes_[b];
    if (x.own != y.own) return x.own;
    if (x.step != y.step) return x.step < y.step;
    return x.id < y.id;
  };
  std::sort(roots.begin(), roots.end(), before);
  for (auto& c : children) std::sort(c.begin(), c.end(), before);
  int next_lane = 0;
  columns_ = 0;
  // Iterative depth-first walk (a lineage can be 1000 deep): a node takes the lane of its
  // first child; a leaf opens a new lane.
  struct Frame {
    int node;
    int child;
  };
  for (int root : roots) {
    QVector<Frame> stack{{root, 0}};
    nodes_[root].column = 0;
    while (!stack.isEmpty()) {
      Frame& f = stack.back();
      const QVector<int>& kids = children.value(nodes_[f.node].id);
      if (f.child == 0 && kids.isEmpty()) nodes_[f.node].lane = next_lane++;
      if (f.child < kids.size()) {
        const int k = kids[f.child++];
        nodes_[k].column = nodes_[f.node].column + 1;
        columns_ = std::max(columns_, nodes_[k].column);
        stack.push_back({k, 0});
        continue;
      }
      if (!kids.isEmpty()) nodes_[f.node].lane = nodes_[kids.front()].lane;
      stack.pop_back();
    }
  }
  lanes_ = next_lane;
  if (!nodes_.isEmpty()) ++columns_;
}

// ---- selection and actions ----------------------------------------------------------------------

void LineageModel::selectNode(const QString& id) {
  const QString s = indexOf(id) >= 0 ? id : QString();
  if (s == selected_) return;
  selected_ = s;
  emit selectionChanged(selected_);
}

QVector<QPair<QString, QString>> LineageModel::selectedMetrics() const {
  QVector<QPair<QString, QString>> out;
  const int i = indexOf(selected_);
  if (i < 0) return out;
  const QJsonDocument doc = QJsonDocument::fromJson(nodes_[i].metrics_json.toUtf8());
  if (doc.isObject()) flatten({}, doc.object(), &out);
  return out;
}

QString LineageModel::addressOf(const QString& id) const {
  const int i = indexOf(id);
  if (i < 0) return {};
  return QStringLiteral("spindle://%1/%2@%3")
      .arg(QString::fromStdString(policy_.tenant), nodes_[i].policy, id);
}

void LineageModel::rollbackTo(const QString& id) {
  if (indexOf(id) < 0 || !hasPolicy()) return;
  const quint64 generation = generation_;
  error_code_.clear();
  AddressRequest q{policy_.address + "@" + id.toStdString()};
  connection_->post(this, Op::catalog_rollback, q, [this, generation](const Reply& r) {
    if (generation != generation_ || fail(r)) return;
    policy_ = std::get<PolicyReply>(r.body).policy;
    markHead();
    emit headerChanged();
    emit lineageChanged();
    emit actionDone(tr("%1: head is now %2")
                        .arg(QString::fromStdString(policy_.name),
                             QString::fromStdString(policy_.head.substr(0, 12))));
  });
}

void LineageModel::promote(const QString& id) {
  const int i = indexOf(id);
  if (i < 0 || !nodes_[i].ephemeral()) return;
  const quint64 generation = generation_;
  error_code_.clear();
  AddressRequest q{addressOf(id).toStdString()};
  connection_->post(this, Op::catalog_promote, q, [this, generation, id](const Reply& r) {
    if (generation != generation_ || fail(r)) return;
    const auto& reply = std::get<PolicyReply>(r.body);
    const int k = indexOf(id);
    if (k >= 0 && reply.revision.id == id.toStdString()) {
      nodes_[k].expires_ms = reply.revision.expires_ms;
      nodes_[k].expired = reply.revision.expired;
    }
    emit lineageChanged();
    if (id == selected_) emit selectionChanged(selected_);
    emit actionDone(tr("%1@%2 is durable").arg(k >= 0 ? nodes_[k].policy : QString(), id.left(12)));
  });
}

void LineageModel::forkAt(const QString& id, const QString& name) {
  const QString address = addressOf(id);
  if (address.isEmpty()) return;
  error_code_.clear();
  ForkRequest q{address.toStdString(), name.trimmed().toStdString()};
  connection_->post(this, Op::catalog_fork, q, [this](const Reply& r) {
    if (fail(r)) return;
    const auto& p = std::get<PolicyReply>(r.body).policy;
    emit actionDone(tr("forked as %1").arg(QString::fromStdString(p.name)));
    emit forked(QString::fromStdString(p.address));
  });
}

}  // namespace spindle::ui
