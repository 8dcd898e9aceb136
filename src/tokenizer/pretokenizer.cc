#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pretokenizer.h"

#include <pcre2.h>

#include <array>

#include "tokenizer/unicode.h"

namespace ts::tokenizer::internal {
namespace {

// The regexes are the models' own pre-tokenizer definitions (their tokenizer.json), in the
// form llama.cpp uses (case-insensitive contractions spelled out).
constexpr const char* kGpt2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
constexpr const char* kLlama3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kQwen2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kQwen35 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?"
    "[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kDeepseekLlmLetters =
    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-"
    "Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-"
    "ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+";
constexpr const char* kCjk = "[一-龥ࠀ-一가-퟿]+";

struct PreEntry {
  std::array<std::string_view, 10> names;
  const char* canonical;
  std::vector<std::string> patterns;
  bool ignore_merges;
  bool add_bos;
};

const std::vector<PreEntry>& pre_table() {
  static const std::vector<PreEntry> table = {
      {{"default"},
       "default",
       {"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2, "\\p{N}+", "[0-9][0-9][0-9]"},
       false,
       false},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"},
       "llama3",
       {kLlama3},
       true,
       true},
      {{"dbrx", "smaug-bpe"}, "dbrx", {kLlama3}, false, false},
      {{"deepseek-llm"},
       "deepseek-llm",
       {"[\\r\\n]", kDeepseekLlmLetters, "\\s?[!-/:-~！-／：-～‘-‟　-。]+", "\\s+$", kCjk,
        "\\p{N}+"},
       false,
       false},
      {{"deepseek-coder"},
       "deepseek-coder",
       {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", kCjk, "\\p{N}"},
       false,
       false},
      {{"falcon"}, "falcon", {"[\\p{P}\\$\\+<=>\\^~\\|`]+", kGpt2, "[0-9][0-9][0-9]"}, false, false},
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"},
       "starcoder",
       {"\\p{N}", kGpt2},
       false,
       false},
      {{"gpt-2", "phi-2", "jina-es", "jina-de", "jina-v1-en", "jina-v2-es", "jina-v2-de",
        "jina-v2-code", "mpt", "olmo"},
       "gpt2",
       {kGpt2},
       false,
       false},
      {{"jais", "gigachat", "roberta-bpe", "trillion"}, "gpt2", {kGpt2}, false, false},
      {{"qwen2", "deepseek-r1-qwen", "megrez", "stablelm2", "hunyuan"}, "qwen2", {kQwen2}, false,
       false},
      {{"qwen35"}, "qwen35", {kQwen35}, false, false},
  };
  return table;
}

}  // namespace

Result<PreConfig> pre_config(std::string_view pre) {
  if (pre.empty()) pre = "default";  // llama.cpp: missing key -> default (with a warning)
  for (const PreEntry& e : pre_table()) {
    for (std::string_view name : e.names) {
      if (!name.empty() && name == pre) {
        return PreConfig{e.canonical, e.patterns, e.ignore_merges, e.add_bos};
      }
    }
  }
  return unimplemented("unsupported tokenizer.ggml.pre \"" + std::string(pre) +
                       "\" (known: default, gpt-2, llama-bpe/llama3, qwen2, qwen35, "
                       "deepseek-llm, deepseek-coder, falcon, starcoder, refact, mpt, smollm, "
                       "dbrx, command-r, olmo, ...)");
}

struct PreTokenizer::Compiled {
  pcre2_code* code = nullptr;
  bool jit = false;
};

PreTokenizer::~PreTokenizer() {
  for (Compiled& c : regexes_) pcre2_code_free(c.code);
}

Result<std::unique_ptr<PreTokenizer>> PreTokenizer::create(
    const std::vector<std::string>& patterns) {
  std::unique_ptr<PreTokenizer> p(new PreTokenizer());
  for (const std::string& pat : patterns) {
    int err = 0;
    PCRE2_SIZE err_off = 0;
    // DOLLAR_ENDONLY: "$" means the end of the piece only (as std::regex), not before a final
    // newline. MATCH_INVALID_UTF: bytes that are not UTF-8 simply do not match.
    pcre2_code* code = pcre2_compile(
        reinterpret_cast<PCRE2_SPTR>(pat.data()), pat.size(),
        PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY | PCRE2_MATCH_INVALID_UTF, &err, &err_off,
        nullptr);
    if (code == nullptr) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      return internal_error("pre-tokenizer regex failed to compile at offset " +
                            std::to_string(err_off) + ": " +
                            reinterpret_cast<const char*>(msg));
    }
    Compiled c;
    c.code = code;
    c.jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
    p->regexes_.push_back(c);
  }
  return p;
}

void PreTokenizer::split(std::string_view text,
                         std::vector<std::pair<size_t, size_t>>* pieces) const {
  std::vector<std::pair<size_t, size_t>> cur;
  std::vector<std::pair<size_t, size_t>> next;
  if (!text.empty()) cur.emplace_back(0, text.size());
  for (const Compiled& re : regexes_) {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(re.code, nullptr);
    next.clear();
    for (const auto& [off, len] : cur) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + off);
      size_t last = 0;  // end of the previous piece, relative to off
      size_t pos = 0;
      while (pos < len) {
        int rc = pcre2_match(re.code, subject, len, pos, 0, md, nullptr);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
          rc = pcre2_match(re.code, subject, len, pos, PCRE2_NO_JIT, md, nullptr);
        }
        if (rc < 0) break;  // no match (or a resource limit): the rest stays one piece
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        const size_t ms = ov[0], me = ov[1];
        if (me <= ms) {  // empty match: step over one character
          if (ms >= len) break;
          pos = ms + utf8_seq_len(static_cast<uint8_t>(text[off + ms]));
          continue;
        }
        if (ms > last) next.emplace_back(off + last, ms - last);
        next.emplace_back(off + ms, me - ms);
        last = pos = me;
      }
      if (last < len) next.emplace_back(off + last, len - last);
    }
    pcre2_match_data_free(md);
    cur.swap(next);
  }
  pieces->insert(pieces->end(), cur.begin(), cur.end());
}

}  // namespace ts::tokenizer::internal
