// Helpers shared by the attention tests (attention_test.cc: whole-layer attention against the
// untiled reference; attention_kernels_test.cc: each kernel table against the scalar one;
// attention_f32_tiles_test.cc: the f32 prefill tiles).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "model/attention.h"
#include "model/attention_kernels.h"
#include "model/kv_storage.h"
#include "model/model_config.h"
#include "tensor/cpu_features.h"
#include "tensor/matrix.h"

namespace ts::model::attn_test {

// The SIMD kernel tables this host can run (the scalar one is always there).
inline std::vector<const attn::Kernels*> simd_tables() {
  std::vector<const attn::Kernels*> v;
  if (tensor::detected_isa() >= tensor::Isa::kAvx2) v.push_back(&attn::avx2_kernels());
  if (tensor::detected_isa() >= tensor::Isa::kAvx512) v.push_back(&attn::avx512_kernels());
  return v;
}

inline std::vector<float> randv(size_t n, std::mt19937& rng, float scale = 1.f) {
  std::normal_distribution<float> nd(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

inline bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

inline std::vector<tensor::Isa> host_isas() {
  std::vector<tensor::Isa> v;
  for (int i = 0; i <= static_cast<int>(tensor::highest_isa()); ++i)
    if (tensor::isa_available(static_cast<tensor::Isa>(i))) v.push_back(static_cast<tensor::Isa>(i));
  return v;
}

struct IsaScope {
  tensor::Isa saved = tensor::active_isa();
  explicit IsaScope(tensor::Isa isa) { tensor::set_isa(isa); }
  ~IsaScope() { tensor::set_isa(saved); }
};

// A batch of sequences with KV already written for positions [0, start_pos + num_tokens).
struct Case {
  int32_t n_head, n_head_kv, head_dim, block_size, window;
  std::vector<std::pair<int32_t, int32_t>> seqs;  // (start_pos, num_tokens)
};

struct Batch {
  KvStorage kv;
  std::vector<std::vector<int32_t>> tables;
  std::vector<SeqSlice> slices;
  std::vector<float> q;
  AttentionParams p;
  int64_t T = 0;
};

inline Batch make_batch(const Case& c, KvType type, uint32_t seed) {
  ModelConfig cfg;
  cfg.n_layer = 2;
  cfg.n_head = c.n_head;
  cfg.n_head_kv = c.n_head_kv;
  cfg.head_dim = c.head_dim;
  int32_t blocks_needed = 0;
  for (auto [sp, nt] : c.seqs) blocks_needed += (sp + nt + c.block_size - 1) / c.block_size;
  Batch b{.kv = std::move(KvStorage::create(cfg, type, c.block_size, blocks_needed + 1).value())};
  b.p = {.n_head = c.n_head, .n_head_kv = c.n_head_kv, .head_dim = c.head_dim,
         .scale = 1.f / std::sqrt(static_cast<float>(c.head_dim)), .window = c.window};
  std::mt19937 rng(seed);
  // Block ids handed out in a shuffled order so tables are not contiguous.
  std::vector<int32_t> ids(static_cast<size_t>(blocks_needed + 1));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  size_t next = 0;
  for (auto [sp, nt] : c.seqs) {
    std::vector<int32_t> t;
    for (int32_t i = 0; i < (sp + nt + c.block_size - 1) / c.block_size; ++i) t.push_back(ids[next++]);
    b.tables.push_back(std::move(t));
  }
  const int64_t KD = int64_t{c.n_head_kv} * c.head_dim;
  for (size_t i = 0; i < c.seqs.size(); ++i) {
    const auto [sp, nt] = c.seqs[i];
    // Earlier positions and this step's tokens, written through the real writer (layer 1).
    SeqSlice all{.num_tokens = sp + nt, .start_pos = 0, .block_table = b.tables[i]};
    auto k = randv(static_cast<size_t>((sp + nt) * KD), rng), v = randv(static_cast<size_t>((sp + nt) * KD), rng);
    write_kv(b.kv, 1, std::span<const SeqSlice>(&all, 1), k.data(), v.data());
    b.T += nt;
  }
  for (size_t i = 0; i < c.seqs.size(); ++i)
    b.slices.push_back({.num_tokens = c.seqs[i].second, .start_pos = c.seqs[i].first, .block_table = b.tables[i]});
  b.q = randv(static_cast<size_t>(b.T * c.n_head * c.head_dim), rng, 2.f);
  return b;
}

inline double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, static_cast<double>(std::fabs(a[i] - b[i])));
    den = std::max(den, static_cast<double>(std::fabs(b[i])));
  }
  return num / (den > 0 ? den : 1);
}

}  // namespace ts::model::attn_test
