#include "tensor/matrix.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstring>
#include <string>
#include <vector>

#include "core/check.h"
#include "tensor/activations.h"
#include "tensor/cpu_features.h"
#include "tensor/fp16.h"
#include "tensor/kernels.h"
#include "tensor/quants.h"
#include "tensor/repack.h"
#include "tensor/weight_arena.h"

namespace ts::tensor {

// ---------------------------------------------------------------------------------------------
// ISA selection

namespace {

std::atomic<int>& active_isa_slot() {
  static std::atomic<int> slot{static_cast<int>(detected_isa())};
  return slot;
}

const kern::KernelTable& kernels_for(Isa isa) {
  if (isa == Isa::kAmx) {
    if (const kern::KernelTable* t = kern::amx_kernels()) return *t;
  }
  if (isa >= Isa::kAvx512) {
    if (const kern::KernelTable* t = kern::avx512_kernels()) return *t;
  }
  if (isa == Isa::kAvxVnni) {
    if (const kern::KernelTable* t = kern::avxvnni_kernels()) return *t;
  }
  if (isa >= Isa::kAvx2) {
    if (const kern::KernelTable* t = kern::avx2_kernels()) return *t;
  }
  return kern::scalar_kernels();
}

// The kernel for `layout` under `isa`; an ISA table may leave a layout to the scalar reference
// (e.g. AVX2 for a layout repacked for AVX-512 before set_isa lowered the ISA).
kern::GemmFn gemm_for(Isa isa, kern::Layout layout) {
  kern::GemmFn fn = kernels_for(isa).gemm[static_cast<int>(layout)];
  return fn != nullptr ? fn : kern::scalar_kernels().gemm[static_cast<int>(layout)];
}

// The R16 layout a type is repacked into under AVX2 / AVX-512, or kCount for none.
kern::Layout r16_layout(DType t) {
  switch (t) {
    case DType::kQ8_0: return kern::Layout::kQ8_0_R16;
    case DType::kQ4_K: return kern::Layout::kQ4_K_R16;
    case DType::kQ6_K: return kern::Layout::kQ6_K_R16;
    case DType::kQ4_0: return kern::Layout::kQ4_0_R16;
    case DType::kIQ4_NL: return kern::Layout::kIQ4_NL_R16;
    case DType::kQ5_0: return kern::Layout::kQ5_0_R16;
    case DType::kQ4_1: return kern::Layout::kQ4_1_R16;
    case DType::kQ5_1: return kern::Layout::kQ5_1_R16;
    case DType::kQ5_K: return kern::Layout::kQ5_K_R16;
    case DType::kQ3_K: return kern::Layout::kQ3_K_R16;
    case DType::kQ2_K: return kern::Layout::kQ2_K_R16;
    case DType::kIQ4_XS: return kern::Layout::kIQ4_XS_R16;
    case DType::kF32: return kern::Layout::kF32_R16;
    case DType::kF16: return kern::Layout::kF16_R16;
    default: return kern::Layout::kCount;
  }
}

}  // namespace

// The AMX tier is usable: the CPU has it and Linux granted the tile permission.
bool amx_usable() {
  static const bool ok = cpu_features().avx512_tier() && cpu_features().amx_cpu() && kern::amx_kernels() != nullptr;
  return ok;
}

Isa detected_isa() {
  static const Isa isa = [] {
    const CpuFeatures& f = cpu_features();
    // Not kAmx even where it is usable: measured no faster than avx512 (matrix.h), so opt-in.
    if (f.avx512_tier()) return Isa::kAvx512;
    if (f.avx2_tier() && f.avx_vnni) return Isa::kAvxVnni;
    if (f.avx2_tier()) return Isa::kAvx2;
    return Isa::kScalar;
  }();
  return isa;
}

Isa active_isa() { return static_cast<Isa>(active_isa_slot().load(std::memory_order_relaxed)); }

Isa highest_isa() { return amx_usable() ? Isa::kAmx : detected_isa(); }

void set_isa(Isa isa) {
  const Isa best = highest_isa();
  if (static_cast<int>(isa) > static_cast<int>(best)) isa = best;
  if (isa == Isa::kAvxVnni && !cpu_features().avx_vnni) isa = Isa::kAvx2;  // e.g. an AVX-512 CPU without it
  active_isa_slot().store(static_cast<int>(isa), std::memory_order_relaxed);
}

bool isa_available(Isa isa) {
  if (static_cast<int>(isa) > static_cast<int>(highest_isa())) return false;
  return isa != Isa::kAvxVnni || cpu_features().avx_vnni;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvxVnni: return "avxvnni";
    case Isa::kAvx512: return "avx512";
    case Isa::kAmx: return "amx";
  }
  return "unknown";
}

