// onnxtrain CUDA kernels. Compiled ahead of time to PTX by clang without
// NVIDIA's headers or libdevice (gen.sh; `go generate ./backend/cuda`):
// everything a kernel needs is defined in this file, including the math
// functions, on top of PTX instructions and clang's NVVM builtins.
//
// Conventions: every kernel is extern "C"; elementwise kernels loop
// grid-stride over long long element counts; row kernels take one block of
// ROW threads per row and loop over rows; dtype codes are ONNX's
// (1 float, 6 int32, 7 int64, 9 bool, 10 float16, 16 bfloat16).

#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))
#define ROW 256
#define MAXR 8

typedef long long i64;
typedef unsigned long long u64;
typedef unsigned short u16;
typedef unsigned char u8;

__device__ static inline i64 gtid() {
  return (i64)__nvvm_read_ptx_sreg_ctaid_x() * __nvvm_read_ptx_sreg_ntid_x() + __nvvm_read_ptx_sreg_tid_x();
}
__device__ static inline i64 gstride() {
  return (i64)__nvvm_read_ptx_sreg_nctaid_x() * __nvvm_read_ptx_sreg_ntid_x();
}
__device__ static inline int tid() { return __nvvm_read_ptx_sreg_tid_x(); }
__device__ static inline i64 bid() { return __nvvm_read_ptx_sreg_ctaid_x(); }
__device__ static inline i64 nbid() { return __nvvm_read_ptx_sreg_nctaid_x(); }
__device__ static inline void sync() { __syncthreads(); }

// ---- math ------------------------------------------------------------

__device__ static inline float bits_f(int i) { union { int i; float f; } u; u.i = i; return u.f; }
__device__ static inline int f_bits(float f) { union { int i; float f; } u; u.f = f; return u.i; }

