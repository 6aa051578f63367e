#include "tokenizer_ops.h"

#include <algorithm>

#include "spindle/core/error.h"

namespace spindle::service {

using namespace protocol;

namespace {

const ServedBase& tokenizer_base(const Daemon& d, const std::string& base_model) {
  const ServedBase& b = d.base(base_model);
  if (!b.tokenizer) {
    SPINDLE_THROW(failed_precondition, "the base '{}' has no tokenizer", b.id);
  }
  return b;
}

}  // namespace

TokenizeReply tokenize(const Daemon& d, const TokenizeRequest& req, Frames& frames) {
  const ServedBase& b = tokenizer_base(d, req.base_model);
  engine::EncodeOptions eo;
  eo.add_special_tokens = req.add_special_tokens;
  const std::vector<int32_t> ids = b.tokenizer->encode(req.text, eo);
  return {b.id, add_tensor(frames, std::span<const int32_t>(ids))};
}

DetokenizeReply detokenize(const Daemon& d, const DetokenizeRequest& req, const Frames& frames) {
  const ServedBase& b = tokenizer_base(d, req.base_model);
  std::vector<int32_t> ids = read_int32(req.tokens, frames, "tokens");
  const int32_t vocab = b.tokenizer->vocab_size();
  for (size_t i = 0; i < ids.size(); ++i) {
    SPINDLE_CHECK(ids[i] >= 0 && ids[i] < vocab, invalid_argument,
                  "tokens[{}]: id {} outside the vocabulary [0, {}) of base '{}'", i, ids[i], vocab,
                  b.id);
  }
  // Special tokens as their written form ("<s>", as Hugging Face renders them; llama2.c's piece
  // for BOS is "\n<s>\n"), or dropped with skip_special_tokens; each run between them decoded
  // after the token before it (llama2.c drops the leading space of the piece after BOS, as its
  // decode of the whole would).
  const std::vector<engine::SpecialToken> specials = b.tokenizer->special_tokens();
  auto special = [&](int32_t id) -> const engine::SpecialToken* {
    for (const auto& s : specials)
      if (s.id == id) return &s;
    return nullptr;
  };
  std::string text;
  int32_t prev = -1;
  for (size_t i = 0; i < ids.size();) {
    if (const engine::SpecialToken* s = special(ids[i])) {
      if (!req.skip_special_tokens) text += s->text;
      prev = ids[i++];
      continue;
    }
    size_t j = i;
    while (j < ids.size() && !special(ids[j])) ++j;
    text += b.tokenizer->decode(std::span<const int32_t>(ids.data() + i, j - i), prev);
    prev = ids[j - 1];
    i = j;
  }
  return {b.id, text};
}

TokenizerInfoReply tokenizer_info(const Daemon& d, const TokenizerInfoRequest& req) {
  const ServedBase& b = tokenizer_base(d, req.base_model);
  const engine::Tokenizer& t = *b.tokenizer;
  TokenizerInfoReply out;
  out.base_model = b.id;
  out.kind = t.kind();
  out.vocab_size = t.vocab_size();
  for (const engine::SpecialToken& s : t.special_tokens()) out.special_tokens.push_back({s.id, s.text});
  auto text_of = [&](std::optional<int32_t> id) -> std::string {
    if (!id) return "";
    for (const auto& s : out.special_tokens)
      if (s.id == *id) return s.text;
    return t.decode(std::span<const int32_t>(&*id, 1));
  };
  out.bos_token = t.bos_id().value_or(-1);
  out.eos_token = t.eos_id().value_or(-1);
  out.pad_token = b.pad_token.value_or(-1);
  out.bos_text = text_of(t.bos_id());
  out.eos_text = text_of(t.eos_id());
  out.pad_text = text_of(b.pad_token);
  out.chat_template = b.chat_template;
  out.add_bos_token = b.add_bos_token;
  return out;
}

}  // namespace spindle::service
