#include <cmath>

#include "gguf/gguf.h"
#include "model/model_weights.h"
#include "tensor/dtype.h"

namespace ts::model {
namespace {

using tensor::DType;
using tensor::Matrix;

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s;
  for (int64_t d : shape) s += (s.empty() ? "" : "x") + std::to_string(d);
  return s;
}

Result<std::vector<float>> load_vector(const gguf::GgufFile& f, const std::string& name, int64_t n) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  if (!t) return data_loss("model lacks tensor '" + name + "'");
  if (t->num_elements != n) {
    return data_loss("tensor '" + name + "' has " + std::to_string(t->num_elements) + " elements, expected " +
                     std::to_string(n));
  }
  std::vector<float> out(n);
  auto dt = static_cast<DType>(t->type);
  if (dt != DType::kF32 && dt != DType::kF16 && dt != DType::kBF16) {
    return unimplemented("tensor '" + name + "' has type " + tensor::type_name(t->type) + "; norms and biases must be f32/f16/bf16");
  }
  tensor::dequantize_row(dt, t->data, out.data(), n);
  return out;
}

constexpr tensor::MatrixOptions kLoadOptions{.release_source = true};

Result<Matrix> load_matrix(const gguf::GgufFile& f, const std::string& name, int64_t rows, int64_t cols) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  if (!t) return data_loss("model lacks tensor '" + name + "'");
  if (t->shape.size() != 2 || t->cols() != cols || t->rows() != rows) {
    return data_loss("tensor '" + name + "' has shape " + shape_str(t->shape) + ", expected " + std::to_string(cols) + "x" +
                     std::to_string(rows));
  }
  // The mapping is read-only and private: once a tensor is repacked its source pages are given
  // back, so no second copy of the weights stays resident.
  auto r = Matrix::create(static_cast<DType>(t->type), t->data, rows, cols, kLoadOptions);
  if (!r.ok()) return Status(r.status().code(), "tensor '" + name + "': " + r.status().message());
  return r;
}

// Stacked experts [cols, rows, n_expert] as one Matrix per expert slice.
Result<std::vector<Matrix>> load_experts(const gguf::GgufFile& f, const std::string& name, int64_t rows,
                                         int64_t cols, int64_t n_expert) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  if (!t) return data_loss("model lacks tensor '" + name + "'");
  if (t->shape != std::vector<int64_t>{cols, rows, n_expert}) {
    return invalid_argument("tensor '" + name + "' has shape " + shape_str(t->shape) + ", expected " +
                            shape_str({cols, rows, n_expert}) + " (expert_count " + std::to_string(n_expert) + ")");
  }
  const uint64_t slice = t->num_bytes / static_cast<uint64_t>(n_expert);
  std::vector<Matrix> out;
  out.reserve(n_expert);
  for (int64_t e = 0; e < n_expert; ++e) {
    auto r = Matrix::create(static_cast<DType>(t->type), t->data + e * slice, rows, cols, kLoadOptions);
    if (!r.ok()) return Status(r.status().code(), "tensor '" + name + "': " + r.status().message());
    out.push_back(std::move(*r));
  }
  return out;
}

}  // namespace

