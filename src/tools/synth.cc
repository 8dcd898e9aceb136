#include "tools/synth.h"

#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "gguf/gguf.h"
#include "tensor/matrix.h"

namespace ts::tools {
namespace {

using gguf::Value;
using tensor::DType;

// A SentencePiece-style vocabulary: <unk>, <s>, </s>, the 256 byte tokens, then pieces made of
// '▁' + letters so that text tokenizes into a mix of merged pieces and byte fallbacks.
void generated_vocab(int32_t n, gguf::GgufWriter& w) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<double> scores = {0, 0, 0};
  std::vector<int64_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    tokens.push_back(buf);
    scores.push_back(0);
    types.push_back(6);
  }
  const std::string letters = "etaoinshrdlucmfwypvbgkjqxz";
  std::vector<std::string> pieces;
  for (char c : letters) pieces.push_back(std::string(1, c));
  for (char c : letters) pieces.push_back("\xE2\x96\x81" + std::string(1, c));
  std::set<std::string> seen(pieces.begin(), pieces.end());
  // Breadth-first extension by one letter: all pieces are distinct.
  for (size_t i = 0; static_cast<int32_t>(tokens.size() + pieces.size()) < n; ++i) {
    std::string next = pieces[i / letters.size()] + letters[i % letters.size()];
    if (seen.insert(next).second) pieces.push_back(std::move(next));
  }
  float score = -1;
  for (const auto& p : pieces) {
    if (static_cast<int32_t>(tokens.size()) >= n) break;
    tokens.push_back(p);
    scores.push_back(score);
    score -= 0.01f;
    types.push_back(1);
  }
  w.set("tokenizer.ggml.model", Value::make_string("llama"));
  w.set("tokenizer.ggml.tokens", Value::make_string_array(std::move(tokens)));
  w.set("tokenizer.ggml.scores", Value::make_f32_array(std::move(scores)));
  w.set("tokenizer.ggml.token_type", Value::make_i32_array(std::move(types)));
  w.set("tokenizer.ggml.bos_token_id", Value::make_u32(1));
  w.set("tokenizer.ggml.eos_token_id", Value::make_u32(2));
  w.set("tokenizer.ggml.unknown_token_id", Value::make_u32(0));
}

}  // namespace

