#include "spindle/ui/playground_model.h"

#include "spindle/ui/connection.h"

namespace spindle::ui {

using namespace protocol;

SamplingParamsMsg PlaygroundParams::toMsg() const {
  SamplingParamsMsg m;
  m.max_tokens = max_tokens;
  m.temperature = float(temperature);
  m.top_k = top_k;
  m.top_p = float(top_p);
  m.seed = seed;
  for (const QString& s : stop_strings) {
    if (!s.isEmpty()) m.stop_strings.push_back(s.toStdString());
  }
  return m;
}

PlaygroundModel::PlaygroundModel(Connection* connection, QObject* parent)
    : QObject(parent), connection_(connection) {}

void PlaygroundModel::fetchBase() {
  connection_->post(this, Op::capabilities, Empty{}, [this](const Reply& r) {
    if (!r.ok) {
      prompt_error_ = errorText(r);
      emit promptErrorChanged(prompt_error_);
      return;
    }
    const auto& caps = std::get<CapabilitiesReply>(r.body);
    if (caps.bases.empty()) return;
    base_id_ = QString::fromStdString(caps.bases.front().id);
    emit baseChanged(base_id_);
  });
}

int PlaygroundModel::addColumn(const QString& address, const PlaygroundParams& params) {
  if (columnCount() >= kMaxColumns) return -1;
  PlaygroundColumn c;
  c.id = next_id_++;
  c.address = address.trimmed();
  c.params = params;
  columns_.push_back(std::move(c));
  emit columnsChanged();
  return columnCount() - 1;
}

void PlaygroundModel::removeColumn(int index) {
  if (index < 0 || index >= columnCount()) return;
  columns_.erase(columns_.begin() + index);  // its stream's replies no longer find it
  emit columnsChanged();
  updateRunning();
}

void PlaygroundModel::setAddress(int index, const QString& address) {
  if (index < 0 || index >= columnCount()) return;
  columns_[size_t(index)].address = address.trimmed();
}

void PlaygroundModel::setParams(int index, const PlaygroundParams& params) {
  if (index < 0 || index >= columnCount()) return;
  columns_[size_t(index)].params = params;
}

bool PlaygroundModel::running() const { return running_; }

void PlaygroundModel::run() {
  const quint64 generation = ++run_generation_;
  prompt_error_.clear();
  emit promptErrorChanged(prompt_error_);
  if (prompt_.isEmpty()) {
    prompt_error_ = tr("the prompt is empty");
    emit promptErrorChanged(prompt_error_);
    return;
  }
  for (size_t i = 0; i < columns_.size(); ++i) {
    PlaygroundColumn& c = columns_[i];
    c.request = 0;
    c.error.clear();
    c.sequences.clear();
    c.state = c.address.isEmpty() ? PlaygroundColumn::State::idle
                                  : PlaygroundColumn::State::running;
    emit columnChanged(int(i));
  }
  running_ = true;
  emit runningChanged(true);
  TokenizeRequest t;
  t.text = prompt_.toStdString();
  t.add_special_tokens = true;
  connection_->post(this, Op::tokenize, t, [this, generation](const Reply& r) {
    if (generation != run_generation_) return;
    if (!r.ok) {
      prompt_error_ = errorText(r);
      emit promptErrorChanged(prompt_error_);
      for (size_t i = 0; i < columns_.size(); ++i) {
        if (columns_[i].state == PlaygroundColumn::State::running) {
          columns_[i].state = PlaygroundColumn::State::idle;
          emit columnChanged(int(i));
        }
      }
      updateRunning();
      return;
    }
    const auto& reply = std::get<TokenizeReply>(r.body);
    prompt_tokens_ = read_int32(reply.tokens, r.frames, "tokens");
    for (size_t i = 0; i < columns_.size(); ++i) {
      if (columns_[i].state == PlaygroundColumn::State::running) startColumn(i);
    }
    updateRunning();
  });
}

void PlaygroundModel::startColumn(size_t index) {
  PlaygroundColumn& c = columns_[index];
  SampleRequest s;
  Frames frames;
  s.address = c.address.toStdString();
  s.prompt = add_tensor(frames, std::span<const int32_t>(prompt_tokens_));
  s.num_samples = c.params.num_samples;
  s.sampling_params = c.params.toMsg();
  c.sequences.assign(size_t(std::max(1, c.params.num_samples)), PlaygroundSequence{});
  const int id = c.id;
  auto request = std::make_shared<quint64>(0);
  // The handler runs for each message of the stream; `request` tells this stream's messages
  // from those of a stream an earlier run() started for the same column.
  *request = connection_->post(this, Op::sample_stream, s, std::move(frames),
                               [this, id, request](const Reply& r) {
                                 onStreamReply(id, *request, r);
                               });
  c.request = *request;
}

void PlaygroundModel::onStreamReply(int id, quint64 request, const Reply& r) {
  const int index = indexOfColumn(id);
  if (index < 0) return;
  PlaygroundColumn& c = columns_[size_t(index)];
  if (c.request != request) return;
  if (!r.ok) {
    c.state = PlaygroundColumn::State::failed;
    c.error = errorText(r);
    c.request = 0;
    emit columnChanged(index);
    updateRunning();
    return;
  }
  const auto& m = std::get<SampleStreamReply>(r.body);
  c.revision_id = QString::fromStdString(m.revision_id);
  for (const SampleDeltaMsg& d : m.deltas) {
    if (d.sequence >= c.sequences.size()) c.sequences.resize(d.sequence + 1);
    PlaygroundSequence& seq = c.sequences[d.sequence];
    const auto tokens = read_int32(d.tokens, r.frames, "deltas.tokens");
    const auto logprobs = read_float32(d.logprobs, r.frames, "deltas.logprobs");
    seq.tokens.insert(seq.tokens.end(), tokens.begin(), tokens.end());
    seq.logprobs.insert(seq.logprobs.end(), logprobs.begin(), logprobs.end());
    seq.pieces.insert(seq.pieces.end(), d.pieces.begin(), d.pieces.end());
    seq.pieces.resize(seq.tokens.size());  // the server sends one per token; stay aligned
    std::string text;
    for (const std::string& piece : seq.pieces) text += piece;
    seq.text = QString::fromStdString(text);
    ++seq.messages;
  }
  if (m.final) {
    // The final message is authoritative: exactly `sample`'s sequences.
    c.sequences.resize(std::max(c.sequences.size(), m.sequences.size()));
    for (size_t i = 0; i < m.sequences.size(); ++i) {
      const SequenceMsg& s = m.sequences[i];
      PlaygroundSequence& seq = c.sequences[i];
      seq.tokens = read_int32(s.tokens, r.frames, "sequences.tokens");
      seq.logprobs = read_float32(s.logprobs, r.frames, "sequences.logprobs");
      seq.pieces.resize(seq.tokens.size());  // the streamed ones (the final carries none)
      seq.text = QString::fromStdString(s.text);
      seq.stop_reason = QString::fromStdString(s.stop_reason);
      seq.final = true;
    }
    c.state = PlaygroundColumn::State::done;
    c.request = 0;
  }
  emit columnChanged(index);
  if (m.final) updateRunning();
}

int PlaygroundModel::indexOfColumn(int id) const {
  for (size_t i = 0; i < columns_.size(); ++i) {
    if (columns_[i].id == id) return int(i);
  }
  return -1;
}

void PlaygroundModel::updateRunning() {
  bool any = false;
  for (const PlaygroundColumn& c : columns_) any = any || c.state == PlaygroundColumn::State::running;
  if (any == running_) return;
  running_ = any;
  emit runningChanged(running_);
}

void PlaygroundModel::requestCompletions(const QString& text) {
  const quint64 generation = ++completion_generation_;
  const QString needle = text.trimmed();
  if (needle.isEmpty()) return;
  // The search wants words, not an address: search for the policy name part.
  QString words = needle;
  if (words.startsWith("spindle://")) words = words.mid(10).section('/', 1).section('@', 0, 0);
  if (words.isEmpty()) words = needle;
  CatalogSearchRequest req;
  req.text = words.toStdString();
  req.limit = 12;
  connection_->post(this, Op::catalog_search, req, [this, generation, needle](const Reply& r) {
    if (generation != completion_generation_) return;
    QStringList out;
    if (!base_id_.isEmpty() && base_id_.startsWith(needle, Qt::CaseInsensitive)) out << base_id_;
    if (r.ok) {
      for (const PolicyInfo& p : std::get<PolicyListReply>(r.body).policies) {
        out << QString::fromStdString(p.address) + "@latest";
      }
    }
    emit completions(needle, out);
  });
}

}  // namespace spindle::ui
