#include "tokenizer/tokenizer.h"

#include "tokenizer/bpe.h"
#include "tokenizer/special.h"
#include "tokenizer/spm.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"
#include "tokenizer/wpm.h"

namespace ts::tokenizer {

using internal::TokenType;

struct Tokenizer::Impl {
  internal::Vocab vocab;
  std::unique_ptr<internal::SpecialSplitter> special;
  std::unique_ptr<internal::SpmModel> spm;  // model "llama"
  std::unique_ptr<internal::BpeModel> bpe;  // models "gpt2" and "gemma4"
  std::unique_ptr<internal::WpmModel> wpm;  // model "bert"
  std::vector<std::string> bytes;           // [n_vocab] token_bytes, precomputed
  std::string pre_canonical;
  bool spm_style = false;                   // SentencePiece-style BPE (gemma4)
};

namespace {

// `hex_bytes`: byte tokens are <0xNN> (SentencePiece, SentencePiece-style BPE); `escaped`: '▁'
// stands for ' ' (SentencePiece, SentencePiece-style BPE, WordPiece).
std::string render_token(const internal::Vocab& v, bool hex_bytes, bool escaped, int32_t id) {
  const std::string& text = v.pieces[static_cast<size_t>(id)];
  switch (v.type(id)) {
    case TokenType::kControl:
    case TokenType::kUserDefined:
    case TokenType::kUnknown:
      return text;
    case TokenType::kUnused:
      return "";
    case TokenType::kByte:
      if (hex_bytes && text.size() == 6 && text.starts_with("<0x") && text.back() == '>') {
        return std::string(1, static_cast<char>(std::stoi(text.substr(3, 2), nullptr, 16)));
      }
      return text;
    case TokenType::kNormal:
    case TokenType::kUndefined:
      break;
  }
  if (escaped) {
    std::string out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size(); ++i) {
      if (text.compare(i, 3, "\xE2\x96\x81") == 0) {
        out.push_back(' ');
        i += 2;
      } else {
        out.push_back(text[i]);
      }
    }
    return out;
  }
  return internal::byte_level_to_bytes(text);
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const gguf::GgufFile& f) {
  auto impl = std::make_unique<Impl>();
  internal::Vocab& v = impl->vocab;
  auto model = f.get_string("tokenizer.ggml.model");
  if (!model) return data_loss("GGUF has no tokenizer.ggml.model");
  v.model = *model;
  v.pre = f.get_string("tokenizer.ggml.pre").value_or("default");

  if (v.model == "llama") {
    TS_RETURN_IF_ERROR(internal::load_vocab(f, /*default_add_bos=*/true,
                                            /*default_space_prefix=*/true, &v));
    impl->spm = std::make_unique<internal::SpmModel>(v);
    impl->pre_canonical = "default";
  } else if (v.model == "gpt2" || v.model == "gemma4") {
    // llama.cpp ignores the file's pre-tokenizer name for gemma4 vocabularies.
    if (v.model == "gemma4") v.pre = "gemma4";
    TS_ASSIGN_OR_RETURN(internal::PreConfig pre, internal::pre_config(v.pre));
    TS_RETURN_IF_ERROR(internal::load_vocab(f, pre.add_bos, /*default_space_prefix=*/false, &v));
    if (pre.spm_style) v.add_bos = true;  // llama.cpp overrides a false add_bos_token here
    const std::vector<std::string>* merges = f.get_string_array("tokenizer.ggml.merges");
    if (merges == nullptr) return data_loss(v.model + " tokenizer without tokenizer.ggml.merges");
    TS_ASSIGN_OR_RETURN(impl->bpe, internal::BpeModel::create(v, *merges, pre));
    impl->pre_canonical = pre.canonical;
    impl->spm_style = pre.spm_style;
  } else if (v.model == "bert") {
    TS_RETURN_IF_ERROR(internal::load_vocab(f, /*default_add_bos=*/true,
                                            /*default_space_prefix=*/true, &v));
    impl->wpm = std::make_unique<internal::WpmModel>(v);
    impl->pre_canonical = "bert";
  } else {
    return unimplemented("unsupported tokenizer.ggml.model \"" + v.model +
                         "\" (supported: llama (SentencePiece), gpt2 (byte-level BPE), "
                         "gemma4 (SentencePiece-style BPE), bert (WordPiece))");
  }
  impl->special = std::make_unique<internal::SpecialSplitter>(v);
  impl->bytes.reserve(v.pieces.size());
  for (int32_t id = 0; id < v.size(); ++id) {
    const bool spm_like = impl->spm != nullptr || impl->spm_style;
    impl->bytes.push_back(render_token(v, spm_like, spm_like || impl->wpm != nullptr, id));
  }
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  const internal::Vocab& v = impl_->vocab;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_special && v.add_bos && v.bos >= 0) out.push_back(v.bos);

