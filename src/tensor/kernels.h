// Mat-mul micro-kernels behind runtime ISA dispatch (internal to src/tensor).
//
// A kernel computes y[t*ldy + r] = sum_k W[r][k] * x[t][k] for r < num_rows and t < n_tok,
// reading each weight row (or 16-row group) once for all tokens. Activations arrive already
// rounded/quantized (Act). Every ISA provides every layout; the scalar table is the reference
// the SIMD ones are tested against. Kernels are pure: no allocation, no shared state.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace ts::tensor::kern {

// Weight layouts a Matrix can hold.
enum class Layout : int {
  kF32 = 0,
  kF16,
  kBF16,
  kQ8_0,
  kQ4_0,
  kQ4_K,
  kQ6_K,
  kQ8_0_R16,  // 16 rows interleaved, see below
  kQ4_K_R16,  // 16 rows interleaved, see below
  kQ6_K_R16,  // 16 rows interleaved, see below
  kQ4_0_R16,  // 16 rows interleaved, see below
  // Plain GGUF layouts of the other common ggml types (Q4_1 / Q5_1 also have R16 layouts below).
  kQ4_1,
  kQ5_0,
  kQ5_1,
  kQ2_K,
  kQ3_K,
  kQ5_K,
  kIQ4_NL,
  kIQ4_XS,
  kIQ4_NL_R16,  // 16 rows interleaved: the Q4_0_R16 bytes (same block shape), table values
  kQ5_0_R16,    // 16 rows interleaved, see below
  kQ4_1_R16,    // 16 rows interleaved, see below
  kQ5_1_R16,    // 16 rows interleaved, see below
  kQ5_K_R16,    // 16 rows interleaved, see below
  kQ3_K_R16,    // 16 rows interleaved, see below
  kQ2_K_R16,    // 16 rows interleaved, see below
  kIQ4_XS_R16,  // 16 rows interleaved, see below
  kF32_R16,     // 16 rows interleaved per column, see below
  kF16_R16,     // 16 rows interleaved per column, see below
  kCount,
};

// Q8_0_R16: rows padded to a multiple of 16 (padding rows have scale 0). Group g (rows
// 16g..16g+15) is a run of ceil(nb/2) pair records (nb = cols/32), each kR16PairBytes:
//   [2][16] fp16 scales (block 2p for the 16 rows, then block 2p+1),
//   [2][8][16][4] u8 = w + 128 (block, k4 = k/4, row, k%4): one 64-byte line feeds 16 rows.
// When nb is odd the last record's second block is zero-filled and never read.
constexpr size_t kR16PairBytes = 64 + 2 * 512;
inline size_t r16_group_bytes(int64_t cols) {
  return static_cast<size_t>((cols / 32 + 1) / 2) * kR16PairBytes;
}

