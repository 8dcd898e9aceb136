// Shared body of the AVX2 and AVX-512 tiled-attention kernels (attention_kernels.h), included
// by attention_avx2.cc and attention_avx512.cc after they define the TS_* vector macros (type,
// width, intrinsics), the helpers r16-style code relies on (high_half, combine, load_halves,
// store_halves, load_i8) and exp_tile; compiled once per ISA under that file's target pragma.
// Not a public header.
namespace ts::model::attn {
namespace {

constexpr int W = TS_W;  // lanes per vector

inline TS_V r16(TS_V x) {
  return TS_CVTPH(TS_CVTPS(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// GCC has _Float16 on x86; clang 14 (the fuzz build) only with AVX512-FP16: use the
// tensor/fp16.h conversions there (same round-to-nearest-even results).
#if defined(__GNUC__) && !defined(__clang__)
inline float rnd16(float x) { return static_cast<float>(static_cast<_Float16>(x)); }
inline float half_to_float(uint16_t h) { return static_cast<float>(std::bit_cast<_Float16>(h)); }
inline uint16_t float_to_half(float f) { return std::bit_cast<uint16_t>(static_cast<_Float16>(f)); }
#else
inline float rnd16(float x) { return tensor::round_fp16(x); }
inline float half_to_float(uint16_t h) { return tensor::fp16_to_fp32(h); }
inline uint16_t float_to_half(float f) { return tensor::fp32_to_fp16(f); }
#endif

// Scores for W keys starting at lane `off` of the transposed tile.
inline void scores_lanes(const float* q, const float* kt, int32_t hd, float scale, float* out, int off) {
  const int32_t np = hd & ~31;
  TS_V r[8];
  for (int l = 0; l < 8; ++l) {
    TS_V a0 = TS_SETZERO(), a1 = TS_SETZERO(), a2 = TS_SETZERO(), a3 = TS_SETZERO();
    for (int32_t c = 0; c < np; c += 32) {
      a0 = TS_FMADD(TS_SET1(q[c + l]), TS_LOADU(kt + (c + l) * kKeyTile + off), a0);
      a1 = TS_FMADD(TS_SET1(q[c + 8 + l]), TS_LOADU(kt + (c + 8 + l) * kKeyTile + off), a1);
      a2 = TS_FMADD(TS_SET1(q[c + 16 + l]), TS_LOADU(kt + (c + 16 + l) * kKeyTile + off), a2);
      a3 = TS_FMADD(TS_SET1(q[c + 24 + l]), TS_LOADU(kt + (c + 24 + l) * kKeyTile + off), a3);
    }
    r[l] = TS_ADD(TS_ADD(a0, a2), TS_ADD(a1, a3));
  }
  TS_V t0 = TS_ADD(r[0], r[4]), t1 = TS_ADD(r[1], r[5]), t2 = TS_ADD(r[2], r[6]), t3 = TS_ADD(r[3], r[7]);
  TS_V res = TS_ADD(TS_ADD(t0, t1), TS_ADD(t2, t3));
  if (np < hd) {
    // Tail in double, as ggml does past the last multiple of 32.
    TS_VD lo = TS_CVTPD(TS_LOWHALF(res)), hi = TS_CVTPD(TS_HIGHHALF(res));
    for (int32_t d = np; d < hd; ++d) {
      const TS_V prod = TS_MUL(TS_SET1(q[d]), TS_LOADU(kt + d * kKeyTile + off));
      lo = TS_ADDPD(lo, TS_CVTPD(TS_LOWHALF(prod)));
      hi = TS_ADDPD(hi, TS_CVTPD(TS_HIGHHALF(prod)));
    }
    res = TS_COMBINE(TS_CVTPDPS(lo), TS_CVTPDPS(hi));
  }
  TS_STOREU(out + off, TS_MUL(res, TS_SET1(scale)));
}


void online_f16(const float* sc, int32_t nrows, int32_t i0, int32_t i1, float* m_io, float* s_io, float* w,
                float* ms) {
  constexpr int kRows = 16;  // rows per pass (stack buffers)
  alignas(64) float args[kRows][kKeyTile], e[kRows][kKeyTile];
  bool resc[kRows][kKeyTile];
  for (int32_t r0 = 0; r0 < nrows; r0 += kRows) {
    const int32_t nr = std::min<int32_t>(kRows, nrows - r0);
    for (int32_t r = 0; r < nr; ++r) {
      const float* scr = sc + (r0 + r) * kKeyTile;
      float m = m_io[r0 + r];
      for (int32_t i = 0; i < kKeyTile; ++i) args[r][i] = 0.f;
      for (int32_t i = i0; i < i1; ++i) {
        resc[r][i] = scr[i] > m;
        if (resc[r][i]) {
          args[r][i] = m - scr[i];
          m = scr[i];
        } else {
          args[r][i] = scr[i] - m;
        }
      }
      m_io[r0 + r] = m;
      exp_tile(args[r], e[r]);
    }
    float s[kRows];
    for (int32_t r = 0; r < nr; ++r) s[r] = s_io[r0 + r];
    // Keys outer, rows inner: the rows' sum chains run side by side.
    for (int32_t i = i0; i < i1; ++i)
      for (int32_t r = 0; r < nr; ++r) {
        float* wr = w + (r0 + r) * kKeyTile;
        float* mr = ms + (r0 + r) * kKeyTile;
        mr[i] = resc[r][i] ? e[r][i] : 1.f;
        wr[i] = resc[r][i] ? 1.f : e[r][i];
        s[r] = std::fma(s[r], mr[i], wr[i]);
      }
    for (int32_t r = 0; r < nr; ++r) s_io[r0 + r] = s[r];
  }
}

float online_f32(const float* sc, int32_t i0, int32_t i1, float* m_io, float* s_io, float* w) {
  alignas(64) float args[kKeyTile] = {}, e[kKeyTile];
  float m = *m_io;
  for (int32_t i = i0; i < i1; ++i) m = std::max(m, sc[i]);
  for (int32_t i = i0; i < i1; ++i) args[i] = sc[i] - m;
  exp_tile(args, e);
  const float rescale = exp_ref(*m_io - m);
  float s = *s_io * rescale;
  for (int32_t i = i0; i < i1; ++i) {
    w[i] = e[i];
    s += w[i];
  }
  *m_io = m;
  *s_io = s;
  return rescale;
}

void cvt_f16(const uint16_t* src, float* dst, int32_t n) {
  int32_t i = 0;
  for (; i + W <= n; i += W) TS_STOREU(dst + i, TS_CVTPH(TS_LOADH(src + i)));
  for (; i < n; ++i) dst[i] = half_to_float(src[i]);
}

void load_kt_f16(const uint16_t* k, int32_t stride, int32_t hd, float* kt) {
  for (int32_t d = 0; d < hd; ++d)
    for (int off = 0; off < kKeyTile; off += W) TS_STOREU(kt + d * kKeyTile + off, TS_CVTPH(load_halves(k + d * stride + off)));
}

void load_kt_q8(const int8_t* k, int32_t stride, const float* scale, int32_t hd, float* kt) {
  for (int32_t d = 0; d < hd; ++d)
    for (int off = 0; off < kKeyTile; off += W)
      TS_STOREU(kt + d * kKeyTile + off, TS_MUL(TS_LOADU(scale + off), load_i8(k + d * stride + off)));
}

void cvt_to_f16(const float* src, uint16_t* dst, int32_t n) {
  int32_t i = 0;
  for (; i + W <= n; i += W) store_halves(dst + i, TS_CVTPS(TS_LOADU(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) dst[i] = float_to_half(src[i]);
}

void scores_ggml(const float* q, const float* kt, int32_t hd, float scale, float* out) {
  for (int off = 0; off < kKeyTile; off += W) scores_lanes(q, kt, hd, scale, out, off);
}

// R rows (query heads) at once: 4 * R independent fp16 rounding chains hide their latency.
template <int R>
void acc_f16_rows(float* acc, const float* v, const float* w, const float* ms, int32_t i0, int32_t i1, int32_t hd) {
  int32_t d = 0;
  for (; d + 4 * W <= hd; d += 4 * W) {
    TS_V a[R][4];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < 4; ++c) a[r][c] = TS_LOADU(acc + r * hd + d + c * W);
    for (int32_t i = i0; i < i1; ++i) {
      const float* vi = v + static_cast<int64_t>(i) * hd + d;
      const TS_V v0 = TS_LOADU(vi), v1 = TS_LOADU(vi + W), v2 = TS_LOADU(vi + 2 * W), v3 = TS_LOADU(vi + 3 * W);
      for (int r = 0; r < R; ++r) {
        const float msr = ms[r * kKeyTile + i];
        if (msr != 1.f) {
          const TS_V m = TS_SET1(msr);
          for (int c = 0; c < 4; ++c) a[r][c] = r16(TS_MUL(a[r][c], m));
        }
        const TS_V wv = TS_SET1(w[r * kKeyTile + i]);
        a[r][0] = r16(TS_FMADD(v0, wv, a[r][0]));
        a[r][1] = r16(TS_FMADD(v1, wv, a[r][1]));
        a[r][2] = r16(TS_FMADD(v2, wv, a[r][2]));
        a[r][3] = r16(TS_FMADD(v3, wv, a[r][3]));
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < 4; ++c) TS_STOREU(acc + r * hd + d + c * W, a[r][c]);
  }
  for (int r = 0; r < R; ++r) {
    float* ar = acc + r * hd;
    const float* wr = w + r * kKeyTile;
    const float* mr = ms + r * kKeyTile;
    for (int32_t dd = d; dd + W <= hd; dd += W) {
      TS_V a = TS_LOADU(ar + dd);
      for (int32_t i = i0; i < i1; ++i) {
        if (mr[i] != 1.f) a = r16(TS_MUL(a, TS_SET1(mr[i])));
        a = r16(TS_FMADD(TS_LOADU(v + static_cast<int64_t>(i) * hd + dd), TS_SET1(wr[i]), a));
      }
      TS_STOREU(ar + dd, a);
    }
    for (int32_t dd = d + (hd - d) / W * W; dd < hd; ++dd) {
      float a = ar[dd];
      for (int32_t i = i0; i < i1; ++i) {
        if (mr[i] != 1.f) a = rnd16(a * mr[i]);
        a = rnd16(std::fma(v[i * hd + dd], wr[i], a));
      }
      ar[dd] = a;
    }
  }
}

void acc_f16(float* acc, int32_t nrows, const float* v, const float* w, const float* ms, int32_t i0, int32_t i1,
             int32_t hd) {
  int32_t r = 0;
  for (; r + 2 <= nrows; r += 2)
    acc_f16_rows<2>(acc + static_cast<int64_t>(r) * hd, v, w + r * kKeyTile, ms + r * kKeyTile, i0, i1, hd);
  for (; r < nrows; ++r)
    acc_f16_rows<1>(acc + static_cast<int64_t>(r) * hd, v, w + r * kKeyTile, ms + r * kKeyTile, i0, i1, hd);
}

template <int R>
void acc_f32_rows(float* acc, const float* v, const float* p, const float* rescale, int32_t i0, int32_t i1,
                  int32_t hd) {
  int32_t d = 0;
  for (; d + 4 * W <= hd; d += 4 * W) {
    TS_V a[R][4];
    for (int r = 0; r < R; ++r) {
      const TS_V rs = TS_SET1(rescale[r]);
      for (int c = 0; c < 4; ++c) a[r][c] = TS_MUL(TS_LOADU(acc + r * hd + d + c * W), rs);
    }
    for (int32_t i = i0; i < i1; ++i) {
      const float* vi = v + static_cast<int64_t>(i) * hd + d;
      const TS_V v0 = TS_LOADU(vi), v1 = TS_LOADU(vi + W), v2 = TS_LOADU(vi + 2 * W), v3 = TS_LOADU(vi + 3 * W);
      for (int r = 0; r < R; ++r) {
        const TS_V pv = TS_SET1(p[r * kKeyTile + i]);
        a[r][0] = TS_FMADD(pv, v0, a[r][0]);
        a[r][1] = TS_FMADD(pv, v1, a[r][1]);
        a[r][2] = TS_FMADD(pv, v2, a[r][2]);
        a[r][3] = TS_FMADD(pv, v3, a[r][3]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < 4; ++c) TS_STOREU(acc + r * hd + d + c * W, a[r][c]);
  }
  for (int r = 0; r < R; ++r) {
    float* ar = acc + r * hd;
    const float* pr = p + r * kKeyTile;
    const TS_V rs = TS_SET1(rescale[r]);
    int32_t dd = d;
    for (; dd + W <= hd; dd += W) {
      TS_V a = TS_MUL(TS_LOADU(ar + dd), rs);
      for (int32_t i = i0; i < i1; ++i) a = TS_FMADD(TS_SET1(pr[i]), TS_LOADU(v + static_cast<int64_t>(i) * hd + dd), a);
      TS_STOREU(ar + dd, a);
    }
    for (; dd < hd; ++dd) {
      float a = ar[dd] * rescale[r];
      for (int32_t i = i0; i < i1; ++i) a = std::fma(pr[i], v[i * hd + dd], a);
      ar[dd] = a;
    }
  }
}

void acc_f32(float* acc, int32_t nrows, const float* v, const float* p, const float* rescale, int32_t i0, int32_t i1,
             int32_t hd) {
  int32_t r = 0;
  for (; r + 2 <= nrows; r += 2)
    acc_f32_rows<2>(acc + static_cast<int64_t>(r) * hd, v, p + r * kKeyTile, rescale + r, i0, i1, hd);
  for (; r < nrows; ++r)
    acc_f32_rows<1>(acc + static_cast<int64_t>(r) * hd, v, p + r * kKeyTile, rescale + r, i0, i1, hd);
}

}  // namespace

const Kernels& TS_KERNELS_FN() {
  static const Kernels k{.name = TS_KERNELS_NAME, .scores_ggml = scores_ggml, .online_f16 = online_f16,
                         .online_f32 = online_f32, .exp_tile = exp_tile, .swiglu = swiglu,
                         .cvt_f16 = cvt_f16, .load_kt_f16 = load_kt_f16,
                         .load_kt_q8 = load_kt_q8, .cvt_to_f16 = cvt_to_f16,
                         .acc_f16 = acc_f16, .acc_f32 = acc_f32};
  return k;
}

}  // namespace ts::model::attn
