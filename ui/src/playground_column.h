#pragma once
// One Playground column (private to playground_view.cpp): the address (with catalog completion),
// the sampling parameters, the state line (errors inline, the server's code and message), a
// "sample i / N" browser, the sequence's decoded text and its token strip. It binds to the
// PlaygroundModel column with id `column_id`: edits go to the model, columnChanged repaints.

#include <QWidget>

class QCompleter;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QTextEdit;
class QSpinBox;
class QStringListModel;
class QToolButton;

namespace spindle::ui {

class PlaygroundModel;
class TokenStrip;

class PlaygroundColumnWidget : public QWidget {
  Q_OBJECT
 public:
  PlaygroundColumnWidget(PlaygroundModel* model, int column_id, QWidget* parent = nullptr);
  int columnId() const { return id_; }
  void refresh();  // from the model

  // For tests and screenshots.
  TokenStrip* tokenStrip() const { return strip_; }
  QString shownText() const;  // the completion shown (without the prompt prefix)
  int shownSample() const;  // 0-based
  void showSample(int index);

 protected:
  void changeEvent(QEvent* event) override;

 private:
  void pushParams();
  void showText(const QString& text);
  int index() const;

  PlaygroundModel* model_;
  int id_;
  QLineEdit* address_ = nullptr;
  QCompleter* completer_ = nullptr;
  QStringListModel* completions_ = nullptr;
  QSpinBox* max_tokens_ = nullptr;
  QDoubleSpinBox* temperature_ = nullptr;
  QSpinBox* top_k_ = nullptr;
  QDoubleSpinBox* top_p_ = nullptr;
  QSpinBox* seed_ = nullptr;
  QSpinBox* samples_ = nullptr;
  QLineEdit* stops_ = nullptr;
  QToolButton* remove_ = nullptr;
  QLabel* state_ = nullptr;
  QSpinBox* browse_ = nullptr;
  QTextEdit* text_ = nullptr;
  QString shown_text_, shown_prompt_;
  TokenStrip* strip_ = nullptr;
};

}  // namespace spindle::ui