// Q4_K_R16: rows padded to a multiple of 16. Group g is cols/256 block records of
// kQ4KR16BlockBytes (same nibbles as the GGUF blocks, scales pre-decoded):
//   [4 c][8 m][16 rows][4] u8  GGUF qs bytes 32c + 4m .. +3 of each row (2048 B): the low
//                              nibbles are values 64c + 4m.., the high ones 64c + 32 + 4m..
//   [8][16] u8 sub-block scales, [8][16] u8 sub-block mins, [16] fp16 d, [16] fp16 dmin
constexpr size_t kQ4KR16BlockBytes = 2048 + 128 + 128 + 32 + 32;
// Q6_K_R16: rows padded to a multiple of 16. Group g is cols/256 block records of
// kQ6KR16BlockBytes (the GGUF bytes of 16 rows, interleaved):
//   [2 c][16 m][16 rows][4] u8  ql bytes 64c + 4m .. +3   (2048 B)
//   [2 c][8 m][16 rows][4] u8   qh bytes 32c + 4m .. +3   (1024 B)
//   [16][16] int8 scales (sub-block, row), [16] fp16 d, 32 bytes of padding
constexpr size_t kQ6KR16BlockBytes = 2048 + 1024 + 256 + 32 + 32;
// Q4_0_R16: like Q8_0_R16 with pair records of kR16Q4PairBytes: [2][16] fp16 scales, then
// [2 blocks][4 m][16 rows][4] u8 = GGUF qs bytes 4m .. 4m+3 of each row (low nibbles: values
// 4m.., high nibbles: values 16 + 4m..; weight = nibble - 8).
constexpr size_t kR16Q4PairBytes = 64 + 2 * 256;
inline size_t r16_q4_group_bytes(int64_t cols) {
  return static_cast<size_t>((cols / 32 + 1) / 2) * kR16Q4PairBytes;
}
// Q5_0_R16: like Q4_0_R16 with pair records of kR16Q5PairBytes: [2][16] fp16 scales,
// [2 blocks][4 m][16 rows][4] u8 = GGUF qs bytes 4m .. 4m+3 (low nibbles: values 4m..,
// high nibbles: 16 + 4m..), then the 5th bits as [2 blocks][16 rows][4] u8 bit planes beside
// those bytes: byte (row, j), bit k4 = the 5th bit of value 4 * k4 + j (so one shift and mask
// give the bits of a whole [16 rows][4] line of values, the order the kernels read);
// weight = (nibble | 16 * bit) - 16.
constexpr size_t kR16Q5PairBytes = 64 + 2 * 256 + 2 * 64;
inline size_t r16_q5_group_bytes(int64_t cols) {
  return static_cast<size_t>((cols / 32 + 1) / 2) * kR16Q5PairBytes;
}
// Q4_1_R16: like Q4_0_R16 with pair records of kR16Q41PairBytes: [2][16] fp16 scales d, the
// [2 blocks][4 m][16 rows][4] u8 GGUF qs bytes, then [2][16] fp16 mins m (weight = d * nibble + m).
constexpr size_t kR16Q41PairBytes = 64 + 2 * 256 + 64;
constexpr size_t kR16Q41MinOffset = 64 + 2 * 256;
inline size_t r16_q4_1_group_bytes(int64_t cols) {
  return static_cast<size_t>((cols / 32 + 1) / 2) * kR16Q41PairBytes;
}
// Q5_1_R16: the Q5_0_R16 record (fp16 d, qs bytes, 5th-bit planes) followed by [2][16] fp16
// mins m; weight = d * (nibble | 16 * bit) + m.
constexpr size_t kR16Q51PairBytes = kR16Q5PairBytes + 64;
constexpr size_t kR16Q51MinOffset = kR16Q5PairBytes;
inline size_t r16_q5_1_group_bytes(int64_t cols) {
  return static_cast<size_t>((cols / 32 + 1) / 2) * kR16Q51PairBytes;
}
// The other K-quant R16 layouts: rows padded to a multiple of 16, group g is cols/256 block
// records (same bits as the GGUF blocks, the sub-block scales decoded to one byte each; every
// line of values is [16 rows][4] u8, 64 bytes):
// Q5_K_R16 (kQ5KR16BlockBytes): the Q4_K_R16 record (qs lines, scales, mins, d, dmin), then
//   [8 m][16 rows][4] u8  GGUF qh bytes 4m .. 4m+3 (bit 2c of byte i: the 5th bit of value
//                         64c + 4m + i; bit 2c + 1: of value 64c + 32 + 4m + i)
constexpr size_t kQ5KR16BlockBytes = kQ4KR16BlockBytes + 512;
// Q3_K_R16 (kQ3KR16BlockBytes):
//   [2 c][8 m][16 rows][4] u8  GGUF qs bytes 32c + 4m .. (bits 2s, 2s + 1 of byte i: the low bits
//                              of value 128c + 32s + 4m + i)
//   [8 m][16 rows][4] u8       GGUF hmask bytes 4m .. (bit 4c + s of byte i: that value's high bit)
//   [16][16] int8 sub-block scales (-32..31), [16] fp16 d, 32 bytes of padding
constexpr size_t kQ3KR16BlockBytes = 1024 + 512 + 256 + 32 + 32;
// Q2_K_R16 (kQ2KR16BlockBytes): the qs lines as Q3_K_R16, [16][16] u8 GGUF scale bytes
//   (scale | min << 4), [16] fp16 d, [16] fp16 dmin
constexpr size_t kQ2KR16BlockBytes = 1024 + 256 + 32 + 32;
// IQ4_XS_R16 (kIQ4XSR16BlockBytes):
//   [8 ib][4 m][16 rows][4] u8  GGUF qs bytes 16ib + 4m .. (low nibbles: table indices of values
//                               32ib + 4m + i, high nibbles: of values 32ib + 16 + 4m + i)
//   [8][16] int8 sub-block scales (-32..31), [16] fp16 d, 32 bytes of padding
constexpr size_t kIQ4XSR16BlockBytes = 2048 + 128 + 32 + 32;

