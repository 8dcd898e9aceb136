// Weight matrices prepared for fast mat-muls, and the activation rounding ggml applies.
//
// A Matrix is [rows][cols] in one GGUF type, row-major with cols innermost (GGUF shape
// {cols, rows}). create() may repack the rows into a faster layout (PERFORMANCE.md: R16
// interleaving) held in an owned, 64-byte aligned arena; otherwise it keeps a pointer into the
// caller's memory (the mmap), which must then outlive the Matrix. When the active ISA is AVX2 or
// AVX-512, every quantized type is repacked (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL: same bytes per
// weight; Q4_K, Q5_K, Q6_K, Q2_K, Q3_K, IQ4_XS: +0-6 % for their sub-block scales decoded to a
// byte each; one layout for both tiers, each with its own kernels), F32 / F16 are interleaved by
// column (16 rows' values of one column side by side, same bytes per weight), BF16 rows are
// copied as they are into the same huge-page arena, and the Matrix no longer reads `data` after
// create(); repacked() / owns_weights() tell which. Without repacking (MatrixOptions::allow_repack
// off, no arena, the scalar tier) every type keeps its GGUF layout in the caller's memory, with
// per-row kernels.
//
// matmul() computes y[t][r] = sum_k W[r][k] * x[t][k] for t < n_tok, reading every weight row
// once for all n_tok token columns, split over the pool's threads by rows. Activations are
// rounded the way ggml's CPU backend does, so results match llama.cpp closely:
//   F32 weights: x used as is;  F16 weights: x rounded to fp16;  BF16: x rounded to bf16;
//   Q8_0 / Q4_0 / Q5_0 / IQ4_NL weights: x quantized to Q8_0 blocks (32 values, fp16 scale);
//   Q4_1 / Q5_1 weights: Q8_1 blocks (the Q8_0 values plus fp16 d*sum for the block minimum);
//   Q2_K..Q6_K / IQ4_XS weights: x quantized to Q8_K blocks (256 values, float scale).
// Q4_1, Q5_0 and Q5_1 also sum in ggml's x86 float order on every ISA, Q4_0 and IQ4_NL in
// llama.cpp's x86 order for them (each block exactly, one FMA: it repacks both), bit-identical
// across ISAs and layouts: the quantized golden models are sensitive to last-bit differences. Repacked
// F32 / F16 sum each output as one fused multiply-add chain over the columns in order
// (bit-identical across ISAs too).
// The kernel is chosen at start-up by CPUID (AVX-512 VNNI, AVX2, scalar reference); every
// path gives the same result up to float summation order. Within one ISA and layout a token's
// output row is bit-identical whatever the batch: n_tok, the token's position in it, and the
// kernel variant the batch size selects do not change it (greedy decoding across batch
// compositions and speculative verification rely on this; tests/tensor/batch_invariance_test).
//
// Thread-safety: const methods are safe to call concurrently; matmul uses the pool it is given
// (whose run() must not be re-entered).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"
#include "core/thread_pool.h"
#include "tensor/dtype.h"

