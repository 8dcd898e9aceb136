#include "tokenizer/vocab.h"

#include <array>
#include <cctype>
#include <initializer_list>
#include <string>
#include <vector>

namespace ts::tokenizer::internal {
namespace {

// Token texts llama.cpp treats as end of generation (and promotes to control).
constexpr std::array<std::string_view, 22> kEogTexts = {
    "<|eot_id|>",      "<|im_end|>",         "<|end|>",     "<|return|>",
    "<|call|>",        "<|flush|>",          "<|calls|>",   "<end_of_turn>",
    "<|endoftext|>",   "</s>",               "<|eom_id|>",  "<EOT>",
    "_<EOT>",          "[EOT]",              "[EOS]",       "<|end_of_text|>",
    "<end_of_utterance>", "<eos>",           "<turn|>",     "<|tool_response>",
    "<｜end▁of▁sentence｜>",  // DeepSeek
    "[e~[",
};

// Texts llama.cpp picks the EOT token from when the GGUF names none (promoted to control).
constexpr std::array<std::string_view, 11> kEotTexts = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "_<EOT>", "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
};

// Fill-in-the-middle token texts, per kind (each kind found by text only when its GGUF key is
// absent); llama.cpp promotes the one it picks to control, and pad/rep/sep also end generation.
struct FimKind {
  std::string_view key;  // tokenizer.ggml.<key>
  std::vector<std::string_view> texts;
  bool eog;
};
const std::vector<FimKind>& fim_kinds() {
  static const std::vector<FimKind> kinds = {
      {"fim_pre_token_id",
       {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
        "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
        "<|code_prefix|>", "<|prefix|>"},
       false},
      {"fim_suf_token_id",
       {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
        "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
        "<|code_suffix|>", "<|suffix|>"},
       false},
      {"fim_mid_token_id",
       {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
        "<｜fim▁end｜>", "<MID>", "▁<MID>",
        "<|code_middle|>", "<|middle|>"},
       false},
      {"fim_pad_token_id", {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}, true},
      {"fim_rep_token_id",
       {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"},
       true},
      {"fim_sep_token_id", {"<|file_sep|>"}, true},
  };
  return kinds;
}

int32_t read_id(const gguf::GgufFile& f, std::string_view key, int32_t n_vocab,
                int32_t fallback) {
  auto v = f.get_int(key);
  if (!v) return fallback;
  if (*v < 0 || *v >= n_vocab) return -1;  // e.g. 0xFFFFFFFF written for "none"
  return static_cast<int32_t>(*v);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool contains_any(std::string_view s, std::initializer_list<std::string_view> needles) {
  for (std::string_view n : needles) {
    if (s.find(n) != std::string_view::npos) return true;
  }
  return false;
}

// llama.cpp's per-model token attributes that change how special tokens are matched.
void set_strip_attributes(const gguf::GgufFile& f, Vocab* v) {
  v->strip.assign(v->pieces.size(), 0);
  auto set = [&](std::string_view text, uint8_t flag, bool on) {
    if (auto id = v->find(text)) {
      uint8_t& s = v->strip[static_cast<size_t>(*id)];
      s = on ? (s | flag) : (s & ~flag);
    }
  };
  const std::string name = lower(f.get_string("general.name").value_or(""));
  const std::string arch = f.get_string("general.architecture").value_or("");
  if (contains_any(v->pre, {"jina-v2-de", "jina-v2-es", "jina-v2-code"}) ||
      contains_any(arch, {"nomic-bert-moe", "jina-bert-v3"})) {
    set("<mask>", Vocab::kLstrip, true);
  } else if (contains_any(name, {"phi-3", "phi3"})) {
    for (size_t id = 0; id < v->pieces.size(); ++id) {
      const TokenType t = v->types[id];
      if (t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown) {
        v->strip[id] |= Vocab::kRstrip;
      }
    }
    set("</s>", Vocab::kRstrip, true);
    for (std::string_view t : {"<unk>", "<s>", "<|endoftext|>"}) set(t, Vocab::kRstrip, false);
  }
}

}  // namespace

Status load_vocab(const gguf::GgufFile& f, bool default_add_bos, bool default_space_prefix,
                  Vocab* v) {
  const std::vector<std::string>* tokens = f.get_string_array("tokenizer.ggml.tokens");
  if (tokens == nullptr || tokens->empty()) {
    return data_loss("GGUF has no tokenizer.ggml.tokens array");
  }
  if (tokens->size() > static_cast<size_t>(INT32_MAX)) {
    return data_loss("tokenizer.ggml.tokens is too large");
  }
  const size_t n = tokens->size();
  v->pieces = *tokens;

  v->scores.assign(n, 0.0f);
  if (const auto* scores = f.get_float_array("tokenizer.ggml.scores")) {
    if (scores->size() != n) {
      return data_loss("tokenizer.ggml.scores has " + std::to_string(scores->size()) +
                       " entries, tokens has " + std::to_string(n));
    }
    for (size_t i = 0; i < n; ++i) v->scores[i] = static_cast<float>((*scores)[i]);
  }

  v->types.assign(n, TokenType::kNormal);
  if (const auto* types = f.get_int_array("tokenizer.ggml.token_type")) {
    if (types->size() != n) {
      return data_loss("tokenizer.ggml.token_type has " + std::to_string(types->size()) +
                       " entries, tokens has " + std::to_string(n));
    }
    for (size_t i = 0; i < n; ++i) {
      int64_t t = (*types)[i];
      v->types[i] = (t >= 0 && t <= 6) ? static_cast<TokenType>(t) : TokenType::kUndefined;
    }
  }

  v->piece_to_id = PieceIndex();
  v->piece_to_id.reserve(n);
  for (size_t i = 0; i < n; ++i) v->piece_to_id.add(v->pieces[i]);

  const int32_t nv = static_cast<int32_t>(n);
  const bool spm = v->model == "llama";
  const bool wpm = v->model == "bert";
  auto fallback = [&](int32_t id) { return id < nv ? id : -1; };
  if (wpm) {
    // llama.cpp's BERT defaults: [CLS] 101 starts the text, [SEP] 102 ends it, [UNK] 100.
    v->bos = read_id(f, "tokenizer.ggml.bos_token_id", nv,
                     read_id(f, "tokenizer.ggml.cls_token_id", nv, fallback(101)));
    v->sep = read_id(f, "tokenizer.ggml.seperator_token_id", nv, fallback(102));
    v->add_sep = true;
  } else {
    v->bos = read_id(f, "tokenizer.ggml.bos_token_id", nv, spm ? fallback(1) : -1);
  }
  v->eos = read_id(f, "tokenizer.ggml.eos_token_id", nv, spm ? fallback(2) : -1);
  v->unk = read_id(f, "tokenizer.ggml.unknown_token_id", nv,
                   spm ? fallback(0) : (wpm ? fallback(100) : -1));
  v->eot = read_id(f, "tokenizer.ggml.eot_token_id", nv, -1);
  v->eom = read_id(f, "tokenizer.ggml.eom_token_id", nv, -1);

  v->add_bos = f.get_bool("tokenizer.ggml.add_bos_token").value_or(default_add_bos);
  v->add_eos = f.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  v->add_space_prefix =
      f.get_bool("tokenizer.ggml.add_space_prefix").value_or(default_space_prefix);

  // End of generation and control promotion, as llama.cpp's vocabulary loader does it (same
  // order: EOT/FIM by text, the EOG text list, the eos/eot/eom ids, then two workarounds).
  // A promoted token becomes kControl, so it is plain text unless parse_special is on.
  v->eog.assign(n, 0);
  auto promote = [&](int32_t id) { v->types[static_cast<size_t>(id)] = TokenType::kControl; };
  if (v->eot < 0) {
    for (std::string_view text : kEotTexts) {
      if (auto id = v->find(text)) {
        v->eot = *id;
        promote(*id);
        break;
      }
    }
  }
  for (const FimKind& k : fim_kinds()) {
    int32_t id = read_id(f, "tokenizer.ggml." + std::string(k.key), nv, -1);
    if (id < 0) {  // absent, or out of range (llama.cpp then falls back to the text too)
      for (std::string_view text : k.texts) {
        if (auto found = v->find(text)) {
          id = *found;
          promote(id);
          break;
        }
      }
    }
    if (id >= 0 && k.eog) v->eog[static_cast<size_t>(id)] = 1;
  }
  for (std::string_view text : kEogTexts) {
    if (auto id = v->find(text)) {
      v->eog[static_cast<size_t>(*id)] = 1;
      promote(*id);
    }
  }
  for (int32_t id : {v->eos, v->eot, v->eom}) {
    if (id >= 0) v->eog[static_cast<size_t>(id)] = 1;
  }
  auto eog_id = [&](std::string_view text) -> int32_t {
    auto id = v->find(text);
    return id && v->eog[static_cast<size_t>(*id)] ? *id : -1;
  };
  // Harmony-style vocabularies (gpt-oss, solar-open): "<|end|>" separates messages, it does not
  // end generation, and it is matched as a user-defined token.
  const int32_t end_id = eog_id("<|end|>");
  const bool has_call = eog_id("<|call|>") >= 0 || eog_id("<|calls|>") >= 0;
  if (end_id >= 0 && has_call && (eog_id("<|return|>") >= 0 || eog_id("<|flush|>") >= 0)) {
    v->eog[static_cast<size_t>(end_id)] = 0;
    v->types[static_cast<size_t>(end_id)] = TokenType::kUserDefined;
  }
  // Gemma 4: "</s>" is ordinary text next to "<|tool_response>".
  const int32_t s_id = eog_id("</s>");
  if (s_id >= 0 && eog_id("<|tool_response>") >= 0) {
    v->eog[static_cast<size_t>(s_id)] = 0;
    v->types[static_cast<size_t>(s_id)] = TokenType::kNormal;
  }
  set_strip_attributes(f, v);
  return ok_status();
}

}  // namespace ts::tokenizer::internal