// F32_R16 / F16_R16: rows padded to a multiple of 16 (padding rows are zeros). Group g is
// [cols][16] values of the type (column k of rows 16g..16g+15: 64 B for F32, 32 B for F16):
// one sequential stream a group, and one vector load gives a column of 16 (or 8) rows,
// multiplied by a broadcast activation. Every kernel sums each (row, token) as one fused
// multiply-add chain over k = 0, 1, ..., cols - 1 from +0, so the results are bit-identical on
// every tier, batch size and tile (the scalar reference too). BF16 keeps its plain rows: its
// activations are rounded to bf16, which turns summation-order differences into rounding flips
// (one chain moved the tiny-quant-bf16 long-prompt logits 1.6e-2 from llama.cpp's, where the
// plain 8- and 16-lane partial sums stay within 5e-7; tests/model/f32_tiles_golden_test.cc).
inline bool is_float_r16(Layout l) { return l == Layout::kF32_R16 || l == Layout::kF16_R16; }
constexpr size_t float_r16_value_bytes(Layout l) { return l == Layout::kF32_R16 ? 4 : 2; }
inline size_t float_r16_group_bytes(Layout l, int64_t cols) {
  const size_t b = static_cast<size_t>(cols) * 16 * float_r16_value_bytes(l);
  return (b + 63) / 64 * 64;
}

inline bool is_r16(Layout l) {
  return l == Layout::kQ8_0_R16 || l == Layout::kQ4_K_R16 || l == Layout::kQ6_K_R16 || l == Layout::kQ4_0_R16 ||
         l == Layout::kIQ4_NL_R16 || l == Layout::kQ5_0_R16 || l == Layout::kQ4_1_R16 || l == Layout::kQ5_1_R16 ||
         l == Layout::kQ5_K_R16 || l == Layout::kQ3_K_R16 || l == Layout::kQ2_K_R16 || l == Layout::kIQ4_XS_R16 ||
         is_float_r16(l);
}

// Prepared activations for n_tok token rows of `cols` values. Only the fields a layout needs
// are set.
struct Act {
  int64_t n_tok = 0;
  int64_t cols = 0;
  const float* xf = nullptr;      // [n_tok][cols]: F32 as is, F16/BF16 rounded through 16 bits
  const int8_t* q8 = nullptr;     // [n_tok][cols]: Q8_0 values (Q8_0/Q4_0/Q5_0/IQ4_NL; Q8_1 for Q4_1/Q5_1)
  // Optional (Q5_0_R16 / Q5_1_R16 batches from kGgmlPanelMinTokens* tokens): q8 + 128 as u8
  // (q8 ^ 0x80), the unsigned operand of the ggml panel kernels (kGgmlPanelBlockBytes). Its
  // presence is what sends a matmul through those kernels.
  const uint8_t* q8u = nullptr;
  // Optional (Q5_0_R16 on the SIMD tiers, batches below their panel size): per token and 4
  // consecutive values, kActIlBias0 - 16 * (the 4 q8 values' sum), [n_tok][cols/4], for Q5_0's
  // values taken unsigned (w + 16, 0..31, which vpmaddubsw cannot saturate against a signed x):
  // sum(u * x) + term = kActIlBias0 + S.
  const int32_t* x16t = nullptr;
  const float* d8 = nullptr;      // [n_tok][cols/32]: Q8_0 scales (fp16-rounded)
  const int32_t* s8 = nullptr;    // [n_tok][cols/32]: sum of each block's q8
  const float* s1 = nullptr;      // [n_tok][cols/32]: Q8_1 block sums (Q4_1/Q5_1), quantize_act_q8_1_sums
  const BlockQ8_K* qk = nullptr;  // [n_tok][cols/256]: Q8_K blocks (for Q2_K..Q6_K, IQ4_XS weights)
  // Optional (Q8_0_R16 under AVX-512, n_tok >= kActIlMinTokens; avxvnni, n_tok >= kAvxVnniIlMinTokens): the same Q8_0 activations regrouped per tile
  // of kActIlTile tokens, so a token tile reads one sequential stream with one base pointer.
  // Tile i (tokens 8i..8i+7) is cols/32 block records of kActIlBlockBytes:
  //   [8 tok][32] int8 values, [8 tok] int32 kActIlBias0 - 128 * block sum, [8 tok] float scale.
  // kActIlBias0 (the bits of 1.5 * 2^23) lets the kernel turn its int32 sum S (|S| < 2^22 for
  // 32 products of |w| <= 128, |x| <= 127) into float exactly with one vsubps: the bits of
  // kActIlBias0 + S are the float 1.5 * 2^23 + S.
  // Slots of tokens >= n_tok in the last tile are unspecified (never read).
  const uint8_t* q8_il = nullptr;
  // Optional (Q8_0_R16 under the AVX2 tier, n_tok >= kActQ16MinTokens): q8 widened to int16,
  // [n_tok][cols], for the batched vpmaddwd kernel (kernels_avx2_panels.h, Avx2Q8Panel).
  const int16_t* q16 = nullptr;
};