Status synthesize(const SynthOptions& o, const std::string& out_path) {
  if (o.arch != "llama" && o.arch != "qwen2") return invalid_argument("--arch must be llama or qwen2");
  if (!tensor::has_row_quantizer(o.type)) {
    return invalid_argument("--type " + tensor::type_name(static_cast<uint32_t>(o.type)) +
                            ": no quantizer for this type in this build");
  }
  if (o.n_layer <= 0 || o.n_embd <= 0 || o.n_head <= 0 || o.n_head_kv <= 0 || o.n_ff <= 0 || o.n_ctx <= 0) {
    return invalid_argument("layers, embd, heads, kv-heads, ffn and ctx must be positive");
  }
  if (o.n_embd % o.n_head) return invalid_argument("embd must be a multiple of heads");
  if (o.n_head % o.n_head_kv) return invalid_argument("heads must be a multiple of kv-heads");
  if ((o.n_embd / o.n_head) % 2) return invalid_argument("head dimension must be even");
  gguf::GgufWriter w;
  const std::string& a = o.arch;
  w.set("general.architecture", Value::make_string(a));
  w.set("general.name", Value::make_string(o.name));
  w.set("general.file_type", Value::make_u32(o.type == DType::kF32 ? 0 : o.type == DType::kF16 ? 1
                                             : o.type == DType::kQ4_0 ? 2 : o.type == DType::kQ8_0 ? 7
                                             : o.type == DType::kQ4_K ? 15 : o.type == DType::kQ6_K ? 18 : 32));
  w.set(a + ".block_count", Value::make_u32(o.n_layer));
  w.set(a + ".context_length", Value::make_u32(o.n_ctx));
  w.set(a + ".embedding_length", Value::make_u32(o.n_embd));
  w.set(a + ".feed_forward_length", Value::make_u32(o.n_ff));
  w.set(a + ".attention.head_count", Value::make_u32(o.n_head));
  w.set(a + ".attention.head_count_kv", Value::make_u32(o.n_head_kv));
  w.set(a + ".attention.layer_norm_rms_epsilon", Value::make_f32(o.rms_eps));
  w.set(a + ".rope.freq_base", Value::make_f32(o.rope_base));
  w.set(a + ".rope.dimension_count", Value::make_u32(o.n_embd / o.n_head));

  int64_t n_vocab = 0;
  if (!o.vocab_from.empty()) {
    auto src = gguf::GgufFile::open(o.vocab_from);
    if (!src.ok()) return src.status();
    for (const auto& [k, v] : (*src)->metadata()) {
      if (k.rfind("tokenizer.", 0) == 0) w.set(k, v);
    }
    const auto* toks = (*src)->get_string_array("tokenizer.ggml.tokens");
    if (!toks || toks->empty()) return data_loss("'" + o.vocab_from + "' has no tokenizer.ggml.tokens");
    n_vocab = static_cast<int64_t>(toks->size());
  } else {
    if (o.vocab_size < 300) return invalid_argument("--vocab-size must be at least 300 (259 special and byte tokens)");
    generated_vocab(o.vocab_size, w);
    n_vocab = o.vocab_size;
  }

  std::mt19937_64 rng(o.seed);
  std::normal_distribution<float> dist(0.f, o.std);
  const int64_t E = o.n_embd, HD = o.n_embd / o.n_head, KD = int64_t{o.n_head_kv} * HD;
  auto add_matrix = [&](const std::string& name, int64_t rows, int64_t cols) -> Status {
    DType t = o.type;
    auto traits = tensor::type_traits(static_cast<uint32_t>(t));
    if (!traits) return invalid_argument("bad weight type");
    if (cols % traits->block_size) {
      t = DType::kF16;
      traits = tensor::type_traits(static_cast<uint32_t>(t));
    }
    std::vector<float> row(cols);
    std::vector<uint8_t> data(static_cast<size_t>(rows) * tensor::row_bytes(*traits, cols));
    const size_t rb = tensor::row_bytes(*traits, cols);
    for (int64_t r = 0; r < rows; ++r) {
      for (auto& x : row) x = dist(rng);
      tensor::quantize_row(t, row.data(), data.data() + r * rb, cols);
    }
    return w.add_tensor(name, static_cast<uint32_t>(t), {cols, rows}, std::move(data));
  };
  auto add_vector = [&](const std::string& name, int64_t n, float value, bool random) -> Status {
    std::vector<float> v(n, value);
    if (random) for (auto& x : v) x = dist(rng);
    std::vector<uint8_t> data(n * 4);
    std::memcpy(data.data(), v.data(), data.size());
    return w.add_tensor(name, static_cast<uint32_t>(DType::kF32), {n}, std::move(data));
  };
  TS_RETURN_IF_ERROR(add_matrix("token_embd.weight", n_vocab, E));
  TS_RETURN_IF_ERROR(add_vector("output_norm.weight", E, 1.f, false));
  if (!o.tied) TS_RETURN_IF_ERROR(add_matrix("output.weight", n_vocab, E));
  for (int32_t l = 0; l < o.n_layer; ++l) {
    std::string p = "blk." + std::to_string(l) + ".";
    TS_RETURN_IF_ERROR(add_vector(p + "attn_norm.weight", E, 1.f, false));
    TS_RETURN_IF_ERROR(add_matrix(p + "attn_q.weight", E, E));
    TS_RETURN_IF_ERROR(add_matrix(p + "attn_k.weight", KD, E));
    TS_RETURN_IF_ERROR(add_matrix(p + "attn_v.weight", KD, E));
    if (a == "qwen2") {
      TS_RETURN_IF_ERROR(add_vector(p + "attn_q.bias", E, 0.f, true));
      TS_RETURN_IF_ERROR(add_vector(p + "attn_k.bias", KD, 0.f, true));
      TS_RETURN_IF_ERROR(add_vector(p + "attn_v.bias", KD, 0.f, true));
    }
    TS_RETURN_IF_ERROR(add_matrix(p + "attn_output.weight", E, E));
    TS_RETURN_IF_ERROR(add_vector(p + "ffn_norm.weight", E, 1.f, false));
    TS_RETURN_IF_ERROR(add_matrix(p + "ffn_gate.weight", o.n_ff, E));
    TS_RETURN_IF_ERROR(add_matrix(p + "ffn_up.weight", o.n_ff, E));
    TS_RETURN_IF_ERROR(add_matrix(p + "ffn_down.weight", E, o.n_ff));
  }
  return w.write(out_path);
}

}  // namespace ts::tools