  std::vector<internal::Fragment> frags;
  impl_->special->split(text, parse_special, &frags);
  bool prev_special = true;  // SentencePiece: a fragment at the start gets the space prefix
  for (const internal::Fragment& fr : frags) {
    if (fr.token >= 0) {
      out.push_back(fr.token);
      prev_special = true;
      continue;
    }
    std::string_view raw = text.substr(fr.offset, fr.length);
    if (impl_->spm) {
      std::string s;
      if (v.add_space_prefix && prev_special) s.push_back(' ');
      s.append(raw);
      impl_->spm->encode(internal::escape_whitespace(s), &out);
    } else if (impl_->bpe) {
      impl_->bpe->encode(raw, &out);
    } else {
      impl_->wpm->encode(raw, &out);
    }
    prev_special = false;
  }
  if (add_special && v.add_eos && v.eos >= 0) out.push_back(v.eos);
  if (add_special && v.add_sep && v.sep >= 0) out.push_back(v.sep);
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  const internal::Vocab& v = impl_->vocab;
  std::string out;
  size_t num_valid = 0;  // invalid ids are skipped as if absent
  bool first_is_bos = false;
  for (const int32_t id : ids) {
    if (!v.valid(id)) continue;
    const std::string& b = impl_->bytes[static_cast<size_t>(id)];
    const bool at_start = num_valid == 0 || (num_valid == 1 && first_is_bos);
    if (num_valid++ == 0) first_is_bos = id == v.bos;
    if (at_start && strips_prefix_space(id)) {
      out.append(b, 1);
    } else {
      out += b;
    }
  }
  return out;
}

bool Tokenizer::strips_prefix_space(int32_t id) const {
  const internal::Vocab& v = impl_->vocab;
  if (!v.add_space_prefix || !v.valid(id) || v.type(id) != TokenType::kNormal) return false;
  const std::string& b = impl_->bytes[static_cast<size_t>(id)];
  return !b.empty() && b[0] == ' ';
}

std::string Tokenizer::token_bytes(int32_t id) const {
  return impl_->vocab.valid(id) ? impl_->bytes[static_cast<size_t>(id)] : std::string();
}

const std::string& Tokenizer::piece(int32_t id) const {
  static const std::string kEmpty;
  return impl_->vocab.valid(id) ? impl_->vocab.pieces[static_cast<size_t>(id)] : kEmpty;
}

std::optional<int32_t> Tokenizer::find_piece(std::string_view piece) const {
  return impl_->vocab.find(piece);
}

int32_t Tokenizer::n_vocab() const { return impl_->vocab.size(); }
int32_t Tokenizer::bos_id() const { return impl_->vocab.bos; }
int32_t Tokenizer::eos_id() const { return impl_->vocab.eos; }
bool Tokenizer::add_bos() const { return impl_->vocab.add_bos; }
bool Tokenizer::add_eos() const { return impl_->vocab.add_eos; }
bool Tokenizer::add_space_prefix() const { return impl_->vocab.add_space_prefix; }

bool Tokenizer::is_eog(int32_t id) const {
  return impl_->vocab.valid(id) && impl_->vocab.eog[static_cast<size_t>(id)] != 0;
}

bool Tokenizer::is_control(int32_t id) const {
  return impl_->vocab.valid(id) && impl_->vocab.type(id) == TokenType::kControl;
}

std::string_view Tokenizer::model_type() const { return impl_->vocab.model; }
std::string_view Tokenizer::pre_type() const { return impl_->vocab.pre; }

}  // namespace ts::tokenizer