// From this many tokens the AVX2 Q8_0_R16 matmul decodes each 16-row group to int16 once and
// runs vpmaddwd over int16 activations (below it, the per-pair vpmaddubsw kernel). Was 8 (tuned
// on a Zen 4 host forcing the avx2 tier); on a Zen 3 host (AVX2 only, the CPUs this tier really
// runs on) the 8-sequence decode step took x0.80 (Qwen2.5-0.5B shape) and x0.92 (SmolLM2 shape,
// noisy) of the time with the per-pair kernel (median of alternated old/new engine_bench --conc 8
// runs); at 16 tokens the two measured within noise, so the
// panel path keeps 16+ (prefill). Both paths are bit-identical to the scalar reference.
constexpr int64_t kActQ16MinTokens = 16;

// From this many tokens the avxvnni tier's Q8_0_R16 matmul reads Act::q8_il too
// (gemm_q8_0_r16_il_vnni); below it, the per-half kernel over Act::q8. Every batch size: on
// Zen 5 (1 thread, L2-resident 1024x896, CPU time) the 16-row kernel did 72-74 vs 58-60 GMAC/s
// at 1 token, 113-119 vs 84-88 at 2 and 143-147 vs 109-115 at 8 (kernels_bench BM_MatmulL2/0/n).
constexpr int64_t kAvxVnniIlMinTokens = 1;

constexpr int kActIlTile = 8;
constexpr int32_t kActIlBias0 = 0x4B400000;
constexpr float kActIlBias0F = 12582912.0f;  // 1.5 * 2^23, the float whose bits are kActIlBias0
constexpr size_t kActIlBlockBytes = kActIlTile * (32 + 4 + 4);
// Every batch size, one token included: the interleaved tile kernel prefetches its weight lines,
// which made 1-2 token matmuls streaming from DRAM ~1.3x faster than the plain Q8_0 tile. The
// preparation is one pass over n_tok x cols bytes. (A tier that does not read q8_il ignores it.)
constexpr int64_t kActIlMinTokens = 1;
inline size_t act_il_bytes(int64_t n_tok, int64_t cols) {
  return static_cast<size_t>((n_tok + kActIlTile - 1) / kActIlTile) * static_cast<size_t>(cols / 32) *
         kActIlBlockBytes;
}

// From this many tokens the AVX-512 Q4_0_R16 matmul (and IQ4_NL_R16's, and Q5_0_R16's in
// Q50Order::kBlock) reads Act::q8_il too: whole pairs of groups through the Q8_0_R16 prefill
// passes, the nibbles unpacked in registers
// (kernels_avx512_pair.h); below it, and for a matrix's last odd group, the per-group tiles
// over Act::q8.
constexpr int64_t kQ4IlMinTokens = 16;

// From this many tokens the AMX table's Q8_0_R16 / Q4_0_R16 matmuls use the tile kernels (a
// full 16-token tile; at 16 tokens, L2-resident 1024x896 Q8_0, 1 thread: 207 vs 198 GMAC/s for
// the avx512 kernel with its interleaved activations; below it the avx512 kernels run).
constexpr int64_t kAmxMinTokens = 16;

