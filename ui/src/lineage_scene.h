#pragma once
// The lineage graph of a LineageModel as a QGraphicsScene (the Policy view draws it): one
// selectable rounded box per revision at (column, lane) of the model's layout, a curve per
// parent edge. The shown policy's revisions are filled with the palette's highlight; each other
// policy (forks across policies) gets a colour of its own and its name on the box. The head
// has a thick border and a "head" mark. An ephemeral revision has a dashed border and its
// badge ("ephemeral · expires 14:05 UTC") at the foot of the box; an expired one is greyed
// (grey fill and text, dotted border) with the badge "expired". Pure drawing: what a node
// means is the model's.

#include <QGraphicsScene>
#include <QHash>

namespace spindle::ui {

class LineageModel;

class LineageScene : public QGraphicsScene {
  Q_OBJECT
 public:
  explicit LineageScene(QObject* parent = nullptr);

  // Clears and draws `model`'s nodes and edges in `palette`'s colours.
  void rebuild(const LineageModel& model, const QPalette& palette);
  void selectId(const QString& id);  // selects that node's box ("" clears)
  QString selectedId() const;        // the selected box's revision id, or ""
  QPointF centerOf(const QString& id) const;

  static constexpr qreal kNodeWidth = 150, kNodeHeight = 62, kColumnStep = 182, kLaneStep = 84;

 private:
  QHash<QString, QGraphicsItem*> items_;
};

}  // namespace spindle::ui
