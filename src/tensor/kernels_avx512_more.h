// Table entries of the AVX-512 kernels for Q3_K, Q5_K, IQ4_XS, Q5_0 and IQ4_NL (plain, batched
// panels and R16 layouts).
//
// NOT a normal header: included once by kernels_avx512.cc inside its anonymous namespace, after
// kernels_avx512_panels.h (compiled for AVX-512 only).

// Q3_K / Q5_K / IQ4_XS (and Q2_K, kernels_avx512.cc) in their plain GGUF layouts (a matrix that
// is not repacked: MatrixOptions::allow_repack off, or no arena): two rows a vector below
// kLanePanelMinTokens, decoded int16 lane panels from there, both in the per-row kernels' 8-lane
// order (kernels_avx512_rowpairs.h, kernels_avx512_lanepanels.h). Their R16 layouts, which every
// SIMD tier repacks them into by default (kernels_avx512_kr16.h), sum each block exactly in int32
// and scale it once: on every golden model, held-back ones included, the last-prompt logits of
// the two orders differ by at most 4e-6 and the greedy ids agree. Q5_0: signed Q8_0-style panels
// in ggml's order (Q50Order::kBlock: gemm_q8's per-block tile, and Q5_0_R16 the Q4_0_R16 kernels
// with the 5th bit, gemm_q5_0_r16_block in kernels_avx512.cc). IQ4_NL: each block exactly and
// one FMA, llama.cpp's x86 order (plain layout: gemm_q8's per-block tile; IQ4_NL_R16: the Q4_0_R16
// kernels with a table decode, gemm_iq4_nl_r16 in kernels_avx512.cc).
void gemm_q3_k(const GemmArgs& g) { gemm_lane_or_plain<LaneKind::kQ3_K>(g, gemm_q3_k_pairs); }
void gemm_q5_k(const GemmArgs& g) { gemm_lane_or_plain<LaneKind::kQ5_K>(g, gemm_q5_k_pairs); }
void gemm_iq4_xs(const GemmArgs& g) { gemm_lane_or_plain<LaneKind::kIQ4_XS>(g, gemm_iq4_xs_pairs); }
template <typename W>
void gemm_signed32_panels(const GemmArgs& g) {
  if (g.act->n_tok < kPanelMinTokens || g.scratch == nullptr) return gemm_q8<W>(g);
  for (int64_t r = 0; r < g.num_rows; r += 16) {
    const int lanes = static_cast<int>(g.num_rows - r < 16 ? g.num_rows - r : 16);
    decode_signed32_panel<W>(g, r, lanes, g.scratch);
    r16_ggml_group<DecPanelS8>(g, g.scratch, 0, lanes, r);
  }
}
void gemm_q5_0(const GemmArgs& g) {
  if (g.q5_block) return gemm_q8<WQ5_0Block>(g);  // Q50Order::kBlock (matrix.h)
  gemm_signed32_panels<WQ5_0>(g);
}
void gemm_iq4_nl(const GemmArgs& g) { gemm_q8<WIQ4_NL>(g); }  // rare (the SIMD tiers repack IQ4_NL)
void gemm_q5_0_r16(const GemmArgs& g) {
  if (g.q5_block) return gemm_q5_0_r16_block(g);  // Q50Order::kBlock (matrix.h)
  gemm_r16_ggml<DecQ5_0R16>(g);
}
void gemm_q4_1_r16(const GemmArgs& g) { gemm_r16_ggml<DecQ4_1R16>(g); }
void gemm_q5_1_r16(const GemmArgs& g) { gemm_r16_ggml<DecQ5_1R16>(g); }
