// Kernels of the column-interleaved float layouts F32_R16 / F16_R16 (kernels.h), shared by the
// AVX2 and AVX-512 tables: included inside their ts::tensor::kern anonymous namespace under
// each file's target pragma, after it defines its vector traits V:
//   using Vec; kParts                   vectors per 16-row column (2 for ymm, 1 for zmm)
//   load<L>(col, part)                  rows [part * 16 / kParts, ...) of the column at col, as floats
//   zero(), bcast(const float*), fma(w, x, acc) = w * x + acc (one rounding), store(float*, v)
//   kDecodeGroups                       groups a decode tile (1-2 tokens) streams at once
//   kBatchGroups, kBatchTokens          the batched tile (groups x tokens)
// Every (row, token) is one fused multiply-add chain over k = 0..cols-1 from +0, whatever the
// tile: the scalar reference's bits on every tier and batch size. Not a public header.

// Software prefetch distance (GemmArgs::sw_prefetch), bytes ahead in each group's stream; one
// line per tile group every 64 bytes of columns.
constexpr int64_t kFloatR16PrefetchBytes = 2048;

// The groups of one tile: group i's lanes [lane0[i], lane1[i]) are output rows out_r[i], ...
template <int G>
struct FloatR16Groups {
  const uint8_t* grp[G];
  int lane0[G], lane1[G];
  int64_t out_r[G];
};

template <typename V, Layout L, int G, int T>
void float_r16_tile(const GemmArgs& g, const FloatR16Groups<G>& gs, int64_t t0) {
  using Vec = typename V::Vec;
  constexpr int P = V::kParts;
  constexpr size_t kCol = 16 * float_r16_value_bytes(L);  // bytes of one column of a group
  const Act& a = *g.act;
  const int64_t cols = a.cols;
  const float* x[T];
  for (int t = 0; t < T; ++t) x[t] = a.xf + (t0 + t) * cols;
  Vec acc[G][P][T];
#pragma GCC unroll 4
  for (int i = 0; i < G; ++i)
#pragma GCC unroll 2
    for (int p = 0; p < P; ++p)
#pragma GCC unroll 12
      for (int t = 0; t < T; ++t) acc[i][p][t] = V::zero();
  // One loop, the prefetch under a branch (a lambda holding the step kept acc in memory).
  constexpr int64_t kPerLine = 64 / kCol > 0 ? static_cast<int64_t>(64 / kCol) : 1;  // columns a line
  const bool prefetch = g.sw_prefetch;
  for (int64_t k = 0; k < cols; ++k) {
    if (prefetch && k % kPerLine == 0) {
#pragma GCC unroll 4
      for (int i = 0; i < G; ++i)
        _mm_prefetch(reinterpret_cast<const char*>(gs.grp[i] + static_cast<size_t>(k) * kCol) + kFloatR16PrefetchBytes,
                     _MM_HINT_T0);
    }
    Vec xb[T];
#pragma GCC unroll 12
    for (int t = 0; t < T; ++t) xb[t] = V::bcast(x[t] + k);
#pragma GCC unroll 4
    for (int i = 0; i < G; ++i) {
#pragma GCC unroll 2
      for (int p = 0; p < P; ++p) {
        const Vec w = V::template load<L>(gs.grp[i] + static_cast<size_t>(k) * kCol, p);
#pragma GCC unroll 12
        for (int t = 0; t < T; ++t) acc[i][p][t] = V::fma(w, xb[t], acc[i][p][t]);
      }
    }
  }
  // Fixed-trip loops, unrolled: an accumulator indexed at run time would keep the whole array
  // in memory (stored back every column).
#pragma GCC unroll 4
  for (int i = 0; i < G; ++i) {
    const bool full = gs.lane0[i] == 0 && gs.lane1[i] == 16;
#pragma GCC unroll 12
    for (int t = 0; t < T; ++t) {
      float* yr = g.y + (t0 + t) * g.ldy + gs.out_r[i];
      if (full) {
#pragma GCC unroll 2
        for (int p = 0; p < P; ++p) V::store(yr + p * (16 / P), acc[i][p][t]);
      } else {
        alignas(64) float tmp[16];
#pragma GCC unroll 2
        for (int p = 0; p < P; ++p) V::store(tmp + p * (16 / P), acc[i][p][t]);
        for (int l = gs.lane0[i]; l < gs.lane1[i]; ++l) yr[l - gs.lane0[i]] = tmp[l];
      }
    }
  }
}

// Token tiles of at most V::kBatchTokens for G groups: full tiles, then the remainder in one.
template <typename V, Layout L, int G>
void float_r16_tokens(const GemmArgs& g, const FloatR16Groups<G>& gs) {
  constexpr int TB = V::kBatchTokens;
  const int64_t n_tok = g.act->n_tok;
  int64_t t0 = 0;
  for (; t0 + TB <= n_tok; t0 += TB) float_r16_tile<V, L, G, TB>(g, gs, t0);
  const int64_t left = n_tok - t0;
  if (left == 0) return;
  [&]<int... Ts>(std::integer_sequence<int, Ts...>) {
    ((left == Ts + 1 ? (float_r16_tile<V, L, G, Ts + 1>(g, gs, t0), 0) : 0), ...);
  }(std::make_integer_sequence<int, TB - 1>{});
}

template <typename V, Layout L>
void gemm_float_r16(const GemmArgs& g) {
  const int64_t n_tok = g.act->n_tok;
  const int64_t ng = (g.row0 + g.num_rows + 15) / 16;  // groups the rows touch
  const auto group = [&](int64_t j, auto& gs, int i) {
    gs.grp[i] = g.w + static_cast<size_t>(j) * g.stride;
    gs.lane0[i] = j == 0 ? static_cast<int>(g.row0) : 0;
    gs.lane1[i] = j == ng - 1 ? static_cast<int>(g.row0 + g.num_rows - 16 * (ng - 1)) : 16;
    gs.out_r[i] = 16 * j + gs.lane0[i] - g.row0;
  };
  const auto decode = [&]<int G>(int64_t j) {
    FloatR16Groups<G> gs;
    for (int i = 0; i < G; ++i) group(j + i, gs, i);
    if (n_tok == 1) float_r16_tile<V, L, G, 1>(g, gs, 0);
    else float_r16_tile<V, L, G, 2>(g, gs, 0);
  };
  const auto batch = [&]<int G>(int64_t j) {
    FloatR16Groups<G> gs;
    for (int i = 0; i < G; ++i) group(j + i, gs, i);
    float_r16_tokens<V, L, G>(g, gs);
  };
  int64_t j = 0;
  if (n_tok <= 2) {
    // Decode: kDecodeGroups streams at once (each group's columns are one sequential stream).
    constexpr int GD = V::kDecodeGroups;
    for (; j + GD <= ng; j += GD) decode.template operator()<GD>(j);
    if constexpr (GD > 2) {
      if (j + 2 <= ng) {
        decode.template operator()<2>(j);
        j += 2;
      }
    }
    for (; j < ng; ++j) decode.template operator()<1>(j);
    return;
  }
  constexpr int GB = V::kBatchGroups;
  for (; j + GB <= ng; j += GB) batch.template operator()<GB>(j);
  if constexpr (GB > 1) {
    for (; j < ng; ++j) batch.template operator()<1>(j);
  }
}
