#pragma once
// The Policy view (issue 14, view 2): a header (name, base, rank, alpha, targets, tags,
// description, forked_from, user metadata), the revision lineage as a graph (QGraphicsView over
// LineageModel's nodes and edges; forks into other policies in their own colour with their name;
// ephemeral revisions dashed with their expiry, expired ones greyed), and for the clicked node
// its lifetime, its metrics as a key/value table plus "Rollback to here", "Fork here…", "Keep
// (promote)" (ephemeral nodes) and "Open in playground". A thin widget over LineageModel
// (STYLE.md 16).
//
// Keys: F5 reload, Ctrl+Shift+R rollback to the selected node, Ctrl+K fork it, Ctrl+Shift+K
// promote it, Ctrl+P open it in the playground
// (openInPlayground("spindle://tenant/<policy>@<rev id>")). An expired node offers only its
// metrics (it cannot be served, forked or made the head). Errors of the
// model's requests show in the banner (the server's code and message); the fork name is asked
// with an input dialog only.

#include "spindle/ui/studio_view.h"

class QAction;
class QGraphicsScene;
class QGraphicsView;
class QLabel;
class QPushButton;
class QTableWidget;

namespace spindle::ui {

class LineageModel;
class LineageScene;
class ViewBanner;

class PolicyView : public StudioView {
  Q_OBJECT
 public:
  explicit PolicyView(Connection* connection, QWidget* parent = nullptr);

  QString title() const override { return tr("Policy"); }
  QString screenshotName() const override { return QStringLiteral("policy"); }
  void refresh() override;
  void prepareScreenshot() override;

  LineageModel* model() const { return model_; }
  QGraphicsScene* scene() const;  // the drawn graph (one selectable item per node)
  QTableWidget* metricsTable() const { return metrics_; }
  QLabel* lifetimeLabel() const { return lifetime_; }      // the selected node's lifetime
  QLabel* userMetadataLabel() const { return metadata_; }  // the header's user metadata

 public slots:
  void showPolicy(const QString& address);

 protected:
  void changeEvent(QEvent* event) override;  // a theme switch redraws the graph

 private:
  void updateHeader();
  void updateGraph();
  void updateDetails();
  void askFork();

  LineageModel* model_;
  LineageScene* scene_;
  ViewBanner* banner_;
  QGraphicsView* graph_;
  QLabel *name_, *base_, *rank_, *alpha_, *targets_, *tags_, *description_, *forked_from_,
      *head_, *metadata_, *selected_, *lifetime_, *hint_;
  QTableWidget* metrics_;
  QPushButton *rollback_, *fork_, *promote_, *playground_;
  QAction *rollback_action_, *fork_action_, *promote_action_, *playground_action_;
};

}  // namespace spindle::ui
