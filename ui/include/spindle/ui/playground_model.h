#pragma once
// The Playground's state (issue 14, view 3): one prompt and 2..4 columns, each an address (a
// policy address spindle://tenant/policy[@rev|@latest], or the bare base id) with its own
// sampling parameters. run() tokenizes the prompt once on the server (`tokenize`,
// add_special_tokens true, so BOS is added exactly as `spindle sample` does) and then starts one
// `sample_stream` per column, all at once; tokens arrive per engine step and are appended to
// their sequence as they come, and the final message replaces every sequence with exactly what
// `sample` would have returned (tokens, logprobs, text, stop_reason).
//
// Token text: every stream delta carries each token's text piece (SampleDeltaMsg::pieces, as
// the base's tokenizer renders the token after the one before it), kept per token in
// PlaygroundSequence::pieces as raw bytes; the final message carries none, so the streamed
// pieces stay. While streaming, `text` is the pieces so far decoded as one UTF-8 string (a
// character split across tokens joins up); the final message replaces it with the server's
// text, which equals the concatenated pieces except that a stop string cuts it (a stop token's
// piece is "").
//
// Threading: GUI thread only. Replies arrive through Connection (queued); a reply of an older
// run (run() again, a column removed) is ignored, matched by the column's request number.

#include <QObject>
#include <QString>
#include <QStringList>

#include <cstdint>
#include <string>
#include <vector>

#include "spindle/protocol/wire.h"

namespace spindle::ui {

class Connection;

struct PlaygroundParams {
  int max_tokens = 32;      // 1..max_sample_tokens
  double temperature = 1.0;  // 0 = greedy
  int top_k = 0;            // 0 = off
  double top_p = 1.0;
  quint64 seed = 0;
  int num_samples = 1;      // sequences per column, browsable
  QStringList stop_strings;
  protocol::SamplingParamsMsg toMsg() const;
};

struct PlaygroundSequence {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;      // raw log-softmax of each sampled token
  std::vector<std::string> pieces;  // each token's text, raw bytes (may split a character)
  QString text;                     // the pieces so far while streaming; the server's once final
  QString stop_reason;          // "stop" | "length" once final
  bool final = false;
  int messages = 0;             // stream messages that carried tokens of this sequence
};

struct PlaygroundColumn {
  enum class State { idle, running, done, failed };
  int id = 0;  // stable across removals of other columns
  QString address;
  PlaygroundParams params;
  State state = State::idle;
  QString error;        // "code: message" of the server's error reply (state failed)
  QString revision_id;  // what served the stream ("" = base)
  std::vector<PlaygroundSequence> sequences;
  quint64 request = 0;  // Connection's number of the stream in flight (0 = none)
};

class PlaygroundModel : public QObject {
  Q_OBJECT
 public:
  static constexpr int kMaxColumns = 4;
  static constexpr int kMinColumns = 2;

  explicit PlaygroundModel(Connection* connection, QObject* parent = nullptr);

  // Asks `capabilities` for the served base id (baseChanged when it arrives).
  void fetchBase();
  QString baseId() const { return base_id_; }

  QString prompt() const { return prompt_; }
  void setPrompt(const QString& prompt) { prompt_ = prompt; }

  int columnCount() const { return int(columns_.size()); }
  const PlaygroundColumn& column(int index) const { return columns_.at(size_t(index)); }
  int indexOfColumn(int id) const;  // -1 when no column has this id
  // Returns the new column's index, or -1 when kMaxColumns are open.
  int addColumn(const QString& address, const PlaygroundParams& params = {});
  void removeColumn(int index);
  void setAddress(int index, const QString& address);
  void setParams(int index, const PlaygroundParams& params);

  // Starts every column with a non-empty address; a running column is restarted.
  void run();
  bool running() const;
  QString promptError() const { return prompt_error_; }
  std::vector<int32_t> promptTokens() const { return prompt_tokens_; }

  // Address completion: catalog_search for `text` (latest call wins); completions() lists
  // matching policy addresses (with @latest) and the base id when it starts with `text`.
  void requestCompletions(const QString& text);

 signals:
  void baseChanged(QString base_id);
  void columnsChanged();           // a column added or removed
  void columnChanged(int index);   // state, tokens or text of one column
  void runningChanged(bool running);
  void promptErrorChanged(QString error);
  void completions(QString text, QStringList addresses);

 private:
  void startColumn(size_t index);
  void onStreamReply(int id, quint64 request, const protocol::Reply& reply);
  void updateRunning();

  Connection* connection_;
  QString base_id_;
  QString prompt_;
  QString prompt_error_;
  std::vector<int32_t> prompt_tokens_;
  std::vector<PlaygroundColumn> columns_;
  int next_id_ = 1;
  quint64 run_generation_ = 0;
  quint64 completion_generation_ = 0;
  bool running_ = false;
};

}  // namespace spindle::ui