namespace ts::tensor {

// Kernel tiers, in order. kAmx is the avx512 tier with AMX int8 tile GEMMs for prefill-sized
// Q8_0 / Q4_0 matmuls (kernels_amx.cc). It is available only where the CPU has AMX int8 and
// Linux granted the tile permission (cpu_features.h), else set_isa(kAmx) clamps to avx512; and it
// is opt-in (set_isa / --isa amx), never detected_isa(): on a Sapphire Rapids-class host it
// measured x0.89-1.34 of the avx512 matmul time by shape, prefill at parity (Qwen2.5-0.5B shape)
// or x1.10 slower (SmolLM2-135M shape), see kernels_amx.cc.
// kAvxVnni is AVX2 plus AVX-VNNI (vpdpbusd on ymm) kernels where they exist; the AVX2 layouts.
// It is detected only on CPUs with AVX-VNNI and no AVX-512 tier (Alder Lake+, Sierra Forest),
// and may be forced below kAvx512 only where the CPU has AVX-VNNI (else it clamps to kAvx2).
enum class Isa { kScalar = 0, kAvx2 = 1, kAvxVnni = 2, kAvx512 = 3, kAmx = 4 };
// Best default ISA for this CPU (cached; never kAmx), the highest tier set_isa accepts here
// (kAmx where usable), and an override for tests/benchmarks (clamped to what the CPU has). set_isa affects matmuls and Matrix::create calls started afterwards,
// process-wide (so force it before loading a model: layouts are chosen per ISA at load).
Isa detected_isa();
Isa highest_isa();
Isa active_isa();
void set_isa(Isa isa);
const char* isa_name(Isa isa);
// Whether set_isa(isa) runs that tier on this CPU (not clamped).
bool isa_available(Isa isa);

// What a requested tier resolves to on this CPU. Pure (no environment access: the caller reads
// --isa / TOKENSERVE_ISA once at start-up and applies `isa` with set_isa).
struct IsaChoice {
  Isa isa = Isa::kScalar;  // the tier to use (never above highest_isa())
  std::string warning;     // non-empty when the request was clamped down, saying why
};
// name: "scalar", "avx2", "avxvnni", "avx512", "amx" (case-insensitive), or empty for the best tier.
// Errors: kInvalidArgument naming the accepted values.
Result<IsaChoice> resolve_isa(std::string_view name);
// One line for start-up logs: "kernels: avx512 (CPU: avx512 vnni, no amx)".
std::string isa_summary();

// Software prefetch in the repacked (R16) mat-mul kernels. kOn: every kernel prefetches its
// weight stream as it was tuned to (on Intel hosts); kOff: none does; kAuto (the default): kOn
// except where a vendor rule says the hardware prefetcher streams better alone. The rule today:
// on AMD CPUs (Zen) the Q8_0_R16 kernels issue no software prefetch at decode-sized batches
// (avx512 tier: up to kSwPrefetchOffAvx512Tokens tokens, avxvnni: up to
// kSwPrefetchOffAvxVnniTokens): each thread reads one sequential range that Zen's prefetchers
// follow on their own, and the prefetch instructions took load slots from the vpdpbusd loop
// (measured figures: matrix.cc). Results are bit-identical in every mode (prefetches change
// no arithmetic). The initial mode comes from TOKENSERVE_SW_PREFETCH=auto|on|off, read once
// (an unknown value is reported on stderr and ignored); set_sw_prefetch overrides it for
// matmuls started afterwards, process-wide (for A/B measurements and tests).
enum class SwPrefetch { kAuto = 0, kOn = 1, kOff = 2 };
inline constexpr int64_t kSwPrefetchOffAvx512Tokens = 4;
inline constexpr int64_t kSwPrefetchOffAvxVnniTokens = 3;
void set_sw_prefetch(SwPrefetch mode);
SwPrefetch sw_prefetch_mode();
const char* sw_prefetch_name(SwPrefetch mode);
// "auto", "on", "off" (case-insensitive). Errors: kInvalidArgument naming the accepted values.
Result<SwPrefetch> parse_sw_prefetch(std::string_view name);
// Whether a matmul of a repacked matrix of `type` under `isa` with n_tok tokens issues software
// prefetches in the current mode on this CPU (kernels that never prefetch ignore the answer).
bool sw_prefetch_enabled(Isa isa, DType type, int64_t n_tok);

// Q5_0's summation order. kGgml (the default): ggml's x86 8-lane float order, a float step per 4
// values, bit for bit llama.cpp's Q5_0 dot. kBlock (opt-in, TOKENSERVE_Q5_0_ORDER=block): each
// 32-block's products summed exactly in int32 and added with one FMA (the order Q8_0, Q4_0 and
// IQ4_NL follow here), which the AVX-512, AMX and AVX-VNNI tiers run through their Q4_0_R16
// kernels: one vpdpbusd per 4 values and token instead of vpdpbusd + vsubps + FMA, ~1.5-2x the
// Q5_0 matmul speed from 2 tokens on (the commits that added it have the figures), for the
// files whose 896- and 576-wide rows fall back to Q5_0 (Qwen2.5 / SmolLM2 Q4_K_M). The price:
// logits no longer llama.cpp's bit for bit; they differ by rounding (~1e-6), and where that
// flips one activation's int8 rounding by more (tiny-quant-q5_0: max 0.17 against its golden
// reference, README bound 0.05). Followed by the scalar reference and every tier's plain Q5_0
// kernel; the plain AVX2 tier's Q5_0_R16 kernels stay in ggml's order (its int16 sums would
// overflow with 5-bit values). Read once from the environment (an unknown value is reported on
// stderr and ignored); set_q5_0_order overrides it for matmuls started afterwards, process-wide
// (benchmarks, tests).
enum class Q50Order { kGgml = 0, kBlock = 1 };
void set_q5_0_order(Q50Order order);
Q50Order q5_0_order();
// "ggml" or "block". Errors: kInvalidArgument naming the accepted values.
Result<Q50Order> parse_q5_0_order(std::string_view name);

// Creation options (additions to the original API; defaults keep its behaviour).
struct MatrixOptions {
  // Allow a repacked layout (16-row interleave of every type but BF16 when the active ISA is
  // AVX2 or AVX-512; kernels.h has the byte layouts) and, for BF16, a copy of the rows in their
  // GGUF layout, in the owned huge-page arena (a file mapping's 4 KB pages stop the hardware
  // prefetcher at every page).
  // false keeps the GGUF layout (pointing into the caller's memory); used by tests/benches.
  bool allow_repack = true;
  // The caller's `data` lies in a read-only file mapping (the GGUF mmap) that nothing else reads
  // afterwards: once the rows are repacked into the owned arena, the whole pages inside the
  // tensor's bytes are released with madvise(MADV_DONTNEED), so no second copy of the weights
  // stays resident (they would fault back in from the file if touched). No effect when the
  // matrix keeps reading the caller's memory. Never set it for heap or anonymous memory:
  // DONTNEED zeroes that.
  bool release_source = false;
  // Threads that repack (or copy) a large matrix into its arena, each a contiguous run of
  // 16-row groups, so the transpose and the first touch of the arena's pages use the cores a
  // loading server has idle anyway. 0 = the CPUs this process may run on (sched_getaffinity),
  // capped at 32; matrices under kParallelRepackBytes always use one. The bytes are the same
  // for any count. Measured on a 2-core Zen 5 guest: a 151936x896 Q8_0 matrix 132 -> 67 ms
  // (warm arena pages), F16 104 -> 57 ms; whole-model load there moved within noise (the
  // guest's page faults, taken in the kernel, dominate it).
  int repack_threads = 0;
};
// Arena size from which Matrix::create splits the repack over threads (MatrixOptions).
inline constexpr size_t kParallelRepackBytes = size_t{2} << 20;

// One input's activations, rounded / quantized at most once per form (fp16, bf16, Q8_0 with its
// AVX-512 tile interleave, Q8_1 sums, Q8_K) and shared by every Matrix that multiplies the same
// input: Q/K/V after the attention norm share one quantization, gate/up after the FFN norm
// another (PERFORMANCE.md). A form is made by the first matmul that needs it and reused by the
// later ones; results are identical to Matrix::matmul on the raw floats (the preparation is
// deterministic and bit-identical across ISAs).
//
// The input is borrowed: it must stay valid and unchanged until the next reset() (after a change
// of its contents call reset() again, or stale forms are used). Buffers are kept and grow to the
// largest input, so a long-lived PreparedActivations allocates nothing in the steady state.
// Thread-safety: one user at a time (a forward pass); matmul may split the preparation of a form
// over the pool it is given.
class PreparedActivations {
 public:
  PreparedActivations();
  ~PreparedActivations();
  PreparedActivations(PreparedActivations&&) noexcept;
  PreparedActivations& operator=(PreparedActivations&&) noexcept;

