#include "spindle/ui/theme.h"

#include <QApplication>
#include <QPalette>
#include <QStyle>
#include <QStyleFactory>

namespace spindle::ui {

namespace {
bool g_dark = true;
}

void apply_theme(bool dark) {
  g_dark = dark;
  QApplication::setStyle(QStyleFactory::create("Fusion"));
  if (!dark) {
    QApplication::setPalette(QApplication::style()->standardPalette());
    return;
  }
  QApplication::setPalette(dark_palette());
}

QPalette dark_palette() {
  QPalette p;
  const QColor window(37, 39, 43), base(27, 29, 32), text(222, 224, 228), mid(60, 63, 68);
  const QColor accent(64, 132, 214);
  p.setColor(QPalette::Window, window);
  p.setColor(QPalette::WindowText, text);
  p.setColor(QPalette::Base, base);
  p.setColor(QPalette::AlternateBase, QColor(33, 35, 39));
  p.setColor(QPalette::ToolTipBase, QColor(50, 52, 57));
  p.setColor(QPalette::ToolTipText, text);
  p.setColor(QPalette::PlaceholderText, QColor(130, 134, 140));
  p.setColor(QPalette::Text, text);
  p.setColor(QPalette::Button, QColor(48, 50, 55));
  p.setColor(QPalette::ButtonText, text);
  p.setColor(QPalette::BrightText, QColor(255, 90, 90));
  p.setColor(QPalette::Light, QColor(70, 73, 78));
  p.setColor(QPalette::Midlight, mid);
  p.setColor(QPalette::Mid, QColor(45, 47, 52));
  p.setColor(QPalette::Dark, QColor(20, 21, 24));
  p.setColor(QPalette::Shadow, QColor(10, 10, 12));
  p.setColor(QPalette::Highlight, accent);
  p.setColor(QPalette::HighlightedText, QColor(255, 255, 255));
  p.setColor(QPalette::Link, QColor(110, 170, 240));
  p.setColor(QPalette::Disabled, QPalette::Text, QColor(120, 123, 128));
  p.setColor(QPalette::Disabled, QPalette::WindowText, QColor(120, 123, 128));
  p.setColor(QPalette::Disabled, QPalette::ButtonText, QColor(120, 123, 128));
  return p;
}

bool theme_is_dark() { return g_dark; }

}  // namespace spindle::ui
