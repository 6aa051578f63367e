#include "lineage_scene.h"

#include <QGraphicsPathItem>
#include <QGraphicsSimpleTextItem>
#include <QPainter>
#include <QPalette>
#include <QStyleOptionGraphicsItem>

#include "spindle/ui/lineage_model.h"

namespace spindle::ui {

namespace {

QColor mix(const QColor& a, const QColor& b, qreal t) {
  return QColor::fromRgbF(a.redF() * (1 - t) + b.redF() * t, a.greenF() * (1 - t) + b.greenF() * t,
                          a.blueF() * (1 - t) + b.blueF() * t);
}

// A colour per other policy: the highlight's saturation and value at a hue of the name's own.
QColor policy_colour(const QString& policy, const QPalette& p) {
  const QColor h = p.color(QPalette::Highlight).toHsv();
  const int hue = (h.hue() + 60 + int(qHash(policy) % 240)) % 360;
  return QColor::fromHsv(hue, std::max(h.saturation(), 120), std::max(h.value(), 170));
}

// A revision box; selection draws a thicker outline in the text colour. `border`: solid
// (durable), dashed (ephemeral) or dotted (expired).
class NodeItem : public QGraphicsPathItem {
 public:
  NodeItem(const QPainterPath& path, QColor fill, QColor edge, QColor text, bool head,
           Qt::PenStyle border)
      : QGraphicsPathItem(path), fill_(fill), edge_(edge), text_(text), head_(head),
        border_(border) {
    setFlag(ItemIsSelectable);
    setCursor(Qt::PointingHandCursor);
  }
  void paint(QPainter* painter, const QStyleOptionGraphicsItem* option, QWidget*) override {
    painter->setRenderHint(QPainter::Antialiasing);
    const bool selected = option->state & QStyle::State_Selected;
    painter->setBrush(fill_);
    QPen pen(selected ? text_ : edge_, selected ? 3.0 : head_ ? 2.6 : 1.4);
    pen.setStyle(border_);  // selected or not: the lifetime stays visible
    painter->setPen(pen);
    painter->drawPath(path());
  }

 private:
  QColor fill_, edge_, text_;
  bool head_;
  Qt::PenStyle border_;
};

}  // namespace

LineageScene::LineageScene(QObject* parent) : QGraphicsScene(parent) {}

void LineageScene::rebuild(const LineageModel& model, const QPalette& palette) {
  clear();
  items_.clear();
  setBackgroundBrush(palette.color(QPalette::Base));
  const QColor text = palette.color(QPalette::Text);
  const QColor base = palette.color(QPalette::Base);
  const QColor own = palette.color(QPalette::Highlight);
  auto pos = [](const LineageNode& n) {
    return QPointF(n.column * kColumnStep, n.lane * kLaneStep);
  };
  // Edges first, under the boxes: parent's right edge to child's left edge.
  QPen edge_pen(mix(base, text, 0.55), 1.6);
  for (const LineageEdge& e : model.edges()) {
    const int a = model.indexOf(e.from), b = model.indexOf(e.to);
    if (a < 0 || b < 0) continue;
    const QPointF from = pos(model.nodes()[a]) + QPointF(kNodeWidth, kNodeHeight / 2);
    const QPointF to = pos(model.nodes()[b]) + QPointF(0, kNodeHeight / 2);
    QPainterPath path(from);
    const qreal dx = (to.x() - from.x()) / 2;
    path.cubicTo(from + QPointF(dx, 0), to - QPointF(dx, 0), to);
    auto* item = addPath(path, edge_pen);
    item->setZValue(-1);
    QPolygonF arrow;  // a small head at the child
    arrow << to << to + QPointF(-7, -4) << to + QPointF(-7, 4);
    addPolygon(arrow, Qt::NoPen, edge_pen.color())->setZValue(-1);
  }
  const QColor grey = mix(base, text, 0.45);
  for (const LineageNode& n : model.nodes()) {
    const QColor hue = n.expired ? grey : n.own ? own : policy_colour(n.policy, palette);
    const QColor ink = n.expired ? mix(base, text, 0.55) : text;
    QPainterPath box;
    box.addRoundedRect(QRectF(0, 0, kNodeWidth, kNodeHeight), 8, 8);
    const Qt::PenStyle border = n.expired ? Qt::DotLine : n.ephemeral() ? Qt::DashLine : Qt::SolidLine;
    auto* item = new NodeItem(box, n.expired ? mix(base, text, 0.08) : mix(base, hue, 0.28), hue,
                              text, n.head, border);
    item->setPos(pos(n));
    item->setData(0, n.id);
    const QString lifetime = n.lifetimeText();
    item->setToolTip(QStringLiteral("%1@%2\n%3\n%4").arg(n.policy, n.id, n.lifetimeDetail(), n.metrics_json));
    addItem(item);
    items_.insert(n.id, item);
    QString label = n.label();
    if (!n.own) label = n.policy + "\n" + label;
    auto* t = new QGraphicsSimpleTextItem(label, item);
    t->setBrush(ink);
    QFont f = t->font();
    f.setPointSizeF(f.pointSizeF() * 0.9);
    t->setFont(f);
    const QRectF r = t->boundingRect();
    qreal badge_h = 0;
    if (!lifetime.isEmpty()) {
      // The badge at the foot of the box, in the node's colour (grey when expired).
      auto* b = new QGraphicsSimpleTextItem(lifetime, item);
      QFont bf = f;
      bf.setPointSizeF(f.pointSizeF() * 0.85);
      bf.setItalic(n.expired);
      b->setFont(bf);
      // A long badge (an expiry on another day) shrinks to fit; the tooltip has it in full.
      for (int i = 0; i < 6 && b->boundingRect().width() > kNodeWidth - 10; ++i) {
        bf.setPointSizeF(bf.pointSizeF() * 0.92);
        b->setFont(bf);
      }
      b->setBrush(n.expired ? ink : mix(hue, text, 0.45));
      const QRectF br = b->boundingRect();
      badge_h = br.height();
      b->setPos((kNodeWidth - br.width()) / 2, kNodeHeight - br.height() - 3);
    }
    t->setPos((kNodeWidth - r.width()) / 2, (kNodeHeight - badge_h - r.height()) / 2);
    if (n.head) {
      auto* mark = new QGraphicsSimpleTextItem(QObject::tr("head"), item);
      QFont mf = f;
      mf.setBold(true);
      mark->setFont(mf);
      mark->setBrush(hue);
      mark->setPos(kNodeWidth - mark->boundingRect().width() - 2, -mark->boundingRect().height());
    }
  }
  setSceneRect(itemsBoundingRect().adjusted(-24, -24, 24, 24));
}

void LineageScene::selectId(const QString& id) {
  clearSelection();
  if (QGraphicsItem* item = items_.value(id)) item->setSelected(true);
}

QString LineageScene::selectedId() const {
  const auto items = selectedItems();
  return items.isEmpty() ? QString() : items.front()->data(0).toString();
}

QPointF LineageScene::centerOf(const QString& id) const {
  const QGraphicsItem* item = items_.value(id);
  return item ? item->sceneBoundingRect().center() : QPointF();
}

}  // namespace spindle::ui