  // x: [n_tok][cols] floats (row stride cols). Forgets every prepared form.
  void reset(const float* x, int64_t n_tok, int64_t cols);
  const float* data() const;
  int64_t n_tok() const;
  int64_t cols() const;
  // Forms made since the last reset() (for tests: Q/K/V must make the Q8_0 form once).
  int num_prepared() const;

  struct Impl;  // opaque outside activations.cc

 private:
  friend class Matrix;
  std::unique_ptr<Impl> impl_;
};

class Matrix {
 public:
  Matrix();
  ~Matrix();
  Matrix(Matrix&&) noexcept;
  Matrix& operator=(Matrix&&) noexcept;

  // Errors: kUnimplemented for a type without kernels; kInvalidArgument when cols is not a
  // multiple of the type's block size.
  static Result<Matrix> create(DType type, const void* data, int64_t rows, int64_t cols);
  static Result<Matrix> create(DType type, const void* data, int64_t rows, int64_t cols,
                               const MatrixOptions& options);

  DType type() const;
  int64_t rows() const;
  int64_t cols() const;
  // Bytes of weights read by one matmul (for bandwidth reports).
  size_t weight_bytes() const;

  // x: [n_tok][cols] floats (row stride cols); y: [n_tok][rows] floats (row stride rows);
  // x and y must not overlap. `pool` may be null (single-threaded); small products run on the
  // calling thread anyway. Scratch (quantized activations on the calling thread, one decoded
  // 16-row panel per worker) lives in thread-local buffers that grow to the largest request
  // and are reused, so the steady state allocates nothing.
  void matmul(const float* x, int64_t n_tok, float* y, ThreadPool* pool) const;
  // Same, computing only rows [row_begin, row_end) into y[t][r - row_begin] (stride row_end-row_begin).
  void matmul_rows(const float* x, int64_t n_tok, float* y, int64_t row_begin, int64_t row_end,
                   ThreadPool* pool) const;