struct GemmArgs {
  const uint8_t* w;  // plain layouts: first row; R16: first 16-row group
  size_t stride;     // plain: bytes per row; R16: bytes per group
  int64_t row0;      // R16 only: index in the first group of the first output row (0..15)
  int64_t num_rows;  // rows to compute
  const Act* act;
  float* y;          // y[t*ldy + r], r < num_rows
  int64_t ldy;
  // Per-thread, 64-byte aligned scratch of at least panel_scratch_bytes(cols) bytes, where
  // batched kernels decode a 16-row panel once for all tokens. Owned by the caller.
  uint8_t* scratch = nullptr;
  // Whether the kernel may issue software prefetches of its weight stream (matrix.h
  // set_sw_prefetch decides; results do not depend on it). Honoured by the R16 kernels of the
  // avx512 tier (Q8_0 / Q4_0 tiles, K-quant records), every PrefetchSpread user (AVX2, avxvnni
  // and the panel kernels) and the F32 / F16 / BF16 decode tiles.
  bool sw_prefetch = true;
  // Q5_0 (plain and Q5_0_R16) in the block order instead of ggml's 8-lane order (matrix.h
  // Q50Order::kBlock): honoured by the scalar reference, every tier's plain Q5_0 kernel and the
  // AVX-512 / AVX-VNNI Q5_0_R16 kernels (AVX-512: Act::q8_il from kQ4IlMinTokens); the plain AVX2
  // tier's Q5_0_R16 kernels stay in ggml's order.
  bool q5_block = false;
};

// Benchmark hook (kernels_bench BM_PairTileAB): whether the avx512 tier's Q8_0_R16 kernel may
// run decode-sized batches of wide matrices through its two-group tile (on by default; results
// do not depend on it). Process-wide, for matmuls started afterwards.
void set_r16_pair_tile(bool on);

// Batches of the ggml-ordered R16 layouts (Q5_0_R16 under AVX-512 and plain AVX2, Q5_1_R16 under
// all three SIMD tiers; the code takes Q4_1_R16 too, but it is never sent there, see
// kGgmlPanelMinTokensMin) decode each 16-row group once
// into panel blocks of kGgmlPanelBlockBytes per 32 columns: [8 k4][16 rows][4] int8 values,
// [8 k4][16 rows] int32 kActIlBias0 - 128 * (the 4 values' sum), [16 rows] float scales, and
// [16 rows] float mins (Q4_1 / Q5_1 only; unused bytes for the others) (kernels_avx512_panels.h,
// kernels_avx2_ggml.h).
constexpr size_t kGgmlPanelBlockBytes = 512 + 512 + 64 + 64;
constexpr size_t kGgmlPanelMinsOffset = 512 + 512 + 64;
// The ymm tiers run a group's ggml panel in chunks of kGgmlPanelChunk blocks for spans of
// kGgmlPanelSpan tokens, whose 8 lane accumulators per 8-row half and, for Q4_1 / Q5_1, the
// half's sum of the mins' terms (kGgmlAccTokenFloats floats: [8 k4][8 lanes], [8 lanes]) follow
// the panel in the scratch (kernels_avx2_ggml.h gemm_ggml_panels_avx2 / for_panel_chunks; the
// Q5_0 x16t panels of q5u_panel_chunks, 576 bytes a block, use the same chunks, spans and
// accumulators).
constexpr int64_t kGgmlPanelChunk = 16;
constexpr int64_t kGgmlPanelSpan = 32;
constexpr int64_t kGgmlPanelWhole = 32;  // up to this many blocks a group is one chunk
constexpr int64_t kGgmlAccTokenFloats = 72;