Result<size_t> load_weights(const gguf::GgufFile& f, const ModelConfig& c, Model::Weights& w) {
  const ArchSpec& spec = *c.spec;
  const int64_t E = c.n_embd, QD = int64_t{c.n_head} * c.head_dim, KD = int64_t{c.n_head_kv} * c.head_dim;
  TS_ASSIGN_OR_RETURN(w.token_embd, load_matrix(f, "token_embd.weight", c.n_vocab, E));
  if (!c.tied_output) {
    TS_ASSIGN_OR_RETURN(w.output_own, load_matrix(f, "output.weight", c.n_vocab, E));
    w.output = &w.output_own;
  } else {
    w.output = &w.token_embd;
  }
  TS_ASSIGN_OR_RETURN(w.output_norm, load_vector(f, "output_norm.weight", E));
  const char* longrope = c.rope_long_factors ? "rope_factors_long.weight" : "rope_factors_short.weight";
  if (f.find_tensor("rope_freqs.weight")) {
    TS_ASSIGN_OR_RETURN(w.rope_freq_factors, load_vector(f, "rope_freqs.weight", c.head_dim / 2));
  } else if (spec.longrope && f.find_tensor(longrope)) {
    TS_ASSIGN_OR_RETURN(w.rope_freq_factors, load_vector(f, longrope, c.head_dim / 2));
  } else if (c.rope_scaling == RopeScaling::kLlama3) {
    w.rope_freq_factors = llama3_rope_factors(c);
  }
  size_t bytes = w.output->weight_bytes();
  w.layers.resize(c.n_layer);
  for (int32_t l = 0; l < c.n_layer; ++l) {
    auto& L = w.layers[l];
    const std::string p = "blk." + std::to_string(l) + ".";
    TS_ASSIGN_OR_RETURN(L.attn_norm, load_vector(f, p + "attn_norm.weight", E));
    TS_ASSIGN_OR_RETURN(L.ffn_norm, load_vector(f, p + "ffn_norm.weight", E));
    if (spec.post_norms) {
      TS_ASSIGN_OR_RETURN(L.post_attn_norm, load_vector(f, p + "post_attention_norm.weight", E));
      TS_ASSIGN_OR_RETURN(L.post_ffw_norm, load_vector(f, p + "post_ffw_norm.weight", E));
    }
    if (spec.qk_norm) {
      TS_ASSIGN_OR_RETURN(L.q_norm, load_vector(f, p + "attn_q_norm.weight", c.head_dim));
      TS_ASSIGN_OR_RETURN(L.k_norm, load_vector(f, p + "attn_k_norm.weight", c.head_dim));
    }
    if (spec.fused_qkv) {
      TS_ASSIGN_OR_RETURN(L.wqkv, load_matrix(f, p + "attn_qkv.weight", QD + 2 * KD, E));
      bytes += L.wqkv.weight_bytes();
      if (c.has_qkv_bias) {
        TS_ASSIGN_OR_RETURN(auto b, load_vector(f, p + "attn_qkv.bias", QD + 2 * KD));
        L.bq.assign(b.begin(), b.begin() + QD);
        L.bk.assign(b.begin() + QD, b.begin() + QD + KD);
        L.bv.assign(b.begin() + QD + KD, b.end());
      }
    } else {
      TS_ASSIGN_OR_RETURN(L.wq, load_matrix(f, p + "attn_q.weight", QD, E));
      TS_ASSIGN_OR_RETURN(L.wk, load_matrix(f, p + "attn_k.weight", KD, E));
      TS_ASSIGN_OR_RETURN(L.wv, load_matrix(f, p + "attn_v.weight", KD, E));
      bytes += L.wq.weight_bytes() + L.wk.weight_bytes() + L.wv.weight_bytes();
      if (c.has_qkv_bias) {
        TS_ASSIGN_OR_RETURN(L.bq, load_vector(f, p + "attn_q.bias", QD));
        TS_ASSIGN_OR_RETURN(L.bk, load_vector(f, p + "attn_k.bias", KD));
        TS_ASSIGN_OR_RETURN(L.bv, load_vector(f, p + "attn_v.bias", KD));
      }
    }
    TS_ASSIGN_OR_RETURN(L.wo, load_matrix(f, p + "attn_output.weight", E, QD));
    bytes += L.wo.weight_bytes();
    if (c.n_expert > 0) {
      const int64_t X = c.n_expert, F = c.n_ff_exp;
      TS_ASSIGN_OR_RETURN(L.moe.router, load_matrix(f, p + "ffn_gate_inp.weight", X, E));
      TS_ASSIGN_OR_RETURN(L.moe.gate, load_experts(f, p + "ffn_gate_exps.weight", F, E, X));
      TS_ASSIGN_OR_RETURN(L.moe.up, load_experts(f, p + "ffn_up_exps.weight", F, E, X));
      TS_ASSIGN_OR_RETURN(L.moe.down, load_experts(f, p + "ffn_down_exps.weight", E, F, X));
      bytes += L.moe.router.weight_bytes() +
               static_cast<size_t>(c.n_expert_used) *
                   (L.moe.gate[0].weight_bytes() + L.moe.up[0].weight_bytes() + L.moe.down[0].weight_bytes());
    } else if (spec.fused_gate_up) {
      TS_ASSIGN_OR_RETURN(L.w_up, load_matrix(f, p + "ffn_up.weight", 2 * int64_t{c.n_ff}, E));
      TS_ASSIGN_OR_RETURN(L.w_down, load_matrix(f, p + "ffn_down.weight", E, c.n_ff));
      bytes += L.w_up.weight_bytes() + L.w_down.weight_bytes();
    } else {
      TS_ASSIGN_OR_RETURN(L.w_gate, load_matrix(f, p + "ffn_gate.weight", c.n_ff, E));
      TS_ASSIGN_OR_RETURN(L.w_up, load_matrix(f, p + "ffn_up.weight", c.n_ff, E));
      TS_ASSIGN_OR_RETURN(L.w_down, load_matrix(f, p + "ffn_down.weight", E, c.n_ff));
      bytes += L.w_gate.weight_bytes() + L.w_up.weight_bytes() + L.w_down.weight_bytes();
    }
  }
  return bytes;
}

}  // namespace ts::model

namespace ts::model {

WeightMemory weight_memory(const Model::Weights& w) {
  WeightMemory m;
  auto add = [&](const Matrix& x) {
    m.resident += x.resident_bytes();
    m.released += x.released_source_bytes();
  };
  add(w.token_embd);
  if (w.output == &w.output_own) add(w.output_own);
  for (const auto& l : w.layers) {
    for (const Matrix* x : {&l.wq, &l.wk, &l.wv, &l.wqkv, &l.wo, &l.w_gate, &l.w_up, &l.w_down, &l.moe.router}) add(*x);
    for (const auto* v : {&l.moe.gate, &l.moe.up, &l.moe.down})
      for (const Matrix& x : *v) add(x);
  }
  return m;
}

}  // namespace ts::model
