#pragma once
// The Policy view's model (STYLE.md 16): one policy's header and its revision lineage as a graph.
//
// load(address) asks, one after the other (never blocking; replies through Connection::post):
//   1. catalog_show(address): the header (PolicyInfo: name, base, rank, alpha, targets, tags,
//      description, forked_from, head). headerChanged() when it arrives.
//   2. catalog_lineage(<policy>@<head>, ancestors only): the head's ancestry up to its root
//      (the oldest ancestor, possibly in another policy when this one is a fork).
//   3. catalog_lineage(<root policy>@<root>, descendants only): the whole tree under the root,
//      including forks into other policies (RevisionInfo::policy names the policy that
//      committed each revision) and revisions past the head (after a rollback).
// The nodes are the union of both replies; an edge runs parent -> child when both ends are
// nodes. lineageChanged() then ready(). A policy without a head has no nodes (ready() after 1).
// If step 3 fails (say the root's policy was deleted), the ancestry of step 2 is shown.
// Errors of any step set lastErrorCode()/lastErrorMessage() (the server's) and emit error(),
// then ready() (so a screenshot never waits forever).
//
// Layout (for the QGraphicsView, computed here so it is tested): column = generations from
// the node's root (left to right); lane = row, one per leaf of a depth-first walk that visits
// the shown policy's own child first, so its main line stays on lane 0 and forks branch below.
//
// Key metric: the first of reward_mean, eval_accuracy, reward, accuracy, eval_loss, loss found
// as a number in metrics_json, else none. Node labels read "step 3" and "loss 1.234".
//
// Lifetime (RevisionInfo v2): a node is durable, ephemeral (expires_ms > 0: servable until the
// daemon collects it past expiry, unless promoted) or expired (collected: its weights are gone,
// it stays in the lineage, and addressing it is not_found). lifetimeText() is the badge the
// view shows: "" (durable), "ephemeral · expires 14:05 UTC" or "expired".
//
// Actions on a node: rollbackTo(id) makes it the shown policy's head (catalog_rollback of
// <policy>@<id>; the header and head mark update), forkAt(id, name) forks it into a new policy
// (catalog_fork; emits forked(address)), promote(id) makes an ephemeral node durable
// (catalog_promote; the node's expiry clears). addressOf(id) is the node's revision address
// "spindle://<tenant>/<node's policy>@<id>" (what "Open in playground" opens).
//
// loadRichest() is for screenshots and first opens: it lists the first catalog page, asks
// catalog_show of the most recently updated policies with a head (up to `candidates`, in
// parallel) and load()s the one with the longest recent history (PolicyReply::recent, <= 20);
// ready() with no policy when the catalog is empty.
//
// setLineage(policy, revisions) shows data already at hand (what load() ends with, without
// asking the daemon): tests, and screenshots of states a live daemon rarely holds.
//
// Threading: GUI thread only. A reply to an older load() is dropped.

#include <QObject>
#include <QPair>
#include <QPointer>
#include <QString>
#include <QVector>

#include "spindle/protocol/wire.h"

namespace spindle::ui {

class Connection;

struct LineageNode {
  QString id;            // revision id
  QString policy;        // name of the policy that committed it
  QString parent;        // parent revision id; "" for a first revision
  qint64 step = 0;
  QString metric_name;   // key metric ("" when metrics_json has none)
  double metric_value = 0;
  QString metrics_json;
  bool own = false;      // committed by the shown policy
  bool head = false;     // the shown policy's head
  int column = 0;        // layout, see above
  int lane = 0;
  qint64 expires_ms = 0;  // ephemeral: Unix ms of its expiry; 0 = durable
  bool expired = false;   // collected past expiry (not servable)

  bool ephemeral() const { return expires_ms != 0 && !expired; }
  QString label() const;  // "step N" plus "\n<metric> <value>" when there is a key metric
  // The lifetime badge: "" (durable), "ephemeral · expires 14:05 UTC" (the date too, as
  // "Jun 12 14:05 UTC", when it is not on now_ms's UTC day) or "expired".
  QString lifetimeText(qint64 now_ms) const;
  QString lifetimeText() const;  // against the current time
  // The details line: "durable", "ephemeral, expires 2024-06-12 14:05:09 UTC (promote it to
  // keep it)", "expired at 2024-06-12 14:05:09 UTC (not servable: its weights were released)".
  QString lifetimeDetail() const;
};

struct LineageEdge {
  QString from;  // parent revision id
  QString to;    // child revision id
  bool operator==(const LineageEdge&) const = default;
};

class LineageModel : public QObject {
  Q_OBJECT
 public:
  explicit LineageModel(Connection* connection, QObject* parent = nullptr);

  void load(const QString& address);  // a policy address (any revision suffix is ignored)
  // Shows `policy` with `revisions` (any order, duplicates ignored) as load() would once the
  // daemon answered; emits headerChanged, lineageChanged and ready.
  void setLineage(const protocol::PolicyInfo& policy,
                  const std::vector<protocol::RevisionInfo>& revisions);
  void reload() { if (!address_.isEmpty()) load(address_); }
  void loadRichest(int candidates = 16);  // lineage_pick.cpp
  QString address() const { return address_; }
  bool isLoading() const { return loading_; }

  const protocol::PolicyInfo& policy() const { return policy_; }
  bool hasPolicy() const { return !policy_.name.empty(); }
  const QVector<LineageNode>& nodes() const { return nodes_; }
  const QVector<LineageEdge>& edges() const { return edges_; }
  int indexOf(const QString& id) const;  // -1 when absent
  int lanes() const { return lanes_; }
  int columns() const { return columns_; }
  bool truncated() const { return truncated_; }  // the daemon capped ancestors or descendants

  void selectNode(const QString& id);  // "" clears
  QString selectedId() const { return selected_; }
  // The selected node's metrics_json flattened to (key, value) rows (nested keys "a.b").
  QVector<QPair<QString, QString>> selectedMetrics() const;
  QString addressOf(const QString& id) const;

  void rollbackTo(const QString& id);
  void forkAt(const QString& id, const QString& name);
  void promote(const QString& id);  // an ephemeral node; emits actionDone
  // The shown policy's user metadata ("" = none) as one line of compact JSON, and indented.
  QString userMetadataText() const;
  QString userMetadataPretty() const;

  QString lastErrorCode() const { return error_code_; }
  QString lastErrorMessage() const { return error_message_; }

  // Parses metrics_json's key metric (exposed for tests).
  static bool keyMetric(const QString& metrics_json, QString* name, double* value);

 signals:
  void headerChanged();
  void lineageChanged();
  void ready();
  void selectionChanged(QString id);
  void error(QString code, QString message);
  void actionDone(QString message);
  void forked(QString address);

 private:
  void onShow(quint64 generation, const protocol::Reply& reply);
  void onAncestry(quint64 generation, const protocol::Reply& reply);
  void onTree(quint64 generation, const protocol::Reply& reply);
  void addRevision(const protocol::RevisionInfo& r);
  void finish();    // edges, head/own marks, layout; emits lineageChanged + ready
  void layout();
  void markHead();
  bool fail(const protocol::Reply& reply);  // records the error; true when !reply.ok

  QPointer<Connection> connection_;
  QString address_;
  quint64 generation_ = 0;
  bool loading_ = false;
  protocol::PolicyInfo policy_;
  QVector<LineageNode> nodes_;
  QVector<LineageEdge> edges_;
  int lanes_ = 0, columns_ = 0;
  bool truncated_ = false;
  QString selected_;
  QString error_code_, error_message_;
};

}  // namespace spindle::ui
