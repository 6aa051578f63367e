#include "view_banner.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>

namespace spindle::ui {

ViewBanner::ViewBanner(QWidget* parent) : QFrame(parent) {
  setObjectName("viewBanner");
  auto* row = new QHBoxLayout(this);
  row->setContentsMargins(10, 4, 4, 4);
  label_ = new QLabel(this);
  label_->setObjectName("bannerText");
  label_->setWordWrap(true);
  label_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  button_ = new QPushButton(this);
  button_->setObjectName("bannerAction");
  close_ = new QPushButton(QStringLiteral("\u00d7"), this);
  close_->setObjectName("bannerClose");
  close_->setFlat(true);
  close_->setToolTip(tr("Dismiss"));
  close_->setFixedWidth(28);
  row->addWidget(label_, 1);
  row->addWidget(button_);
  row->addWidget(close_);
  connect(close_, &QPushButton::clicked, this, &ViewBanner::clear);
  connect(button_, &QPushButton::clicked, this, [this] {
    auto action = std::move(action_);
    clear();
    if (action) action();
  });
  hide();
}

void ViewBanner::style(bool error) {
  error_ = error;
  const QPalette p = palette();
  // Errors: a red edge (the same hue reads on dark and light bases); notices: the highlight.
  const QColor edge = error ? QColor(0xd0, 0x43, 0x3a) : p.color(QPalette::Highlight);
  setStyleSheet(QStringLiteral("QFrame#viewBanner { background: %1; border-left: 4px solid %2; }"
                               "QLabel#bannerText { color: %3; }")
                    .arg(p.color(QPalette::AlternateBase).name(), edge.name(),
                         p.color(QPalette::WindowText).name()));
}

void ViewBanner::showError(const QString& code, const QString& message) {
  style(/*error=*/true);
  label_->setText(QStringLiteral("<b>%1</b>: %2").arg(code.toHtmlEscaped(), message.toHtmlEscaped()));
  button_->hide();
  action_ = {};
  show();
}

void ViewBanner::showNotice(const QString& text, const QString& button,
                            std::function<void()> action) {
  style(/*error=*/false);
  label_->setText(text.toHtmlEscaped());
  button_->setText(button);
  button_->setVisible(!button.isEmpty());
  action_ = std::move(action);
  show();
}

void ViewBanner::clear() {
  action_ = {};
  label_->clear();
  hide();
}

QString ViewBanner::text() const { return label_->text(); }

}  // namespace spindle::ui