Result<IsaChoice> resolve_isa(std::string_view name) {
  std::string lower;
  for (char c : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const Isa best = detected_isa();
  if (lower.empty()) return IsaChoice{best, ""};
  Isa want = Isa::kScalar;
  bool found = false;
  for (Isa i : {Isa::kScalar, Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512, Isa::kAmx}) {
    if (lower == isa_name(i)) {
      want = i;
      found = true;
    }
  }
  if (!found) {
    return invalid_argument("unknown ISA '" + std::string(name) + "' (expected scalar, avx2, avxvnni, avx512 or amx)");
  }
  if (isa_available(want)) return IsaChoice{want, ""};
  if (want == Isa::kAvxVnni && static_cast<int>(best) >= static_cast<int>(Isa::kAvx2)) {
    // AVX2-only CPUs (Zen 2/3) and AVX-512 CPUs without the VEX form (Zen 4) both land here.
    return IsaChoice{Isa::kAvx2, "ISA avxvnni requested but this CPU has no AVX-VNNI; using avx2"};
  }
  std::string why;
  if (want == Isa::kAmx && cpu_features().amx_cpu()) {
    why = cpu_features().avx512_tier() ? amx_permission().why : "this CPU has no avx512 tier under its AMX";
  } else {
    why = std::string("this CPU has no ") + isa_name(want) + " tier";
  }
  return IsaChoice{best, std::string("ISA ") + isa_name(want) + " requested but " + why + "; using " + isa_name(best)};
}

std::string isa_summary() {
  const CpuFeatures& f = cpu_features();
  std::string cpu = f.avx512_tier() ? "avx512 vnni" : (f.avx2_tier() ? "avx2" : "no avx2");
  if (f.avx_vnni) cpu += ", avx-vnni";
  if (f.avx512bf16) cpu += ", avx512 bf16";
  if (!f.amx_tile || !f.amx_int8) {
    cpu += ", no amx";
  } else if (amx_usable()) {
    cpu += active_isa() == Isa::kAmx ? ", amx" : ", amx (opt-in: --isa amx)";
  } else {
    cpu += ", amx unusable: " + (f.amx_cpu() ? amx_permission().why : std::string("the OS does not enable its state"));
  }
  return std::string("kernels: ") + isa_name(active_isa()) + " (CPU: " + cpu + ")" +
         (q5_0_order() == Q50Order::kBlock ? ", Q5_0 in block order (TOKENSERVE_Q5_0_ORDER)" : "");
}

// ---------------------------------------------------------------------------------------------
// Row helpers

void dequantize_row(DType type, const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  switch (type) {
    case DType::kF32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        dst[i] = fp16_to_fp32(h);
      }
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        dst[i] = bf16_to_fp32(h);
      }
      return;
    case DType::kQ8_0: dequantize_row_q8_0(static_cast<const BlockQ8_0*>(src), dst, n); return;
    case DType::kQ4_0: dequantize_row_q4_0(static_cast<const BlockQ4_0*>(src), dst, n); return;
    case DType::kQ4_K: dequantize_row_q4_k(static_cast<const BlockQ4_K*>(src), dst, n); return;
    case DType::kQ6_K: dequantize_row_q6_k(static_cast<const BlockQ6_K*>(src), dst, n); return;
    case DType::kQ4_1: dequantize_row_q4_1(static_cast<const BlockQ4_1*>(src), dst, n); return;
    case DType::kQ5_0: dequantize_row_q5_0(static_cast<const BlockQ5_0*>(src), dst, n); return;
    case DType::kQ5_1: dequantize_row_q5_1(static_cast<const BlockQ5_1*>(src), dst, n); return;
    case DType::kQ2_K: dequantize_row_q2_k(static_cast<const BlockQ2_K*>(src), dst, n); return;
    case DType::kQ3_K: dequantize_row_q3_k(static_cast<const BlockQ3_K*>(src), dst, n); return;
    case DType::kQ5_K: dequantize_row_q5_k(static_cast<const BlockQ5_K*>(src), dst, n); return;
    case DType::kIQ4_NL: dequantize_row_iq4_nl(static_cast<const BlockIQ4_NL*>(src), dst, n); return;
    case DType::kIQ4_XS: dequantize_row_iq4_xs(static_cast<const BlockIQ4_XS*>(src), dst, n); return;
    default: break;
  }
  TS_CHECK(false, "dequantize_row: type without kernels");
}

