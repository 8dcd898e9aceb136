// Tiny GGUF models of every supported architecture, written in-process with the gguf writer
// (random F32 weights, a 300-token byte-fallback SentencePiece vocab), for architecture,
// routing and refusal tests. Tests can override metadata or tensor shapes to craft bad files.
#pragma once

#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tensor/dtype.h"

namespace ts::model::testing {

struct TinySpec {
  std::string arch = "llama";
  int32_t layers = 2, embd = 32, heads = 4, kv_heads = 2;
  int32_t head_dim = 0;  // 0: embd / heads (no key_length key)
  int32_t ff = 64;
  int32_t experts = 0, experts_used = 0, ff_exp = 0;  // qwen3moe
  int32_t window = 0;                                 // gemma3 sliding window
  uint64_t seed = 1;
  float std = 0.3f;
  std::map<std::string, std::vector<int64_t>> shape_override;  // tensor name -> shape written instead
  std::set<std::string> skip;                                   // tensors not written
  std::map<std::string, gguf::Value> meta_override;             // metadata set last
  std::map<std::string, std::pair<int64_t, float>> extra_const; // extra F32 vectors: name -> (n, value)
};

inline constexpr int32_t kTinyVocab = 300;

inline gguf::GgufWriter tiny_writer(const TinySpec& s) {
  using gguf::Value;
  gguf::GgufWriter w;
  const std::string& a = s.arch;
  const bool moe = a == "qwen3moe", gemma = a == "gemma3", phi3 = a == "phi3";
  const bool qk_norm = a == "qwen3" || moe || gemma;
  const int64_t HD = s.head_dim > 0 ? s.head_dim : s.embd / s.heads;
  w.set("general.architecture", Value::make_string(a));
  w.set("general.name", Value::make_string("tiny-" + a));
  w.set(a + ".block_count", Value::make_u32(s.layers));
  w.set(a + ".context_length", Value::make_u32(256));
  w.set(a + ".embedding_length", Value::make_u32(s.embd));
  w.set(a + ".feed_forward_length", Value::make_u32(s.ff));
  w.set(a + ".attention.head_count", Value::make_u32(s.heads));
  w.set(a + ".attention.head_count_kv", Value::make_u32(s.kv_heads));
  w.set(a + ".attention.layer_norm_rms_epsilon", Value::make_f32(1e-6f));
  w.set(a + ".rope.freq_base", Value::make_f32(10000.f));
  if (s.head_dim > 0) w.set(a + ".attention.key_length", Value::make_u32(s.head_dim));
  if (moe) {
    w.set(a + ".expert_count", Value::make_u32(s.experts));
    w.set(a + ".expert_used_count", Value::make_u32(s.experts_used));
    w.set(a + ".expert_feed_forward_length", Value::make_u32(s.ff_exp));
  }
  if (gemma && s.window > 0) w.set(a + ".attention.sliding_window", Value::make_u32(s.window));
  // Vocabulary: <unk> <s> </s>, 256 byte tokens, then single letters.
  std::vector<std::string> toks = {"<unk>", "<s>", "</s>"};
  std::vector<double> scores = {0, 0, 0};
  std::vector<int64_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    toks.push_back(buf);
    scores.push_back(0);
    types.push_back(6);
  }
  for (int i = 0; static_cast<int32_t>(toks.size()) < kTinyVocab; ++i) {
    toks.push_back((i < 26 ? "\xE2\x96\x81" : "") + std::string(1, static_cast<char>('a' + i % 26)) +
                   (i >= 26 ? std::string(1, static_cast<char>('a' + i / 26)) : ""));
    scores.push_back(-1.0 - i * 0.01);
    types.push_back(1);
  }
  w.set("tokenizer.ggml.model", Value::make_string("llama"));
  w.set("tokenizer.ggml.tokens", Value::make_string_array(std::move(toks)));
  w.set("tokenizer.ggml.scores", Value::make_f32_array(std::move(scores)));
  w.set("tokenizer.ggml.token_type", Value::make_i32_array(std::move(types)));
  w.set("tokenizer.ggml.bos_token_id", Value::make_u32(1));
  w.set("tokenizer.ggml.eos_token_id", Value::make_u32(2));

  std::mt19937_64 rng(s.seed);
  std::normal_distribution<float> dist(0.f, s.std);
  auto add = [&](const std::string& name, std::vector<int64_t> shape, bool ones) {
    if (s.skip.count(name)) return;
    if (auto it = s.shape_override.find(name); it != s.shape_override.end()) shape = it->second;
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v(n, 1.f);
    if (!ones) for (auto& x : v) x = dist(rng);
    std::vector<uint8_t> bytes(n * 4);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    (void)w.add_tensor(name, static_cast<uint32_t>(tensor::DType::kF32), std::move(shape), std::move(bytes));
  };
  const int64_t E = s.embd, QD = s.heads * HD, KD = s.kv_heads * HD;
  add("token_embd.weight", {E, kTinyVocab}, false);
  add("output_norm.weight", {E}, true);
  add("output.weight", {E, kTinyVocab}, false);
  for (int32_t l = 0; l < s.layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", {E}, true);
    if (phi3) {
      add(p + "attn_qkv.weight", {E, QD + 2 * KD}, false);
    } else {
      add(p + "attn_q.weight", {E, QD}, false);
      add(p + "attn_k.weight", {E, KD}, false);
      add(p + "attn_v.weight", {E, KD}, false);
    }
    if (qk_norm) {
      add(p + "attn_q_norm.weight", {HD}, true);
      add(p + "attn_k_norm.weight", {HD}, true);
    }
    add(p + "attn_output.weight", {QD, E}, false);
    if (gemma) add(p + "post_attention_norm.weight", {E}, true);
    add(p + "ffn_norm.weight", {E}, true);
    if (moe) {
      add(p + "ffn_gate_inp.weight", {E, s.experts}, false);
      add(p + "ffn_gate_exps.weight", {E, s.ff_exp, s.experts}, false);
      add(p + "ffn_up_exps.weight", {E, s.ff_exp, s.experts}, false);
      add(p + "ffn_down_exps.weight", {s.ff_exp, E, s.experts}, false);
    } else if (phi3) {
      add(p + "ffn_up.weight", {E, 2 * int64_t{s.ff}}, false);
      add(p + "ffn_down.weight", {s.ff, E}, false);
    } else {
      add(p + "ffn_gate.weight", {E, s.ff}, false);
      add(p + "ffn_up.weight", {E, s.ff}, false);
      add(p + "ffn_down.weight", {s.ff, E}, false);
    }
    if (gemma) add(p + "post_ffw_norm.weight", {E}, true);
  }
  for (const auto& [name, nv] : s.extra_const) {
    std::vector<float> v(nv.first, nv.second);
    std::vector<uint8_t> bytes(v.size() * 4);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    (void)w.add_tensor(name, static_cast<uint32_t>(tensor::DType::kF32), {nv.first}, std::move(bytes));
  }
  for (const auto& [k, v] : s.meta_override) w.set(k, v);
  return w;
}

// Writes the tiny model to `path`; returns path.
inline std::string write_tiny(const TinySpec& s, const std::string& path) {
  if (!tiny_writer(s).write(path).ok()) throw std::runtime_error("cannot write " + path);
  return path;
}

}  // namespace ts::model::testing