// From these batch sizes the Q5_0_R16 matmuls run through the ggml panels (below
// them the per-tile kernels, whose unpacking per tile costs less than the panel's decode):
// kernels_bench BM_Matmul Q5_0 4864x896, 1 thread, Zen 5, same minutes: avx512 (against its
// 4-token tiles) at 12 / 16 / 32 / 64 tokens 498-508 / 654-663 / 1240-1295 /
// 2472-2555 us without the panels, 546-561 / 645-665 / 1017-1124 / 1803-2320 with them;
// avx2 (vpmaddubsw) still 1.07x slower at 64 tokens (5147-5245 -> 5393-5407), ~10 % faster at
// 512. The AMX tier runs the avx512 kernels for these layouts. Q5_0 below these sizes (and at
// every size on the AVX-VNNI tier): the x16t kernels (Act::x16t; kernels_avx2_q5u.h), whose panels hold only the unsigned values:
// on avxvnni they beat the ggml panels from 16 to 512 tokens (1153-1174 vs 1259-1284 us at 16,
// 33.3-33.7 vs 34.3-34.7 ms at 512), on avx2 they tie up to 64 and lose ~4 % at 512.
constexpr int64_t kGgmlPanelMinTokensAvx512 = 16;
constexpr int64_t kGgmlPanelMinTokensAvx2 = 128;
// Q5_1_R16 (unsigned 5-bit values, a min per block): the ggml panels on every SIMD tier from this
// many tokens (below it each token reads the records in place). kernels_bench BM_Matmul Q5_1
// 4864x896, 1 thread, Zen 5, alternated: avx2 16 / 64 / 512 tokens 1634-1748 / 6770-6882 /
// 53900-54850 us -> 1458-1492 / 5169-5173 / 39350-39540; avx-vnni 1772-1959 / 6734-6796 /
// 53450-53550 -> 1469-1718 / 5112-5210 / 39290-39920; avx512 at 16 within noise (787-808 vs
// 785-819), 512 26060-28010 -> 15550-16360; at 8 tokens the panel lost on avx512 (562-621 vs
// 402-413). Q4_1_R16 stays in place at every size: its nibbles need no unpacking beyond a mask
// or shift and go into vpmaddubsw / vpdpbusd unsigned as they are, so the panel's term add and
// vsubps cost more than they save (avx512 at 16 / 64 / 512 tokens 495-516 / 1893-1947 /
// 15230-15560 in place against 772-775 / 2174-2197 / 18000-18360 through the panels; the ymm
// tiers tied or lost ~10 %). The panel code takes the mins of both (kGgmlPanelMinsOffset).
constexpr int64_t kGgmlPanelMinTokensMin = 16;

// Bytes of an AVX-512 lane panel (kernels_avx512_lanepanels.h) per 16 rows and 256 columns.
constexpr size_t kLanePanelBlockBytes = 8 * 1216;

// Scratch a kernel may use for one 16-row panel of a matrix with `cols` columns.
inline size_t panel_scratch_bytes(int64_t cols) {
  const size_t r16 = r16_group_bytes(cols);
  const size_t kq = static_cast<size_t>(cols / 256 + 1) * 5760;  // K-quant panels (KPanel, Avx2KPanel)
  const size_t lane = static_cast<size_t>(cols / 256 + 1) * kLanePanelBlockBytes;  // Q2_K/Q3_K/Q5_K/IQ4_XS
  const size_t q16 = 12800;  // AVX2 int16 Q8_0 chunk panel + accumulators (kernels_avx2_panels.h)
  const size_t ggml = static_cast<size_t>(cols / 32) * kGgmlPanelBlockBytes + kGgmlPanelSpan * 2 * kGgmlAccTokenFloats * 4;
  const size_t m = std::max({r16, kq, ggml, lane});
  return (m > q16 ? m : q16) + 64;
}

using GemmFn = void (*)(const GemmArgs&);

// Activation preparation; SIMD versions must be bit-identical to the scalar ones.
struct ActFns {
  void (*round_f16)(const float* x, float* out, int64_t n);   // x -> fp16 -> float
  void (*round_bf16)(const float* x, float* out, int64_t n);  // x -> bf16 -> float
  // See quants.h: quantize_act_q8_0 / quantize_act_q8_k.
  void (*q8_0)(const float* x, int64_t n, int8_t* qs, float* d, int32_t* sum);
  void (*q8_k)(const float* x, int64_t n, BlockQ8_K* y);
};

struct KernelTable {
  GemmFn gemm[static_cast<int>(Layout::kCount)];
  ActFns act;
};

const KernelTable& scalar_kernels();
// Null when the build or the CPU lacks the ISA (callers check detected ISA first).
const KernelTable* avx2_kernels();
// The AVX2 table with AVX-VNNI (vpdpbusd on ymm) kernels where they exist (Q8_0_R16,
// Q4_0_R16); needs
// AVX2 + FMA + F16C + AVX-VNNI.
const KernelTable* avxvnni_kernels();
const KernelTable* avx512_kernels();
// The AVX-512 table with AMX int8 tile GEMMs for Q8_0_R16 and Q4_0_R16 from kAmxMinTokens
// tokens on (below: the avx512 kernels; bit-identical either way, kernels_amx.cc). Null unless
// the CPU has the avx512 tier and AMX int8, and Linux granted the tile permission.
const KernelTable* amx_kernels();
// The same with the tile kernels at every batch size (for tests of 1..15-token tiles).
const KernelTable* amx_tile_kernels();

}  // namespace ts::tensor::kern