bool has_row_quantizer(DType type) {
  switch (type) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_K:
    case DType::kQ6_K: return true;
    default: return false;
  }
}

void quantize_row(DType type, const float* src, void* dst, int64_t n) {
  auto* p = static_cast<uint8_t*>(dst);
  switch (type) {
    case DType::kF32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = fp32_to_fp16(src[i]);
        std::memcpy(p + 2 * i, &h, 2);
      }
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = fp32_to_bf16(src[i]);
        std::memcpy(p + 2 * i, &h, 2);
      }
      return;
    case DType::kQ8_0: quantize_row_q8_0(src, static_cast<BlockQ8_0*>(dst), n); return;
    case DType::kQ4_0: quantize_row_q4_0(src, static_cast<BlockQ4_0*>(dst), n); return;
    case DType::kQ4_K: quantize_row_q4_k(src, static_cast<BlockQ4_K*>(dst), n); return;
    case DType::kQ6_K: quantize_row_q6_k(src, static_cast<BlockQ6_K*>(dst), n); return;
    default: break;
  }
  TS_CHECK(false, "quantize_row: type without kernels");
}

// ---------------------------------------------------------------------------------------------
// Matrix

namespace {

// Releases the whole pages inside [p, p + n) (a read-only file mapping); returns the bytes.
size_t release_pages(const void* p, size_t n) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + page - 1) & ~(page - 1);
  const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + n) & ~(page - 1);
  if (e <= b) return 0;
  if (madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED) != 0) return 0;
  return e - b;
}

kern::Layout plain_layout(DType t) {
  switch (t) {
    case DType::kF32: return kern::Layout::kF32;
    case DType::kF16: return kern::Layout::kF16;
    case DType::kBF16: return kern::Layout::kBF16;
    case DType::kQ8_0: return kern::Layout::kQ8_0;
    case DType::kQ4_0: return kern::Layout::kQ4_0;
    case DType::kQ4_K: return kern::Layout::kQ4_K;
    case DType::kQ6_K: return kern::Layout::kQ6_K;
    case DType::kQ4_1: return kern::Layout::kQ4_1;
    case DType::kQ5_0: return kern::Layout::kQ5_0;
    case DType::kQ5_1: return kern::Layout::kQ5_1;
    case DType::kQ2_K: return kern::Layout::kQ2_K;
    case DType::kQ3_K: return kern::Layout::kQ3_K;
    case DType::kQ5_K: return kern::Layout::kQ5_K;
    case DType::kIQ4_NL: return kern::Layout::kIQ4_NL;
    case DType::kIQ4_XS: return kern::Layout::kIQ4_XS;
    default: return kern::Layout::kCount;
  }
}

// Tokens per activation panel of a blocked (prefill) matmul: ~256 KB of activations (L2 holds
// them beside the weights streaming through; int8 for the quantized layouts, float for F32 /
// F16 / BF16, whose panels are 4x fewer tokens), a multiple of the AVX-512 activation tile.
// Float layouts, wide F16 prefill 511 tokens (1024 columns), same minutes: 256-token panels
// (1 MB of float activations re-read from L3 for every 4-row tile) against 64-token ones, see
// the commit that introduced the float case.
int64_t token_panel(int64_t cols, int64_t act_bytes) {
  const int64_t p = (int64_t{256} << 10) / std::max<int64_t>(cols * act_bytes, 1);
  return std::clamp<int64_t>(p / kern::kActIlTile * kern::kActIlTile, act_bytes > 1 ? 8 : 32, 256);
}

// Below this many multiply-adds a matmul runs on the calling thread only.
constexpr int64_t kMinParallelWork = int64_t{1} << 16;

}  // namespace

