#include "token_strip.h"

#include <QHelpEvent>
#include <QPainter>
#include <QToolTip>

#include <algorithm>
#include <cmath>

namespace spindle::ui {

namespace {
constexpr int kPadX = 4, kPadY = 2, kGap = 3;

// Length of the valid UTF-8 character at `i` (1..4), or 0 when the bytes there are not one.
size_t utf8_length(const std::string& s, size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) return 1;
  size_t n = 0;
  char32_t min = 0;
  if ((b & 0xE0) == 0xC0) {
    n = 2;
    min = 0x80;
  } else if ((b & 0xF0) == 0xE0) {
    n = 3;
    min = 0x800;
  } else if ((b & 0xF8) == 0xF0) {
    n = 4;
    min = 0x10000;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  char32_t c = b & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    const auto cont = static_cast<unsigned char>(s[i + k]);
    if ((cont & 0xC0) != 0x80) return 0;
    c = (c << 6) | (cont & 0x3F);
  }
  if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
  return n;
}

QString hex_byte(unsigned char b) {
  return QStringLiteral("\\x") + QString::number(b, 16).toUpper().rightJustified(2, QChar('0'));
}
}  // namespace

TokenStrip::TokenStrip(QWidget* parent) : QWidget(parent) {
  setSizePolicy(QSizePolicy::Preferred, QSizePolicy::Preferred);
  setMouseTracking(true);
}

void TokenStrip::setTokens(std::vector<int32_t> tokens, std::vector<float> logprobs,
                           std::vector<std::string> pieces) {
  tokens_ = std::move(tokens);
  logprobs_ = std::move(logprobs);
  pieces_ = std::move(pieces);
  logprobs_.resize(tokens_.size(), 0.0f);
  pieces_.resize(tokens_.size());
  updateGeometry();
  update();
}

int TokenStrip::shadeAlpha(float logprob) {
  const double p = std::isfinite(logprob) ? std::clamp(std::exp(double(logprob)), 0.0, 1.0) : 0.0;
  return int(std::lround(30 + 200 * p));
}

QString TokenStrip::displayPiece(const std::string& piece, bool visible_spaces) {
  QString out;
  size_t i = 0;
  while (i < piece.size()) {
    const auto b = static_cast<unsigned char>(piece[i]);
    const size_t n = utf8_length(piece, i);
    if (n == 0) {
      out += hex_byte(b);
      ++i;
      continue;
    }
    if (b == ' ' && visible_spaces) {
      out += QChar(0x00B7);
    } else if (b == '\n') {
      out += QStringLiteral("\\n");
    } else if (b == '\r') {
      out += QStringLiteral("\\r");
    } else if (b == '\t') {
      out += QStringLiteral("\\t");
    } else if (b < 0x20 || b == 0x7f) {
      out += hex_byte(b);
    } else {
      out += QString::fromUtf8(piece.data() + i, qsizetype(n));
    }
    i += n;
  }
  return out;
}

QString TokenStrip::chipText(int i) const {
  if (i < 0 || i >= tokenCount()) return {};
  const std::string& piece = pieces_[size_t(i)];
  if (piece.empty()) return QStringLiteral("[%1]").arg(tokens_[size_t(i)]);
  return displayPiece(piece, /*visible_spaces=*/true);
}

QString TokenStrip::tokenToolTip(int i) const {
  if (i < 0 || i >= tokenCount()) return {};
  const double lp = logprobs_[size_t(i)];
  // One multi-arg pass: a piece that contains "%3" must not be substituted again.
  return tr("id %1 · '%2' · logprob %3 · p %4")
      .arg(QString::number(tokens_[size_t(i)]),
           displayPiece(pieces_[size_t(i)], /*visible_spaces=*/false), QString::number(lp, 'f', 4),
           QString::number(std::exp(lp), 'f', 4));
}

std::vector<QRect> TokenStrip::layoutChips(int width) const {
  std::vector<QRect> out;
  out.reserve(tokens_.size());
  const QFontMetrics fm(font());
  const int h = fm.height() + 2 * kPadY;
  int x = 0, y = 0;
  for (int i = 0; i < tokenCount(); ++i) {
    const int w = fm.horizontalAdvance(chipText(i)) + 2 * kPadX;
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
    p.drawText(chips[i], Qt::AlignCenter, chipText(int(i)));
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
