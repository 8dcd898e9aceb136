// Helpers shared by the attention tests (attention_test.cc: whole-layer attention against the
// untiled reference; attention_kernels_test.cc: each kernel table against the scalar one).
#pragma once

#include <cstring>
#include <random>
#include <vector>

#include "model/attention_kernels.h"
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

}  // namespace ts::model::attn_test