struct Matrix::Impl {
  DType type = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  kern::Layout layout = kern::Layout::kF32;
  const uint8_t* data = nullptr;  // rows (plain) or 16-row groups (R16)
  size_t stride = 0;              // bytes per row (plain) or per group (R16)
  size_t row_bytes = 0;           // bytes per row in the GGUF layout
  Arena arena{nullptr, ArenaFree{}};
  size_t arena_bytes = 0;
  size_t released = 0;  // source bytes released with MADV_DONTNEED
};

Matrix::Matrix() = default;
Matrix::~Matrix() = default;
Matrix::Matrix(Matrix&&) noexcept = default;
Matrix& Matrix::operator=(Matrix&&) noexcept = default;

Result<Matrix> Matrix::create(DType type, const void* data, int64_t rows, int64_t cols) {
  return create(type, data, rows, cols, MatrixOptions{});
}

Result<Matrix> Matrix::create(DType type, const void* data, int64_t rows, int64_t cols,
                              const MatrixOptions& options) {
  const kern::Layout layout = plain_layout(type);
  auto traits = type_traits(static_cast<uint32_t>(type));
  if (layout == kern::Layout::kCount || !traits) {
    return unimplemented("no mat-mul kernels for type " + type_name(static_cast<uint32_t>(type)));
  }
  if (rows <= 0 || cols <= 0) {
    return invalid_argument("matrix shape must be positive, got " + std::to_string(rows) + "x" +
                            std::to_string(cols));
  }
  if (cols % traits->block_size != 0) {
    return invalid_argument("matrix of type " + std::string(traits->name) + " has " + std::to_string(cols) +
                            " columns, not a multiple of " + std::to_string(traits->block_size));
  }
  Matrix m;
  m.impl_ = std::make_unique<Impl>();
  Impl& im = *m.impl_;
  im.type = type;
  im.rows = rows;
  im.cols = cols;
  im.layout = layout;
  im.row_bytes = row_bytes(*traits, cols);
  im.data = static_cast<const uint8_t*>(data);
  im.stride = im.row_bytes;
  const kern::Layout r16 = r16_layout(type);
  if (r16 != kern::Layout::kCount && options.allow_repack && active_isa() >= Isa::kAvx2) {
    const size_t gbytes = r16_group_stride(r16, cols);
    const size_t total = gbytes * static_cast<size_t>((rows + 15) / 16);
    Arena arena = make_arena(total);
    if (arena) {  // otherwise keep the plain layout
      const int64_t groups = (rows + 15) / 16;
      uint8_t* dst = arena.get();
      const uint8_t* src = im.data;
      const size_t rb = im.row_bytes;
      split_runs(groups, repack_thread_count(options, total, groups), [&](int64_t g0, int64_t g1) {
        const int64_t r0 = g0 * 16, r1 = std::min(g1 * 16, rows);
        if (r1 > r0) repack_r16(r16, src + static_cast<size_t>(r0) * rb, rb, r1 - r0, cols, dst + static_cast<size_t>(g0) * gbytes);
      });
      im.data = arena.get();
      im.stride = gbytes;
      im.layout = r16;
      im.arena = std::move(arena);
      im.arena_bytes = total;
      if (options.release_source) im.released = release_pages(data, im.row_bytes * static_cast<size_t>(rows));
    }
  } else if (type == DType::kBF16 && options.allow_repack && active_isa() >= Isa::kAvx2) {
    // BF16 keeps its rows (kernels.h says why, beside F32_R16), copied into the huge-page arena
    // (MatrixOptions).
    const size_t total = im.row_bytes * static_cast<size_t>(rows);
    Arena arena = make_arena(total);
    if (arena) {
      uint8_t* dst = arena.get();
      const uint8_t* src = im.data;
      const size_t rb = im.row_bytes;
      split_runs(rows, repack_thread_count(options, total, rows), [&](int64_t r0, int64_t r1) {
        std::memcpy(dst + static_cast<size_t>(r0) * rb, src + static_cast<size_t>(r0) * rb, static_cast<size_t>(r1 - r0) * rb);
      });
      im.data = arena.get();
      im.arena = std::move(arena);
      im.arena_bytes = total;
      if (options.release_source) im.released = release_pages(data, total);
    }
  }
  return m;
}

