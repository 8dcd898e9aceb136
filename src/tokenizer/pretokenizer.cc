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
    "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}"
    "\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}"
    "\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-"
    "\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}"
    "\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-"
    "\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}"
    "\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}"
    "\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}"
    "\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-"
    "\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}"
    "\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}"
    "\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}"
    "\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-"
    "\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}"
    "\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}"
    "-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-"
    "\\x{118DF}\\x{1E900}-\\x{1E943}]+";
constexpr const char* kDeepseekLlmPunct =
    "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+";
// CJK ideographs, U+0800..U+4E00 and Hangul (deepseek pre-tokenizers).
constexpr const char* kCjk = "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+";

struct PreEntry {
  std::array<std::string_view, 10> names;
  const char* canonical;
  std::vector<std::string> patterns;
  bool ignore_merges;
  bool add_bos;
  bool spm_style = false;
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
       {"[\\r\\n]", kDeepseekLlmLetters, kDeepseekLlmPunct, "\\s+$", kCjk,
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
      // Merges run over whole lines: only newline runs are split off (llama.cpp's merge lookup
      // never sees a newline inside a piece).
      {{"gemma4", "granite-embed-multi-311m"}, "gemma4", {"[^\\n]+|[\\n]+"}, false, true, true},
  };
  return table;
}

}  // namespace

Result<PreConfig> pre_config(std::string_view pre) {
  if (pre.empty()) pre = "default";  // llama.cpp: missing key -> default (with a warning)
  for (const PreEntry& e : pre_table()) {
    for (std::string_view name : e.names) {
      if (!name.empty() && name == pre) {
        return PreConfig{e.canonical, e.patterns, e.ignore_merges, e.add_bos, e.spm_style};
      }
    }
  }
  return unimplemented("unsupported tokenizer.ggml.pre \"" + std::string(pre) +
                       "\" (known: default, gpt-2, llama-bpe/llama3, qwen2, qwen35, "
                       "deepseek-llm, deepseek-coder, falcon, starcoder, refact, mpt, smollm, "
                       "dbrx, command-r, olmo, gemma4, ...)");
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
