#pragma once
// A flow of token chips for one sequence: each chip shows the token id, its background is the
// palette's highlight colour with alpha from exp(logprob) (likely tokens dark, surprising ones
// faint), and hovering shows a tooltip with id, logprob and probability. The protocol sends no
// per-token text (playground_model.h), so the chip text is the id; the sequence's decoded text
// is shown next to the strip by the column once it arrives.
//
// The widget lays chips out left to right, wrapping at its width (heightForWidth), and only
// paints: no state but the tokens it was given.

#include <QWidget>

#include <cstdint>
#include <vector>

namespace spindle::ui {

class TokenStrip : public QWidget {
  Q_OBJECT
 public:
  explicit TokenStrip(QWidget* parent = nullptr);
  void setTokens(std::vector<int32_t> tokens, std::vector<float> logprobs);
  int tokenCount() const { return int(tokens_.size()); }
  // The tooltip text of chip `i` (tests read it).
  QString tokenToolTip(int i) const;
  // Alpha (0..255) of the chip background for a logprob.
  static int shadeAlpha(float logprob);

  bool hasHeightForWidth() const override { return true; }
  int heightForWidth(int width) const override;
  QSize sizeHint() const override;

 protected:
  void paintEvent(QPaintEvent* event) override;
  bool event(QEvent* event) override;

 private:
  std::vector<QRect> layoutChips(int width) const;
  std::vector<int32_t> tokens_;
  std::vector<float> logprobs_;
};

}  // namespace spindle::ui