DType Matrix::type() const { return impl_->type; }
int64_t Matrix::rows() const { return impl_->rows; }
int64_t Matrix::cols() const { return impl_->cols; }
size_t Matrix::weight_bytes() const { return impl_->row_bytes * static_cast<size_t>(impl_->rows); }
bool Matrix::repacked() const { return kern::is_r16(impl_->layout); }
bool Matrix::owns_weights() const { return impl_ && impl_->arena != nullptr; }
size_t Matrix::resident_bytes() const {
  if (!impl_) return 0;  // an empty (default-constructed) matrix
  return owns_weights() ? impl_->arena_bytes : weight_bytes();
}
size_t Matrix::released_source_bytes() const { return impl_ ? impl_->released : 0; }

void Matrix::dequantize_row(int64_t r, float* out) const {
  const Impl& im = *impl_;
  TS_CHECK(r >= 0 && r < im.rows, "dequantize_row: row out of range");
  if (!kern::is_r16(im.layout)) {
    tensor::dequantize_row(im.type, im.data + static_cast<size_t>(r) * im.stride, out, im.cols);
    return;
  }
  dequantize_r16_row(im.layout, im.data + static_cast<size_t>(r / 16) * im.stride, static_cast<int>(r % 16), im.cols,
                     out);
}

void Matrix::prepare(PreparedActivations& xp, ThreadPool* pool) const {
  TS_CHECK(xp.cols() == impl_->cols, "prepare: prepared activations have the wrong number of columns");
  if (xp.n_tok() <= 0) return;
  const Isa isa = active_isa();
  kern::Act act;
  prepare_activation_forms(*xp.impl_, impl_->layout, isa, kernels_for(isa), pool, &act);
}

void Matrix::matmul(const float* x, int64_t n_tok, float* y, ThreadPool* pool) const {
  matmul_rows(x, n_tok, y, 0, impl_->rows, pool);
}

void Matrix::matmul_rows(const float* x, int64_t n_tok, float* y, int64_t row_begin, int64_t row_end,
                         ThreadPool* pool) const {
  thread_local PreparedActivations prep;  // per calling thread: buffers grow, never shrink
  prep.reset(x, n_tok, impl_->cols);
  matmul_rows(prep, y, row_begin, row_end, pool);
}

void Matrix::matmul(PreparedActivations& x, float* y, ThreadPool* pool) const {
  matmul_rows(x, y, 0, impl_->rows, pool);
}

