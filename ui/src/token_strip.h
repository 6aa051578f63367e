#pragma once
// A flow of token chips for one sequence: each chip shows the token's text piece (whitespace
// made visible: '·' for a space, \n, \t; bytes of a character split across tokens as \xNN; a
// token with no text, such as a stop token, as its id in brackets), its background is the
// palette's highlight colour with alpha from exp(logprob) (likely tokens dark, surprising ones
// faint), and hovering shows "id N · 'piece' · logprob X · p Y".
//
// The widget lays chips out left to right, wrapping at its width (heightForWidth), and only
// paints: no state but the tokens it was given.

#include <QWidget>

#include <cstdint>
#include <string>
#include <vector>

namespace spindle::ui {

class TokenStrip : public QWidget {
  Q_OBJECT
 public:
  explicit TokenStrip(QWidget* parent = nullptr);
  // `pieces` are raw bytes, one per token (missing ones count as "").
  void setTokens(std::vector<int32_t> tokens, std::vector<float> logprobs,
                 std::vector<std::string> pieces);
  int tokenCount() const { return int(tokens_.size()); }
  // The chip text and tooltip text of chip `i` (tests read them).
  QString chipText(int i) const;
  QString tokenToolTip(int i) const;
  // Alpha (0..255) of the chip background for a logprob.
  static int shadeAlpha(float logprob);
  // A piece as text: valid UTF-8 decoded, other bytes as \xNN, \n \r \t escaped; with
  // `visible_spaces` a space shows as '·'.
  static QString displayPiece(const std::string& piece, bool visible_spaces);

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
  std::vector<std::string> pieces_;
};

}  // namespace spindle::ui
