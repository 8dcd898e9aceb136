#include "tensor/matrix.h"

#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "core/check.h"
#include "tensor/cpu_features.h"
#include "tensor/fp16.h"
#include "tensor/kernels.h"
#include "tensor/quants.h"
#include "tensor/repack.h"
#include "tensor/weight_arena.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

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
  return std::string("kernels: ") + isa_name(active_isa()) + " (CPU: " + cpu + ")";
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

// Threads for repacking `bytes` in `parts` independent pieces (MatrixOptions::repack_threads).
int repack_thread_count(const MatrixOptions& o, size_t bytes, int64_t parts) {
  if (bytes < kParallelRepackBytes) return 1;
  int n = o.repack_threads;
  if (n <= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    n = std::min(n, 32);
  }
  return static_cast<int>(std::clamp<int64_t>(parts, 1, std::max(n, 1)));
}

// Calls fn(p0, p1) over [0, parts) split into `threads` contiguous runs: the first on the
// calling thread, the others on threads of their own (a run whose thread cannot be started
// runs on the calling thread).
template <typename F>
void split_runs(int64_t parts, int threads, F&& fn) {
  const auto bound = [&](int i) { return parts * i / threads; };
  std::vector<std::thread> workers;
  workers.reserve(static_cast<size_t>(std::max(threads - 1, 0)));
  for (int i = 1; i < threads; ++i) {
    try {
      workers.emplace_back([&fn, b = bound(i), e = bound(i + 1)] { fn(b, e); });
    } catch (const std::system_error&) {
      fn(bound(i), bound(i + 1));
    }
  }
  fn(int64_t{0}, bound(1));
  for (auto& w : workers) w.join();
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

// Per-calling-thread activation scratch: grows to the largest request, never shrinks, so the
// steady state allocates nothing.
struct ActScratch {
  std::vector<float> xf;
  std::vector<int8_t> q8;
  std::vector<float> d8;
  std::vector<int32_t> s8;
  std::vector<float> s1;
  std::vector<BlockQ8_K> qk;
  std::vector<uint8_t> il;
  std::vector<int16_t> q16;
  std::vector<uint8_t> q8u;
  std::vector<int32_t> x4t;
  std::vector<int32_t> x16t;
};

template <typename T>
T* grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

// From this many tokens on, activation preparation is split over the pool by tokens; below
// it, from kMinParallelPrepValues values (n_tok * cols) on, by chunks of kPrepColChunk columns.
// Why: a decode step's down projection (Qwen2.5-0.5B: 8 x 4864 values) was quantized on the
// calling thread while the other waited, half of its input still in the other core's cache
// (the gate/up job wrote it): on Zen 5 (kernels_bench BM_ActPrepAB, same-process alternation,
// loaded host) split/serial was x0.67 (avx512), x0.65 (avxvnni), x0.53 (avx2) at 8 x 4864
// (~25 -> ~17 us a call on avx512), x0.58-0.77 at 4 x 4864; at 2 x 4864 within noise, and at
// 8 x 896 / 8 x 1536 (q/k/v, gate/up inputs) the pool job cost more than it saved (x1.4-2.4).
constexpr int64_t kMinParallelPrepTokens = 16;
constexpr int64_t kMinParallelPrepValues = 16384;
constexpr int64_t kPrepColChunk = 512;

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

// ---------------------------------------------------------------------------------------------
// Prepared activations

namespace {

// The activation forms a layout needs (bits of PreparedActivations::Impl::have).
enum Form : unsigned {
  kFormF16 = 1u << 0,
  kFormBF16 = 1u << 1,
  kFormQ8 = 1u << 2,   // q8, d8, s8
  kFormS1 = 1u << 3,   // Q8_1 sums (needs kFormQ8)
  kFormIl = 1u << 4,   // AVX-512 Q8_0_R16 tile interleave (needs kFormQ8)
  kFormQK = 1u << 5,   // Q8_K blocks
  kFormQ16 = 1u << 6,  // AVX2 Q8_0_R16: q8 widened to int16 (needs kFormQ8)
  kFormQ8U = 1u << 7,  // Q5_0_R16 / IQ4_NL_R16 batches: q8 ^ 0x80 (needs kFormQ8)
  kFormX4T = 1u << 8,  // IQ4_NL_R16, AVX-512, small batches: Act::x4t (needs kFormQ8)
  kFormX16T = 1u << 9,  // Q5_0_R16 below the panels: Act::x16t (needs kFormQ8)
};

// Act::x4t / Act::x16t: per 4 consecutive q8 values, kActIlBias0 - factor * their sum.
void four_value_terms(const int8_t* q8, int64_t n, int32_t factor, int32_t* terms) {
  for (int64_t i = 0; i < n; i += 4) terms[i / 4] = kern::kActIlBias0 - factor * (q8[i] + q8[i + 1] + q8[i + 2] + q8[i + 3]);
}

unsigned forms_for(kern::Layout layout, int64_t n_tok, Isa isa) {
  switch (layout) {
    case kern::Layout::kF32:
    case kern::Layout::kF32_R16: return 0;
    case kern::Layout::kF16:
    case kern::Layout::kF16_R16: return kFormF16;
    case kern::Layout::kBF16: return kFormBF16;
    case kern::Layout::kQ4_1:
    case kern::Layout::kQ4_1_R16:
    case kern::Layout::kQ5_1_R16:
    case kern::Layout::kQ5_1: return kFormQ8 | kFormS1;
    case kern::Layout::kQ8_0_R16:
      // The AMX tile kernel reads q8 in place; below kAmxMinTokens the avx512 kernel runs.
      return kFormQ8 |
             ((n_tok >= kern::kActIlMinTokens && isa >= Isa::kAvx512 && !(isa == Isa::kAmx && n_tok >= kern::kAmxMinTokens)) ||
                      (isa == Isa::kAvxVnni && n_tok >= kern::kAvxVnniIlMinTokens)
                  ? kFormIl
                  : 0u) |
             (n_tok >= kern::kActQ16MinTokens && isa == Isa::kAvx2 ? kFormQ16 : 0u);
    case kern::Layout::kIQ4_NL_R16:
    case kern::Layout::kQ5_0_R16: {
      // The ggml panel kernels (Act::q8u) from their tier's batch size; IQ4_NL's values would
      // saturate the plain AVX2 tier's vpmaddubsw there, so it never gets them on that tier, and
      // Q5_0 on the AVX-VNNI tier runs its x16t panels at every size (kernels.h).
      const bool q5 = layout == kern::Layout::kQ5_0_R16;
      const int64_t panel_min = isa >= Isa::kAvx512 ? kern::kGgmlPanelMinTokensAvx512
                                : isa == Isa::kAvxVnni ? (q5 ? -1 : kern::kGgmlPanelMinTokensAvxVnni)
                                : isa == Isa::kAvx2 && q5 ? kern::kGgmlPanelMinTokensAvx2
                                                          : -1;
      const bool panels = panel_min > 0 && n_tok >= panel_min;
      // Below them Q5_0's kernels take the values unsigned against Act::x16t on every SIMD
      // tier, IQ4_NL's (AVX-512 only) take them + 128 against Act::x4t.
      const unsigned term = q5 ? (isa >= Isa::kAvx2 ? kFormX16T : 0u) : (isa >= Isa::kAvx512 ? kFormX4T : 0u);
      return kFormQ8 | (panels ? kFormQ8U : term);
    }
    case kern::Layout::kQ4_0_R16:
      // AVX-512 batches from kQ4IlMinTokens also read Act::q8_il (the AMX tier's tile kernels
      // take them from kAmxMinTokens, reading q8 in place).
      return kFormQ8 | (n_tok >= kern::kQ4IlMinTokens && isa >= Isa::kAvx512 &&
                                !(isa == Isa::kAmx && n_tok >= kern::kAmxMinTokens)
                            ? kFormIl
                            : 0u);
    case kern::Layout::kQ8_0:
    case kern::Layout::kQ4_0:
    case kern::Layout::kQ5_0:
    case kern::Layout::kIQ4_NL: return kFormQ8;
    case kern::Layout::kQ2_K:
    case kern::Layout::kQ3_K:
    case kern::Layout::kQ5_K:
    case kern::Layout::kIQ4_XS:
    case kern::Layout::kQ4_K:
    case kern::Layout::kQ4_K_R16:
    case kern::Layout::kQ6_K_R16:
    case kern::Layout::kQ5_K_R16:
    case kern::Layout::kQ3_K_R16:
    case kern::Layout::kQ2_K_R16:
    case kern::Layout::kIQ4_XS_R16:
    case kern::Layout::kQ6_K: return kFormQK;
    case kern::Layout::kCount: break;
  }
  TS_CHECK(false, "matmul: bad layout");
  return 0;
}

}  // namespace

struct PreparedActivations::Impl {
  const float* x = nullptr;
  int64_t n_tok = 0;
  int64_t cols = 0;
  unsigned have = 0;  // Form bits made since reset()
  ActScratch buf;
  uint8_t* il = nullptr;  // 64-byte aligned inside buf.il when kFormIl is made
};

PreparedActivations::PreparedActivations() : impl_(std::make_unique<Impl>()) {}
PreparedActivations::~PreparedActivations() = default;
PreparedActivations::PreparedActivations(PreparedActivations&&) noexcept = default;
PreparedActivations& PreparedActivations::operator=(PreparedActivations&&) noexcept = default;

void PreparedActivations::reset(const float* x, int64_t n_tok, int64_t cols) {
  TS_CHECK(n_tok >= 0 && cols >= 0, "PreparedActivations::reset: negative shape");
  impl_->x = x;
  impl_->n_tok = n_tok;
  impl_->cols = cols;
  impl_->have = 0;
}
const float* PreparedActivations::data() const { return impl_->x; }
int64_t PreparedActivations::n_tok() const { return impl_->n_tok; }
int64_t PreparedActivations::cols() const { return impl_->cols; }
int PreparedActivations::num_prepared() const { return __builtin_popcount(impl_->have); }

namespace {

// dst[i] = src[i] (int8 -> int16). The Q16 form is made on the avx2 tier only (forms_for), so
// AVX2 is there; this file is built for the x86-64 baseline, where the loop ran ~1 cycle a value.
#if defined(__x86_64__)
__attribute__((target("avx2"))) void widen_i8(const int8_t* src, int16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  }
  for (; i < n; ++i) dst[i] = src[i];
}
#else
void widen_i8(const int8_t* src, int16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
}
#endif

// Makes the forms in `want` that `p` lacks (split over the pool for large batches: it is
// O(n_tok * cols) and would otherwise run on one thread), and points `act` at all of them.
void prepare_forms(PreparedActivations::Impl& p, unsigned want, const kern::KernelTable& kt, ThreadPool* pool,
                   kern::Act* act) {
  const int64_t n_tok = p.n_tok, cols = p.cols;
  const size_t n = static_cast<size_t>(n_tok * cols);
  const int64_t nb32 = cols / kQK8_0, nb256 = cols / kQK_K;
  ActScratch& b = p.buf;
  const unsigned missing = want & ~p.have;
  if (missing != 0) {
    // Buffers first (on this thread), then the per-token work.
    if (missing & (kFormF16 | kFormBF16)) grow(b.xf, n);
    if (missing & kFormQ8) {
      grow(b.q8, n);
      grow(b.d8, static_cast<size_t>(n_tok * nb32));
      grow(b.s8, static_cast<size_t>(n_tok * nb32));
    }
    if (missing & kFormS1) grow(b.s1, static_cast<size_t>(n_tok * nb32));
    if (missing & kFormQK) grow(b.qk, static_cast<size_t>(n_tok * nb256));
    if (missing & kFormQ16) grow(b.q16, n);
    if (missing & kFormQ8U) grow(b.q8u, n);
    if (missing & kFormX4T) grow(b.x4t, n / 4);
    if (missing & kFormX16T) grow(b.x16t, n / 4);
    if (missing & kFormIl) {
      uint8_t* il = grow(b.il, kern::act_il_bytes(n_tok, cols) + 64);
      p.il = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(il) + 63) & ~uintptr_t{63});
    }
    const float* x = p.x;
    int8_t* q8 = b.q8.data();
    float* d8 = b.d8.data();
    int32_t* s8 = b.s8.data();
    uint8_t* il = p.il;
    // Tokens [t0, t1), columns [c0, c1) (multiples of 32; of 256 where Q8_K blocks are made).
    auto prepare = [&](int64_t t0, int64_t t1, int64_t c0, int64_t c1) {
      const int64_t nc = c1 - c0, b0 = c0 / kQK8_0, b1 = c1 / kQK8_0;
      for (int64_t t = t0; t < t1; ++t) {
        const float* xt = x + t * cols + c0;
        const size_t o = static_cast<size_t>(t * cols + c0), o32 = static_cast<size_t>(t * nb32 + b0);
        if (missing & kFormQ8) kt.act.q8_0(xt, nc, q8 + o, d8 + o32, s8 + o32);
        if (missing & kFormS1) quantize_act_q8_1_sums(xt, nc, s8 + o32, b.s1.data() + o32);
        if (missing & kFormIl) {
          // Token t's slot in its tile's block records (Act::q8_il).
          uint8_t* rec = il + (static_cast<size_t>(t / kern::kActIlTile) * static_cast<size_t>(nb32) + static_cast<size_t>(b0)) *
                                  kern::kActIlBlockBytes;
          const int slot = static_cast<int>(t % kern::kActIlTile);
          for (int64_t blk = b0; blk < b1; ++blk, rec += kern::kActIlBlockBytes) {
            std::memcpy(rec + slot * 32, q8 + t * cols + blk * 32, 32);
            const int32_t bias = kern::kActIlBias0 - 128 * s8[t * nb32 + blk];
            std::memcpy(rec + kern::kActIlTile * 32 + slot * 4, &bias, 4);
            std::memcpy(rec + kern::kActIlTile * 36 + slot * 4, &d8[t * nb32 + blk], 4);
          }
        }
        if (missing & kFormQ16) widen_i8(q8 + o, b.q16.data() + o, nc);
        if (missing & kFormX4T) four_value_terms(q8 + o, nc, 128, b.x4t.data() + o / 4);
        if (missing & kFormX16T) four_value_terms(q8 + o, nc, 16, b.x16t.data() + o / 4);
        if (missing & kFormQ8U) {
          uint8_t* u = b.q8u.data() + o;
          for (int64_t i = 0; i < nc; ++i) u[i] = static_cast<uint8_t>(q8[o + static_cast<size_t>(i)]) ^ 0x80u;
        }
        if (missing & kFormQK) kt.act.q8_k(xt, nc, b.qk.data() + t * nb256 + c0 / kQK_K);
        if (missing & kFormF16) kt.act.round_f16(xt, b.xf.data() + o, nc);
        if (missing & kFormBF16) kt.act.round_bf16(xt, b.xf.data() + o, nc);
      }
    };
    const bool multi = pool != nullptr && pool->num_threads() > 1;
    if (multi && n_tok >= kMinParallelPrepTokens) {
      pool->parallel_chunks(n_tok, (missing & kFormIl) ? kern::kActIlTile : 4,
                            [&](int64_t t0, int64_t t1) { prepare(t0, t1, 0, cols); });
    } else if (multi && n_tok * cols >= kMinParallelPrepValues) {
      // Decode-sized batches: split by columns (all tokens of each chunk on one thread, so
      // threads write disjoint Act::q8_il block records). Chunks of kPrepColChunk columns (a
      // multiple of the Q8_K block); the last may be shorter (a multiple of 32, or of 256 when
      // Q8_K blocks are made: cols is then a multiple of 256).
      const int64_t nchunks = (cols + kPrepColChunk - 1) / kPrepColChunk;
      pool->parallel_chunks(nchunks, (nchunks + pool->num_threads() - 1) / pool->num_threads(),
                            [&](int64_t k0, int64_t k1) {
                              prepare(0, n_tok, k0 * kPrepColChunk, std::min(cols, k1 * kPrepColChunk));
                            });
    } else {
      prepare(0, n_tok, 0, cols);
    }
    // fp16 and bf16 share one buffer: only the form made last is valid.
    if (missing & kFormF16) p.have &= ~kFormBF16;
    if (missing & kFormBF16) p.have &= ~kFormF16;
    p.have |= missing;
  }
  act->n_tok = n_tok;
  act->cols = cols;
  act->xf = (want & (kFormF16 | kFormBF16)) ? b.xf.data() : p.x;
  act->q8 = (want & kFormQ8) ? b.q8.data() : nullptr;
  act->d8 = (want & kFormQ8) ? b.d8.data() : nullptr;
  act->s8 = (want & kFormQ8) ? b.s8.data() : nullptr;
  act->s1 = (want & kFormS1) ? b.s1.data() : nullptr;
  act->qk = (want & kFormQK) ? b.qk.data() : nullptr;
  act->q8_il = (want & kFormIl) ? p.il : nullptr;
  act->q16 = (want & kFormQ16) ? b.q16.data() : nullptr;
  act->q8u = (want & kFormQ8U) ? b.q8u.data() : nullptr;
  act->x4t = (want & kFormX4T) ? b.x4t.data() : nullptr;
  act->x16t = (want & kFormX16T) ? b.x16t.data() : nullptr;
}

}  // namespace

void Matrix::prepare(PreparedActivations& xp, ThreadPool* pool) const {
  TS_CHECK(xp.cols() == impl_->cols, "prepare: prepared activations have the wrong number of columns");
  if (xp.n_tok() <= 0) return;
  const Isa isa = active_isa();
  kern::Act act;
  prepare_forms(*xp.impl_, forms_for(impl_->layout, xp.n_tok(), isa), kernels_for(isa), pool, &act);
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
  prepare_forms(*xp.impl_, forms_for(im.layout, n_tok, isa), kt, pool, &act);

  const kern::GemmFn fn = gemm_for(isa, im.layout);
  const bool r16 = kern::is_r16(im.layout);
  const bool sw_prefetch = sw_prefetch_enabled(isa, im.type, n_tok);
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
      if (sub.x4t != nullptr) sub.x4t += o / 4;
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