void Matrix::matmul_rows(PreparedActivations& xp, float* y, int64_t row_begin, int64_t row_end,
                         ThreadPool* pool) const {
  const Impl& im = *impl_;
  TS_CHECK(row_begin >= 0 && row_begin <= row_end && row_end <= im.rows, "matmul_rows: bad row range");
  TS_CHECK(xp.cols() == im.cols, "matmul: prepared activations have the wrong number of columns");
  const int64_t n_tok = xp.n_tok();
  if (n_tok <= 0 || row_begin == row_end) return;
  const Isa isa = active_isa();
  const kern::KernelTable& kt = kernels_for(isa);
  const int64_t cols = im.cols;
  kern::Act act;
  prepare_activation_forms(*xp.impl_, im.layout, isa, kt, pool, &act);

  const kern::GemmFn fn = gemm_for(isa, im.layout);
  const bool r16 = kern::is_r16(im.layout);
  const bool sw_prefetch = sw_prefetch_enabled(isa, im.type, n_tok);
  const bool q5_block = im.type == DType::kQ5_0 && q5_0_order() == Q50Order::kBlock;
  const int64_t ldy = row_end - row_begin;
  // Computes absolute rows [b, e).
  // Prefill-sized batches run as a blocked GEMM: each thread's rows are swept once per panel of
  // `panel_tok` tokens whose quantized activations (~256 KB) stay in L2 while the 16-row weight
  // groups stream through, each group decoded once per panel and reused for all its columns.
  const bool float_layout = im.layout == kern::Layout::kF32 || im.layout == kern::Layout::kF16 ||
                            im.layout == kern::Layout::kBF16 || kern::is_float_r16(im.layout);
  const int64_t panel_tok = token_panel(cols, float_layout ? 4 : 1);
  const int64_t nb32 = cols / kQK8_0, nb256 = cols / kQK_K;
  auto compute = [&](int64_t b, int64_t e) {
    thread_local std::vector<uint8_t> panel;  // per executing thread; grows, never shrinks
    const size_t need = kern::panel_scratch_bytes(cols) + 64;
    if (panel.size() < need) panel.resize(need);
    kern::GemmArgs g;
    g.scratch = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(panel.data()) + 63) & ~uintptr_t{63});
    if (r16) {
      g.w = im.data + static_cast<size_t>(b / 16) * im.stride;
      g.row0 = b % 16;
    } else {
      g.w = im.data + static_cast<size_t>(b) * im.stride;
      g.row0 = 0;
    }
    g.stride = im.stride;
    g.sw_prefetch = sw_prefetch;
    g.q5_block = q5_block;
    g.num_rows = e - b;
    g.ldy = ldy;
    if (n_tok <= panel_tok) {
      g.act = &act;
      g.y = y + (b - row_begin);
      fn(g);
      return;
    }
    for (int64_t t0 = 0; t0 < n_tok; t0 += panel_tok) {
      kern::Act sub = act;  // tokens [t0, t0 + sub.n_tok)
      sub.n_tok = std::min(panel_tok, n_tok - t0);
      const size_t o = static_cast<size_t>(t0 * cols), o32 = static_cast<size_t>(t0 * nb32);
      if (sub.xf != nullptr) sub.xf += o;
      if (sub.q8 != nullptr) sub.q8 += o;
      if (sub.d8 != nullptr) sub.d8 += o32;
      if (sub.s8 != nullptr) sub.s8 += o32;
      if (sub.s1 != nullptr) sub.s1 += o32;
      if (sub.qk != nullptr) sub.qk += static_cast<size_t>(t0 * nb256);
      if (sub.q16 != nullptr) sub.q16 += o;
      if (sub.q8u != nullptr) sub.q8u += o;
      if (sub.x16t != nullptr) sub.x16t += o / 4;
      if (sub.q8_il != nullptr) sub.q8_il += static_cast<size_t>(t0 / kern::kActIlTile) * static_cast<size_t>(nb32) * kern::kActIlBlockBytes;
      g.act = &sub;
      g.y = y + (b - row_begin) + t0 * ldy;
      fn(g);
    }
  };

  const int64_t work = (row_end - row_begin) * cols * n_tok;
  if (pool == nullptr || pool->num_threads() == 1 || work < kMinParallelWork) {
    compute(row_begin, row_end);
    return;
  }
  // Chunks of whole 16-row groups (absolute), claimed in order by whichever threads are
  // running (PERFORMANCE.md: a late or descheduled worker must not hold up the step: the caller
  // takes its chunk too when it gets there first). Decode-sized batches (<= kDecodeChunkTokens)
  // get one equal contiguous chunk per thread, so each thread reads one sequential stream:
  // against ~4 chunks per thread, 2-thread Q8_0_R16 ops of 0.1-1 MB (SmolLM2/Qwen q/k/v/o/down)
  // took 0.84-0.97x the time at 1-8 tokens, the large ones (9 MB) within noise (kernels_bench
  // BM_MatmulOp, medians of 3, SPR-class KVM guest). Larger batches run long enough per call for
  // a descheduled worker to matter, so they keep ~4 chunks per thread to hand around.
  // Tried on a Zen 5 host (loaded, load average 4-6): a contiguous 7/8 share per thread and the
  // last 1/8 in small chunks claimed by whichever thread is done first. tokenserve generate
  // --isa avx512, against these equal chunks, alternated: SmolLM2 shape x0.86 (4 rounds) and
  // x0.93 (6 rounds, x0.72-1.08), Qwen2.5-0.5B shape x0.96 (3 rounds): no gain shown, not kept.
  constexpr int64_t kDecodeChunkTokens = 8;
  const int64_t g0 = row_begin / 16, g1 = (row_end + 15) / 16;
  const int64_t threads = pool->num_threads();
  const int64_t per_chunk = n_tok <= kDecodeChunkTokens ? (g1 - g0 + threads - 1) / threads
                                                        : std::max<int64_t>(1, (g1 - g0) / (4 * threads));
  pool->parallel_chunks(g1 - g0, per_chunk, [&](int64_t c0, int64_t c1) {
    const int64_t b = std::max(row_begin, (g0 + c0) * 16), e = std::min(row_end, (g0 + c1) * 16);
    if (b < e) compute(b, e);
  });
}

}  // namespace ts::tensor