  // Same as matmul(x.data(), x.n_tok(), y, pool) / matmul_rows(...), taking this type's
  // rounded or quantized activations from `x` when an earlier matmul made them (else making them
  // now, kept in x for the next matrix). x.cols() must equal cols() (a broken invariant otherwise).
  void matmul(PreparedActivations& x, float* y, ThreadPool* pool) const;
  void matmul_rows(PreparedActivations& x, float* y, int64_t row_begin, int64_t row_end, ThreadPool* pool) const;
  // Makes the activation forms a matmul of this matrix with x.n_tok() tokens reads (what the
  // first matmul(x, ...) would make), split over `pool` like matmul does; a later matmul with x
  // then only reads them. For callers that time or place the preparation themselves.
  void prepare(PreparedActivations& x, ThreadPool* pool) const;

  // Row r as floats (cols values): embedding lookup.
  void dequantize_row(int64_t r, float* out) const;

  // True when create() repacked the weights into an owned interleaved layout.
  bool repacked() const;
  // True when the weights live in the owned arena (repacked, or BF16 rows copied there), so
  // the caller's memory is no longer read after create().
  bool owns_weights() const;
  // Bytes of weights this matrix keeps resident: the owned arena when it has one, else the rows
  // in the caller's memory (weight_bytes()); 0 for an empty (default-constructed) Matrix.
  size_t resident_bytes() const;
  // Bytes of the caller's memory given back with MatrixOptions::release_source (whole pages).
  size_t released_source_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Row-level helpers over raw GGUF bytes (reference semantics; used by tests, the writer and
// quantize). n must be a multiple of the type's block size.
void dequantize_row(DType type, const void* src, float* dst, int64_t n);
// Quantizes n floats into `type`; only for types where has_row_quantizer() is true
// (F32/F16/BF16/Q8_0/Q4_0/Q4_K/Q6_K; other types are a broken invariant). Q4_K/Q6_K use a simple
// round-to-nearest search, not necessarily bit-identical to llama-quantize.
void quantize_row(DType type, const float* src, void* dst, int64_t n);
bool has_row_quantizer(DType type);

}  // namespace ts::tensor
