#include "token_strip.h"

#include <QHelpEvent>
#include <QPainter>
#include <QToolTip>

#include <algorithm>
#include <cmath>

namespace spindle::ui {

namespace {
constexpr int kPadX = 4, kPadY = 2, kGap = 3;
}

TokenStrip::TokenStrip(QWidget* parent) : QWidget(parent) {
  setSizePolicy(QSizePolicy::Preferred, QSizePolicy::Preferred);
  setMouseTracking(true);
}

void TokenStrip::setTokens(std::vector<int32_t> tokens, std::vector<float> logprobs) {
  tokens_ = std::move(tokens);
  logprobs_ = std::move(logprobs);
  logprobs_.resize(tokens_.size(), 0.0f);
  updateGeometry();
  update();
}

int TokenStrip::shadeAlpha(float logprob) {
  const double p = std::isfinite(logprob) ? std::clamp(std::exp(double(logprob)), 0.0, 1.0) : 0.0;
  return int(std::lround(30 + 200 * p));
}

QString TokenStrip::tokenToolTip(int i) const {
  if (i < 0 || i >= tokenCount()) return {};
  const double lp = logprobs_[size_t(i)];
  return tr("token %1 (position %2)\nlogprob %3, p = %4\ntext: not sent per token; the "
            "sequence's text shows when it finishes")
      .arg(tokens_[size_t(i)])
      .arg(i)
      .arg(lp, 0, 'f', 4)
      .arg(std::exp(lp), 0, 'f', 4);
}

std::vector<QRect> TokenStrip::layoutChips(int width) const {
  std::vector<QRect> out;
  out.reserve(tokens_.size());
  const QFontMetrics fm(font());
  const int h = fm.height() + 2 * kPadY;
  int x = 0, y = 0;
  for (int32_t t : tokens_) {
    const int w = fm.horizontalAdvance(QString::number(t)) + 2 * kPadX;
    if (x > 0 && x + w > width) {
      x = 0;
      y += h + kGap;
    }
    out.emplace_back(x, y, w, h);
    x += w + kGap;
  }
  return out;
}

int TokenStrip::heightForWidth(int width) const {
  const auto chips = layoutChips(std::max(width, 40));
  return chips.empty() ? QFontMetrics(font()).height() : chips.back().bottom() + 1;
}

QSize TokenStrip::sizeHint() const { return {240, heightForWidth(240)}; }

void TokenStrip::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing);
  const auto chips = layoutChips(width());
  const QColor base = palette().color(QPalette::Highlight);
  for (size_t i = 0; i < chips.size(); ++i) {
    QColor bg = base;
    const int alpha = shadeAlpha(logprobs_[i]);
    bg.setAlpha(alpha);
    p.setPen(Qt::NoPen);
    p.setBrush(bg);
    p.drawRoundedRect(chips[i], 3, 3);
    // Text on a strongly tinted chip takes the highlight's text colour, else the window's.
    p.setPen(palette().color(alpha > 140 ? QPalette::HighlightedText : QPalette::WindowText));
    p.drawText(chips[i], Qt::AlignCenter, QString::number(tokens_[i]));
  }
}

bool TokenStrip::event(QEvent* event) {
  if (event->type() == QEvent::ToolTip) {
    auto* help = static_cast<QHelpEvent*>(event);
    const auto chips = layoutChips(width());
    for (size_t i = 0; i < chips.size(); ++i) {
      if (chips[i].contains(help->pos())) {
        QToolTip::showText(help->globalPos(), tokenToolTip(int(i)), this, chips[i]);
        return true;
      }
    }
    QToolTip::hideText();
    event->ignore();
    return true;
  }
  return QWidget::event(event);
}

}  // namespace spindle::ui