__device__ static inline float ex2a(float x) { float y; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
__device__ static inline float lg2a(float x) { float y; asm("lg2.approx.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
__device__ static inline float sina(float x) { float y; asm("sin.approx.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
__device__ static inline float cosa(float x) { float y; asm("cos.approx.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
__device__ static inline float rint_(float x) { float y; asm("cvt.rni.f32.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
__device__ static inline float floor_(float x) { float y; asm("cvt.rmi.f32.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
__device__ static inline float sqrt_(float x) { return __nvvm_sqrt_rn_f(x); }
__device__ static inline float fabs_(float x) { return x < 0.0f ? -x : (x == 0.0f ? 0.0f : x); }
__device__ static inline int isnan_(float x) { return x != x; }
__device__ static inline float inf_() { return bits_f(0x7f800000); }
__device__ static inline float nan_() { return bits_f(0x7fc00000); }

// exp with Cody-Waite range reduction: 2^n * 2^(r/ln2), |r| <= ln2/2.
__device__ static float exp_(float x) {
  if (x > 88.72284f) return inf_();
  if (x < -103.97208f) return 0.0f;
  if (isnan_(x)) return x;
  float n = rint_(x * 1.44269504f);
  float r = __builtin_fmaf(n, -0.693145752f, x);
  r = __builtin_fmaf(n, -1.42860677e-6f, r);
  float p = ex2a(r * 1.44269504f);
  int ni = (int)n;
  // scale in two steps so that 2^n does not overflow before the product
  int h = ni / 2;
  return p * bits_f((h + 127) << 23) * bits_f((ni - h + 127) << 23);
}
__device__ static float expm1_(float x) {
  if (fabs_(x) < 0.5f) {
    // Taylor series to x^9: relative error below 2^-24 on |x| < 0.5
    float t = x * (1.0f / 9.0f) + 1.0f;
    t = x * t * (1.0f / 8.0f) + 1.0f;
    t = x * t * (1.0f / 7.0f) + 1.0f;
    t = x * t * (1.0f / 6.0f) + 1.0f;
    t = x * t * (1.0f / 5.0f) + 1.0f;
    t = x * t * (1.0f / 4.0f) + 1.0f;
    t = x * t * (1.0f / 3.0f) + 1.0f;
    t = x * t * (1.0f / 2.0f) + 1.0f;
    return x * t;
  }
  return exp_(x) - 1.0f;
}
__device__ static float log_(float x) {
  if (x < 0.0f || isnan_(x)) return nan_();
  if (x == 0.0f) return -inf_();
  if (x == inf_()) return x;
  // log1p series near 1, where lg2.approx's absolute error would dominate
  float d = x - 1.0f;
  if (fabs_(d) < 0.0625f) {
    float s = d / (2.0f + d), s2 = s * s;
    return 2.0f * s * (1.0f + s2 * (1.0f / 3.0f + s2 * (0.2f + s2 * (1.0f / 7.0f))));
  }
  return lg2a(x) * 0.693147181f;
}
__device__ static float tanh_(float x) {
  float a = fabs_(x);
  if (a > 9.0f) return x > 0.0f ? 1.0f : -1.0f;
  float e = expm1_(2.0f * a);
  float t = e / (e + 2.0f);
  return x < 0.0f ? -t : t;
}
__device__ static float sigmoid_(float x) { return 1.0f / (1.0f + exp_(-x)); }
// erf: W. J. Cody's rational forms condensed to the Abramowitz-Stegun
// 7.1.26 fit above |x| = 0.5 (absolute error below 1.5e-7) and the Taylor
// series below it (relative error below 1e-7).
__device__ static float erf_(float x) {
  float a = fabs_(x);
  if (a < 0.5f) {
    float x2 = x * x;
    return x * 1.12837917f * (1.0f + x2 * (-1.0f / 3.0f + x2 * (0.1f + x2 * (-1.0f / 42.0f + x2 * (1.0f / 216.0f)))));
  }
  if (a > 4.0f) return x > 0.0f ? 1.0f : -1.0f;
  float t = 1.0f / (1.0f + 0.3275911f * a);
  float y = 1.0f - (((((1.061405429f * t - 1.453152027f) * t) + 1.421413741f) * t - 0.284496736f) * t + 0.254829592f) * t * exp_(-a * a);
  return x < 0.0f ? -y : y;
}
__device__ static float pow_(float a, float b) {
  if (b == 0.0f) return 1.0f;
  if (b == 1.0f) return a;
  if (b == 2.0f) return a * a;
  if (b == 0.5f) return sqrt_(a);
  if (b == -1.0f) return 1.0f / a;
  float ab = fabs_(a);
  float r = exp_(b * log_(ab));
  if (a < 0.0f) {
    if (floor_(b) != b) return nan_();
    float h = b * 0.5f;
    if (floor_(h) != h) r = -r; // odd integer exponent
  }
  if (a == 0.0f) return b > 0.0f ? 0.0f : inf_();
  return r;
}
__device__ static inline float max_(float a, float b) { return (isnan_(a) || a > b) ? a : b; }
__device__ static inline float min_(float a, float b) { return (isnan_(a) || a < b) ? a : b; }

// ---- dtype conversion ------------------------------------------------

__device__ static inline float bf16_to_f32(u16 h) { return bits_f(((int)h) << 16); }
__device__ static inline u16 f32_to_bf16(float f) {
  unsigned u = (unsigned)f_bits(f);
  if (isnan_(f)) return (u16)((u >> 16) | 0x40);
  u += 0x7fff + ((u >> 16) & 1); // round to nearest even
  return (u16)(u >> 16);
}
__device__ static inline float f16_to_f32(u16 h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ static inline u16 f32_to_f16(float f) { u16 h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }

__device__ static float load_as_f(const void* p, i64 i, int dt) {
  switch (dt) {
  case 1: return ((const float*)p)[i];
  case 6: return (float)((const int*)p)[i];
  case 7: return (float)((const i64*)p)[i];
  case 9: case 2: return (float)((const u8*)p)[i];
  case 10: return f16_to_f32(((const u16*)p)[i]);
  case 16: return bf16_to_f32(((const u16*)p)[i]);
  case 11: return (float)((const double*)p)[i];
  }
  return 0.0f;
}
__device__ static i64 load_as_i(const void* p, i64 i, int dt) {
  switch (dt) {
  case 6: return ((const int*)p)[i];
  case 7: return ((const i64*)p)[i];
  case 9: case 2: return ((const u8*)p)[i];
  }
  return (i64)load_as_f(p, i, dt);
}
__device__ static void store_f(void* p, i64 i, int dt, float v) {
  switch (dt) {
  case 1: ((float*)p)[i] = v; break;
  case 10: ((u16*)p)[i] = f32_to_f16(v); break;
  case 16: ((u16*)p)[i] = f32_to_bf16(v); break;
  }
}
__device__ static int is_float(int dt) { return dt == 1 || dt == 10 || dt == 16 || dt == 11; }

// Cast: float to int truncates toward zero, to bool is x != 0.
extern "C" __global__ void cast_any(const void* in, void* out, i64 n, int from, int to) {
  for (i64 i = gtid(); i < n; i += gstride()) {
    switch (to) {
    case 1: ((float*)out)[i] = load_as_f(in, i, from); break;
    case 10: ((u16*)out)[i] = f32_to_f16(load_as_f(in, i, from)); break;
    case 16: ((u16*)out)[i] = f32_to_bf16(load_as_f(in, i, from)); break;
    case 11: ((double*)out)[i] = is_float(from) ? (double)load_as_f(in, i, from) : (double)load_as_i(in, i, from); break;
    case 9: ((u8*)out)[i] = is_float(from) ? (load_as_f(in, i, from) != 0.0f) : (load_as_i(in, i, from) != 0); break;
    case 6: ((int*)out)[i] = is_float(from) ? (int)load_as_f(in, i, from) : (int)load_as_i(in, i, from); break;
    case 7: ((i64*)out)[i] = is_float(from) ? (i64)load_as_f(in, i, from) : load_as_i(in, i, from); break;
    case 2: ((u8*)out)[i] = is_float(from) ? (u8)(int)load_as_f(in, i, from) : (u8)load_as_i(in, i, from); break;
    }
  }
}

// ---- strided indexing ------------------------------------------------

// Index is launch.go's Index: output dims and, per operand, the element
// stride along each output axis (0 where the operand broadcasts).
struct Index {
  i64 rank;
  i64 dims[MAXR];
  i64 strides[3][MAXR];
  i64 offset[3];
};

__device__ static inline void locate(const Index& x, i64 i, i64* o0, i64* o1, i64* o2) {
  i64 a = x.offset[0], b = x.offset[1], c = x.offset[2];
  for (int d = (int)x.rank - 1; d >= 0; d--) {
    i64 q = i / x.dims[d], r = i - q * x.dims[d];
    a += r * x.strides[0][d];
    b += r * x.strides[1][d];
    c += r * x.strides[2][d];
    i = q;
  }
  *o0 = a; *o1 = b; *o2 = c;
}

// Binary ops (opcode): 0 add, 1 sub, 2 mul, 3 div, 4 pow, 5 max, 6 min.
__device__ static float binf(int op, float a, float b) {
  switch (op) {
  case 0: return a + b;
  case 1: return a - b;
  case 2: return a * b;
  case 3: return a / b;
  case 4: return pow_(a, b);
  case 5: return max_(a, b);
  case 6: return min_(a, b);
  }
  return nan_();
}
// Floating-point binary ops on float32, float16 or bfloat16 (dt), computed
// in float32 and rounded once.
extern "C" __global__ void binary_fp(const void* a, const void* b, void* out, i64 n, int op, int dt, Index x) {
  for (i64 i = gtid(); i < n; i += gstride()) {
    i64 ia, ib, io;
    locate(x, i, &ia, &ib, &io);
    if (dt == 1) ((float*)out)[i] = binf(op, ((const float*)a)[ia], ((const float*)b)[ib]);
    else store_f(out, i, dt, binf(op, load_as_f(a, ia, dt), load_as_f(b, ib, dt)));
  }
}
// Integer binary ops wrap; division truncates toward zero (b = 0 gives 0:
// the host checks constant divisors).
extern "C" __global__ void binary_i64(const i64* a, const i64* b, i64* out, i64 n, int op, Index x) {
  for (i64 i = gtid(); i < n; i += gstride()) {
    i64 ia, ib, io;
    locate(x, i, &ia, &ib, &io);
    i64 p = a[ia], q = b[ib], r = 0;
    switch (op) {
    case 0: r = (i64)((u64)p + (u64)q); break;
    case 1: r = (i64)((u64)p - (u64)q); break;
    case 2: r = (i64)((u64)p * (u64)q); break;
    case 3: r = q == 0 ? 0 : p / q; break;
    case 4: { r = 1; for (i64 k = 0; k < q; k++) r *= p; } break;
    case 5: r = p > q ? p : q; break;
    case 6: r = p < q ? p : q; break;
    }
    out[i] = r;
  }
}
// Comparisons to bool: 0 equal, 1 less, 2 greater; dt is the operands'.
extern "C" __global__ void compare_any(const void* a, const void* b, u8* out, i64 n, int op, int dt, Index x) {
  for (i64 i = gtid(); i < n; i += gstride()) {
    i64 ia, ib, io;
    locate(x, i, &ia, &ib, &io);
    u8 r;
    if (is_float(dt)) {
      float p = load_as_f(a, ia, dt), q = load_as_f(b, ib, dt);
      r = op == 0 ? p == q : (op == 1 ? p < q : p > q);
    } else {
      i64 p = load_as_i(a, ia, dt), q = load_as_i(b, ib, dt);
      r = op == 0 ? p == q : (op == 1 ? p < q : p > q);
    }
    out[i] = r;
  }
}
// Where: operand 0 the condition, 1 and 2 the branches (elem bytes each).
extern "C" __global__ void where_any(const u8* c, const u8* a, const u8* b, u8* out, i64 n, int elem, Index x) {
  for (i64 i = gtid(); i < n; i += gstride()) {
    i64 ic, ia, ib;
    locate(x, i, &ic, &ia, &ib);
    const u8* src = c[ic] ? a + ia * elem : b + ib * elem;
    for (int k = 0; k < elem; k++) out[i * elem + k] = src[k];
  }
}

// Unary ops: 0 exp, 1 log, 2 sqrt, 3 tanh, 4 erf, 5 sin, 6 cos, 7 floor,
// 8 neg, 9 abs, 10 relu, 11 sigmoid, 12 reciprocal, 13 ceil.
extern "C" __global__ void unary_fp(const void* in, void* out, i64 n, int op, int dt) {
  for (i64 i = gtid(); i < n; i += gstride()) {
    float v = load_as_f(in, i, dt), r;
    switch (op) {
    case 0: r = exp_(v); break;
    case 1: r = log_(v); break;
    case 2: r = sqrt_(v); break;
    case 3: r = tanh_(v); break;
    case 4: r = erf_(v); break;
    case 5: r = sina(v); break;
    case 6: r = cosa(v); break;
    case 7: r = floor_(v); break;
    case 8: r = -v; break;
    case 9: r = fabs_(v); break;
    case 10: r = v > 0.0f ? v : (isnan_(v) ? v : 0.0f); break;
    case 11: r = sigmoid_(v); break;
    case 12: r = 1.0f / v; break;
    case 13: r = -floor_(-v); break;
    default: r = nan_();
    }
    store_f(out, i, dt, r);
  }
}

// Strided copy of elem-byte elements: out[i] = in[offset0 + sum(idx*stride0)].
// Transpose, Expand, Slice, Concat (one launch per input) and Pad's
// interior are this kernel.
extern "C" __global__ void strided_copy(const u8* in, u8* out, i64 n, int elem, Index x) {
  for (i64 i = gtid(); i < n; i += gstride()) {
    i64 is, io, unused;
    locate(x, i, &is, &io, &unused);
    const u8* s = in + is * elem;
    u8* d = out + io * elem;
    if (elem == 4) *(unsigned*)d = *(const unsigned*)s;
    else if (elem == 8) *(u64*)d = *(const u64*)s;
    else for (int k = 0; k < elem; k++) d[k] = s[k];
  }
}

// Fill n elem-byte elements with a value (up to 8 bytes, little-endian).
extern "C" __global__ void fill(u8* out, i64 n, int elem, u64 value) {
  for (i64 i = gtid(); i < n; i += gstride())
    for (int k = 0; k < elem; k++) out[i * elem + k] = (u8)(value >> (8 * k));
}

// Pad modes 1 reflect, 2 edge, 3 wrap over a [rank] view: x.dims are the
// output's, strides[0] the input's strides, offset[0] unused; lo the
// leading pads, inDims the input dims (mode 0, constant, is fill +
// strided_copy).
extern "C" __global__ void pad_mode(const u8* in, u8* out, i64 n, int elem, int mode, Index x, Index lo) {
  for (i64 i = gtid(); i < n; i += gstride()) {
    i64 rem = i, src = 0;
    for (int d = (int)x.rank - 1; d >= 0; d--) {
      i64 q = rem / x.dims[d], c = rem - q * x.dims[d];
      rem = q;
      i64 len = lo.dims[d], p = c - lo.strides[0][d];
      if (mode == 1) {
        if (len == 1) p = 0;
        else { i64 per = 2 * (len - 1); p %= per; if (p < 0) p += per; if (p >= len) p = per - p; }
      } else if (mode == 2) {
        p = p < 0 ? 0 : (p >= len ? len - 1 : p);
      } else {
        p %= len; if (p < 0) p += len;
      }
      src += p * x.strides[0][d];
    }
    for (int k = 0; k < elem; k++) out[i * elem + k] = in[src * elem + k];
  }
}

// Gather along an axis: data viewed [outer, axisLen, inner], indices
// (int32 if idx32, else int64) flat [nidx]; out [outer, nidx, inner].
extern "C" __global__ void gather(const u8* data, const void* idx, u8* out, i64 outer, i64 axisLen, i64 inner, i64 nidx, int elem, int idx32) {
  i64 n = outer * nidx * inner;
  for (i64 i = gtid(); i < n; i += gstride()) {
    i64 in_ = i % inner, t = i / inner, j = t % nidx, o = t / nidx;
    i64 k = idx32 ? ((const int*)idx)[j] : ((const i64*)idx)[j];
    if (k < 0) k += axisLen;
    if (k < 0 || k >= axisLen) k = 0; // the host checks constant indices
    const u8* s = data + ((o * axisLen + k) * inner + in_) * elem;
    for (int b = 0; b < elem; b++) out[i * elem + b] = s[b];
  }
}

// GatherElements / ScatterElements over [outer, len, inner] views of the
// data (dataLen along the axis) and of the indices (idxLen along it).
extern "C" __global__ void gather_elements_f32(const float* data, const i64* idx, float* out, i64 outer, i64 idxLen, i64 inner, i64 dataLen) {
  i64 n = outer * idxLen * inner;
  for (i64 i = gtid(); i < n; i += gstride()) {
    i64 in_ = i % inner, o = i / (idxLen * inner);
    i64 k = idx[i];
    if (k < 0) k += dataLen;
    out[i] = data[(o * dataLen + k) * inner + in_];
  }
}
// reduction: 0 none, 1 add (atomic; duplicates accumulate), 2 mul, 3 max, 4 min.
extern "C" __global__ void scatter_elements_f32(float* out, const i64* idx, const float* upd, i64 outer, i64 idxLen, i64 inner, i64 dataLen, int reduction) {
  i64 n = outer * idxLen * inner;
  for (i64 i = gtid(); i < n; i += gstride()) {
    i64 in_ = i % inner, o = i / (idxLen * inner);
    i64 k = idx[i];
    if (k < 0) k += dataLen;
    float* d = out + (o * dataLen + k) * inner + in_;
    switch (reduction) {
    case 1: __nvvm_atom_add_gen_f(d, upd[i]); break;
    case 2: *d *= upd[i]; break;
    case 3: *d = max_(*d, upd[i]); break;
    case 4: *d = min_(*d, upd[i]); break;
    default: *d = upd[i];
    }
  }
}

// ---- reductions over [outer, r, inner] -------------------------------

// op 0 sum, 1 max, 2 mean, 3 sum of squares. One thread per output; rows
// of the reduced axis are read with stride inner (coalesced across
// threads when inner > 1). Sums accumulate in float32 pairwise per thread
// block of 8 (the CPU backend accumulates in float32 too).
extern "C" __global__ void reduce_fp(const void* in, void* out, i64 outer, i64 r, i64 inner, int op, int dt) {
  i64 n = outer * inner;
  for (i64 i = gtid(); i < n; i += gstride()) {
    i64 o = i / inner, k = i % inner;
    i64 base = o * r * inner + k;
    float acc = op == 1 ? -inf_() : 0.0f;
    for (i64 j = 0; j < r; j++) {
      float v = load_as_f(in, base + j * inner, dt);
      if (op == 1) acc = max_(acc, v);
      else if (op == 3) acc += v * v;
      else acc += v;
    }
    if (op == 2) acc /= (float)r;
    store_f(out, i, dt, acc);
  }
}
// Row reduction (inner == 1, long rows): one block per row.
__device__ static float block_sum(float v, float* sh) {
  int t = tid();
  sh[t] = v;
  sync();
  for (int s = ROW / 2; s > 0; s >>= 1) {
    if (t < s) sh[t] += sh[t + s];
    sync();
  }
  float r = sh[0];
  sync();
  return r;
}
__device__ static float block_max(float v, float* sh) {
  int t = tid();
  sh[t] = v;
  sync();
  for (int s = ROW / 2; s > 0; s >>= 1) {
    if (t < s) sh[t] = max_(sh[t], sh[t + s]);
    sync();
  }
  float r = sh[0];
  sync();
  return r;
}
extern "C" __global__ void reduce_rows_fp(const void* in, void* out, i64 rows, i64 cols, int op, int dt) {
  __shared__ float sh[ROW];
  for (i64 row = bid(); row < rows; row += nbid()) {
    float acc = op == 1 ? -inf_() : 0.0f;
    for (i64 j = tid(); j < cols; j += ROW) {
      float v = load_as_f(in, row * cols + j, dt);
      acc = op == 1 ? max_(acc, v) : (op == 3 ? acc + v * v : acc + v);
    }
    acc = op == 1 ? block_max(acc, sh) : block_sum(acc, sh);
    if (tid() == 0) store_f(out, row, dt, op == 2 ? acc / (float)cols : acc);
  }
}
extern "C" __global__ void argmax_f32(const float* in, i64* out, i64 outer, i64 r, i64 inner, int selectLast) {
  i64 n = outer * inner;
  for (i64 i = gtid(); i < n; i += gstride()) {
    i64 o = i / inner, k = i % inner;
    const float* p = in + o * r * inner + k;
    i64 best = 0;
    float bv = p[0];
    for (i64 j = 1; j < r; j++) {
      float v = p[j * inner];
      if (isnan_(bv)) break;
      if (v > bv || isnan_(v) || (selectLast && v == bv)) { bv = v; best = j; }
    }
    out[i] = best;
  }
}
extern "C" __global__ void cumsum_f32(const float* in, float* out, i64 outer, i64 r, i64 inner, int exclusive, int reverse) {
  i64 n = outer * inner;
  for (i64 i = gtid(); i < n; i += gstride()) {
    i64 o = i / inner, k = i % inner;
    const float* p = in + o * r * inner + k;
    float* q = out + o * r * inner + k;
    float acc = 0.0f;
    for (i64 jj = 0; jj < r; jj++) {
      i64 j = reverse ? r - 1 - jj : jj;
      float v = p[j * inner];
      if (exclusive) { q[j * inner] = acc; acc += v; }
      else { acc += v; q[j * inner] = acc; }
    }
  }
}

// ---- fused row kernels -----------------------------------------------

// Softmax / LogSoftmax over rows of cols (the axis moved last by the host).
extern "C" __global__ void softmax_f32(const float* in, float* out, i64 rows, i64 cols, int logMode) {
  __shared__ float sh[ROW];
  for (i64 row = bid(); row < rows; row += nbid()) {
    const float* p = in + row * cols;
    float* q = out + row * cols;
    float m = -inf_();
    for (i64 j = tid(); j < cols; j += ROW) m = max_(m, p[j]);
    m = block_max(m, sh);
    float s = 0.0f;
    for (i64 j = tid(); j < cols; j += ROW) s += exp_(p[j] - m);
    s = block_sum(s, sh);
    if (logMode) {
      float ls = log_(s);
      for (i64 j = tid(); j < cols; j += ROW) q[j] = p[j] - m - ls;
    } else {
      float inv = 1.0f / s;
      for (i64 j = tid(); j < cols; j += ROW) q[j] = exp_(p[j] - m) * inv;
    }
  }
}
// Gradient of softmax (y the output, dy the incoming gradient):
// dx = y * (dy - sum(dy*y)); logMode: dx = dy - exp(y) * sum(dy).
extern "C" __global__ void softmax_grad_f32(const float* y, const float* dy, float* dx, i64 rows, i64 cols, int logMode) {
  __shared__ float sh[ROW];
  for (i64 row = bid(); row < rows; row += nbid()) {
    const float* py = y + row * cols;
    const float* pd = dy + row * cols;
    float* q = dx + row * cols;
    float s = 0.0f;
    for (i64 j = tid(); j < cols; j += ROW) s += logMode ? pd[j] : pd[j] * py[j];
    s = block_sum(s, sh);
    for (i64 j = tid(); j < cols; j += ROW) q[j] = logMode ? pd[j] - exp_(py[j]) * s : py[j] * (pd[j] - s);
  }
}
// LayerNorm over rows: y = (x-mean)/sqrt(var+eps)*scale + bias, with the
// mean and inverse deviation saved for the gradient (may be null).
extern "C" __global__ void layernorm_f32(const float* x, const float* scale, const float* bias, float* y, float* meanOut, float* invOut, i64 rows, i64 cols, float eps) {
  __shared__ float sh[ROW];
  for (i64 row = bid(); row < rows; row += nbid()) {
    const float* p = x + row * cols;
    float s = 0.0f;
    for (i64 j = tid(); j < cols; j += ROW) s += p[j];
    float mean = block_sum(s, sh) / (float)cols;
    float v = 0.0f;
    for (i64 j = tid(); j < cols; j += ROW) { float d = p[j] - mean; v += d * d; }
    float var = block_sum(v, sh) / (float)cols;
    float inv = 1.0f / sqrt_(var + eps);
    for (i64 j = tid(); j < cols; j += ROW) {
      float r = (p[j] - mean) * inv * scale[j];
      y[row * cols + j] = bias ? r + bias[j] : r;
    }
    if (tid() == 0) {
      if (meanOut) meanOut[row] = mean;
      if (invOut) invOut[row] = inv;
    }
  }
}
// GELU, exact (erf) or tanh approximation, and its gradient.
extern "C" __global__ void gelu_f32(const float* x, float* y, i64 n, int tanhApprox) {
  for (i64 i = gtid(); i < n; i += gstride()) {
    float v = x[i];
    y[i] = tanhApprox ? 0.5f * v * (1.0f + tanh_(0.7978845608f * (v + 0.044715f * v * v * v)))
                      : 0.5f * v * (1.0f + erf_(v * 0.7071067812f));
  }
}
extern "C" __global__ void gelu_grad_f32(const float* x, const float* dy, float* dx, i64 n) {
  for (i64 i = gtid(); i < n; i += gstride()) {
    float v = x[i];
    float cdf = 0.5f * (1.0f + erf_(v * 0.7071067812f));
    float pdf = 0.3989422804f * exp_(-0.5f * v * v);
    dx[i] = dy[i] * (cdf + v * pdf);
  }
}
// Softmax cross-entropy with integer targets over rows of classes:
// loss[row] = logsumexp - logit[target] (0 for ignoreIndex), and the
// log-probabilities for the gradient.
extern "C" __global__ void softmax_xent_f32(const float* logits, const i64* target, float* loss, float* logp, i64 rows, i64 cols, i64 ignoreIndex) {
  __shared__ float sh[ROW];
  for (i64 row = bid(); row < rows; row += nbid()) {
    const float* p = logits + row * cols;
    float m = -inf_();
    for (i64 j = tid(); j < cols; j += ROW) m = max_(m, p[j]);
    m = block_max(m, sh);
    float s = 0.0f;
    for (i64 j = tid(); j < cols; j += ROW) s += exp_(p[j] - m);
    float lse = m + log_(block_sum(s, sh));
    if (logp) for (i64 j = tid(); j < cols; j += ROW) logp[row * cols + j] = p[j] - lse;
    if (tid() == 0) {
      i64 t = target[row];
      loss[row] = (t == ignoreIndex || t < 0 || t >= cols) ? 0.0f : lse - p[t];
    }
  }
}

// BatchNorm (training): per channel of [N, C, HW], the batch mean and
// biased variance, the normalised output, and the running statistics
// updated in place with momentum m (PyTorch's convention: running =
// (1-m)*running + m*batch; the host passes 1 - ONNX's momentum), the
// variance unbiased when asked (graph.UnbiasedVarAttr).
extern "C" __global__ void batchnorm_train_f32(const float* x, const float* scale, const float* bias, float* y,
    float* runMean, float* runVar, float* saveMean, float* saveInv, i64 N, i64 C, i64 HW, float eps, float momentum, int unbiased) {
  __shared__ float sh[ROW];
  for (i64 c = bid(); c < C; c += nbid()) {
    i64 cnt = N * HW;
    float s = 0.0f;
    for (i64 k = tid(); k < cnt; k += ROW) s += x[(k / HW) * C * HW + c * HW + k % HW];
    float mean = block_sum(s, sh) / (float)cnt;
    float v = 0.0f;
    for (i64 k = tid(); k < cnt; k += ROW) { float d = x[(k / HW) * C * HW + c * HW + k % HW] - mean; v += d * d; }
    float var = block_sum(v, sh) / (float)cnt;
    float inv = 1.0f / sqrt_(var + eps);
    for (i64 k = tid(); k < cnt; k += ROW) {
      i64 at = (k / HW) * C * HW + c * HW + k % HW;
      y[at] = (x[at] - mean) * inv * scale[c] + bias[c];
    }
    if (tid() == 0) {
      if (runMean) runMean[c] = (1.0f - momentum) * runMean[c] + momentum * mean;
      if (runVar) runVar[c] = (1.0f - momentum) * runVar[c] + momentum * (unbiased ? var * ((float)cnt / (float)(cnt > 1 ? cnt - 1 : 1)) : var);
      if (saveMean) saveMean[c] = mean;
      if (saveInv) saveInv[c] = inv;
    }
  }
}

// ---- windows ---------------------------------------------------------

// im2col for 2-D convolution of one image and group: col[(c*kh+i)*kw+j][oy*ow+ox].
// elem is 4 (float32) or 2 (float16, bfloat16: zero is all-zero bits).
extern "C" __global__ void im2col(const void* img, void* col, i64 C, i64 H, i64 W, i64 KH, i64 KW, i64 OH, i64 OW,
    i64 sh_, i64 sw, i64 ph, i64 pw, i64 dh, i64 dw, int elem) {
  i64 n = C * KH * KW * OH * OW;
  for (i64 i = gtid(); i < n; i += gstride()) {
    i64 ox = i % OW, t = i / OW, oy = t % OH; t /= OH;
    i64 kj = t % KW; t /= KW;
    i64 ki = t % KH, c = t / KH;
    i64 y = oy * sh_ - ph + ki * dh, x = ox * sw - pw + kj * dw;
    int in = y >= 0 && y < H && x >= 0 && x < W;
    i64 at = (c * H + y) * W + x;
    if (elem == 4) ((unsigned*)col)[i] = in ? ((const unsigned*)img)[at] : 0u;
    else ((u16*)col)[i] = in ? ((const u16*)img)[at] : (u16)0;
  }
}
// col2im: the adjoint of im2col (ConvTranspose and the input gradient),
// accumulated into img (zeroed by the host first).
extern "C" __global__ void col2im_f32(const float* col, float* img, i64 C, i64 H, i64 W, i64 KH, i64 KW, i64 OH, i64 OW,
    i64 sh_, i64 sw, i64 ph, i64 pw, i64 dh, i64 dw) {
  i64 n = C * H * W;
  for (i64 i = gtid(); i < n; i += gstride()) {
    i64 x = i % W, t = i / W, y = t % H, c = t / H;
    float acc = 0.0f;
    for (i64 ki = 0; ki < KH; ki++) {
      i64 yy = y + ph - ki * dh;
      if (yy < 0 || yy % sh_ != 0) continue;
      i64 oy = yy / sh_;
      if (oy >= OH) continue;
      for (i64 kj = 0; kj < KW; kj++) {
        i64 xx = x + pw - kj * dw;
        if (xx < 0 || xx % sw != 0) continue;
        i64 ox = xx / sw;
        if (ox >= OW) continue;
        acc += col[(((c * KH + ki) * KW + kj) * OH + oy) * OW + ox];
      }
    }
    img[i] += acc;
  }
}
// Pooling over [NC, H, W]: mode 0 max (indices, row-major flat within the
// image, when idx is not null), 1 average excluding pads, 2 average
// including them.
extern "C" __global__ void pool2d_f32(const float* in, float* out, i64* idx, i64 NC, i64 H, i64 W, i64 OH, i64 OW,
    i64 KH, i64 KW, i64 sh_, i64 sw, i64 ph, i64 pw, i64 dh, i64 dw, int mode) {
  i64 n = NC * OH * OW;
  for (i64 i = gtid(); i < n; i += gstride()) {
    i64 ox = i % OW, t = i / OW, oy = t % OH, nc = t / OH;
    const float* p = in + nc * H * W;
    float acc = mode == 0 ? -inf_() : 0.0f;
    i64 best = -1, cnt = 0;
    for (i64 ki = 0; ki < KH; ki++) {
      i64 y = oy * sh_ - ph + ki * dh;
      for (i64 kj = 0; kj < KW; kj++) {
        i64 x = ox * sw - pw + kj * dw;
        if (y < 0 || y >= H || x < 0 || x >= W) { if (mode == 2 && y < H + ph && x < W + pw) cnt++; continue; }
        float v = p[y * W + x];
        if (mode == 0) { if (v > acc || best < 0 || isnan_(v)) { acc = v; best = y * W + x; } }
        else { acc += v; cnt++; }
      }
    }
    out[i] = mode == 0 ? acc : acc / (float)(cnt > 0 ? cnt : 1);
    if (mode == 0 && idx) idx[i] = nc * H * W + best;
  }
}

// ---- random ----------------------------------------------------------

// Counter-based uniform samples (SplitMix64 of seed+offset+i): the same
// numbers for the same seed and offset whatever the launch geometry.
extern "C" __global__ void random_uniform_f32(float* out, i64 n, u64 seed, u64 offset, float low, float high) {
  for (i64 i = gtid(); i < n; i += gstride()) {
    u64 z = seed + (offset + (u64)i) * 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    float u = (float)(z >> 40) * (1.0f / 16777216.0f);
    out[i] = low + (high - low) * u;
  }
}

// Dropout in training mode: keep with probability 1-ratio (the same
// counter-based stream as random_uniform_f32), scale kept values by
// 1/(1-ratio); mask (bool, may be null) records what was kept.
extern "C" __global__ void dropout_f32(const float* x, float* y, u8* mask, i64 n, u64 seed, u64 offset, float ratio) {
  float scale = ratio < 1.0f ? 1.0f / (1.0f - ratio) : 0.0f;
  for (i64 i = gtid(); i < n; i += gstride()) {
    u64 z = seed + (offset + (u64)i) * 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    float u = (float)(z >> 40) * (1.0f / 16777216.0f);
    int keep = u >= ratio;
    y[i] = keep ? x[i] * scale : 0.0f;
    if (mask) mask[i] = (u8)keep;
  }
}

// ---- optimizer and gradient ops (graph/optimizer_ops.go) -------------

// AdamUpdate for one tensor (graph/optimizer_ops.go), PyTorch 1.13's
// single-tensor arithmetic with the same fused multiply-adds as the CPU
// backend: consts = (b1, b2, 1-b1, 1-b2, eps), hyper = this tensor's row
// (-lr/bc1, sqrt(bc2), wd, 1-lr*wd, l2), both in device memory so that a
// captured step reads the current values. mx (amsgrad) may be null.
extern "C" __global__ void adam_update_f32(float* p, const float* g, float* m, float* v, float* mx, i64 n,
    const float* consts, const float* hyper, int maximize, int decoupled) {
  float b1 = consts[0], b2 = consts[1], omb1 = consts[2], omb2 = consts[3], eps = consts[4];
  float negStep = hyper[0], bc2 = hyper[1], wd = hyper[2], decay = hyper[3];
  int l2 = hyper[4] != 0.0f;
  for (i64 i = gtid(); i < n; i += gstride()) {
    float gi = maximize ? -g[i] : g[i], pi = p[i];
    if (decoupled) pi *= decay;
    else if (l2) gi = __builtin_fmaf(wd, pi, gi);
    float mi = __builtin_fmaf(omb1, gi, m[i] * b1);
    float vi = __builtin_fmaf(omb2 * gi, gi, v[i] * b2);
    m[i] = mi;
    v[i] = vi;
    if (mx) {
      float x = mx[i];
      if (vi > x || isnan_(vi)) x = vi;
      mx[i] = x;
      vi = x;
    }
    float denom = sqrt_(vi) / bc2 + eps;
    p[i] = pi + negStep * mi / denom;
  }
}
// SGDUpdate for one tensor: consts = (momentum, 1-dampening), hyper =
// (-lr, weight_decay, first); buf null without momentum.
extern "C" __global__ void sgd_update_f32(float* p, const float* g, float* buf, i64 n,
    const float* consts, const float* hyper, int nesterov, int maximize) {
  float mom = consts[0], damp = consts[1];
  float negLR = hyper[0], wd = hyper[1];
  int first = hyper[2] != 0.0f;
  for (i64 i = gtid(); i < n; i += gstride()) {
    float d = maximize ? -g[i] : g[i];
    if (wd != 0.0f) d = __builtin_fmaf(wd, p[i], d);
    if (buf) {
      float b = first ? d : __builtin_fmaf(damp, d, buf[i] * mom);
      buf[i] = b;
      d = nesterov ? __builtin_fmaf(mom, b, d) : b;
    }
    p[i] = __builtin_fmaf(negLR, d, p[i]);
  }
}
// AccumulateGrad: sum = fresh ? g : sum + g (fresh a bool in memory).
extern "C" __global__ void accumulate_f32(float* sum, const float* g, i64 n, const u8* fresh) {
  int f = *fresh;
  for (i64 i = gtid(); i < n; i += gstride()) sum[i] = f ? g[i] : sum[i] + g[i];
}
// UnscaleGrads: x *= *s; *foundInf (bool) set when an element was
// non-finite before scaling (the host zeroes it first).
extern "C" __global__ void unscale_f32(float* x, i64 n, const float* s, u8* foundInf) {
  float k = *s;
  for (i64 i = gtid(); i < n; i += gstride()) {
    float v = x[i];
    if (isnan_(v) || fabs_(v) == inf_()) *foundInf = 1;
    x[i] = v * k;
  }
}
// ClipGradNorm, second pass: norms[0..t) hold the per-tensor norms (the
// first pass is reduce_rows_fp op 3 then sqrt); out the total norm;
// each tensor then scales by clip_coef (scale_by_clip_f32).
extern "C" __global__ void clip_norm_total_f32(const float* norms, i64 t, const float* maxNorm, float* total, float* coef) {
  if (gtid() != 0) return;
  float s = 0.0f;
  for (i64 i = 0; i < t; i++) s += norms[i] * norms[i];
  float tot = sqrt_(s);
  *total = tot;
  float c = (1.0f / (tot + 1e-6f)) * *maxNorm;
  *coef = c < 1.0f ? c : 1.0f;
}
extern "C" __global__ void scale_by_f32(float* x, i64 n, const float* coef) {
  float c = *coef;
  if (c == 1.0f) return;
  for (i64 i = gtid(); i < n; i += gstride()) x[i] *= c;
}
// ClipGradValue: clamp to [-clip, clip], NaN kept.
extern "C" __global__ void clip_value_f32(float* x, i64 n, const float* clip) {
  float c = *clip;
  for (i64 i = gtid(); i < n; i += gstride()) {
    float v = x[i];
    x[i] = v > c ? c : (v < -c ? -c : v);
  }
}
