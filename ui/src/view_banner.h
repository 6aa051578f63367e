#pragma once
// A one-line banner above a view's content (the Catalog and Policy views): the inline place
// for a reply's error ("code: message") and for notices with one action button ("Undo").
// Never modal. Colours come from the palette (a coloured left edge marks errors), so it reads
// in the dark and the light theme.

#include <QFrame>

#include <functional>

class QLabel;
class QPushButton;

namespace spindle::ui {

class ViewBanner : public QFrame {
  Q_OBJECT
 public:
  explicit ViewBanner(QWidget* parent = nullptr);

  void showError(const QString& code, const QString& message);
  // A notice; with a non-empty `button`, one button that runs `action` (then hides).
  void showNotice(const QString& text, const QString& button = {},
                  std::function<void()> action = {});
  void clear();  // hides
  QString text() const;
  bool isError() const { return error_; }

 private:
  void style(bool error);

  QLabel* label_;
  QPushButton* button_;
  QPushButton* close_;
  std::function<void()> action_;
  bool error_ = false;
};

}  // namespace spindle::ui
