//go:build amd64 && !purego

package gemm

import (
	"os"
	"strings"

	"golang.org/x/sys/cpu"
)

// avx2Kernel6x16 is the amd64 micro-kernel: a 6×16 tile held in twelve ymm
// accumulators (6 rows × two 8-float vectors), updated per k step by two
// B vector loads, six A broadcasts and twelve FMAs, so the two FMA pipes
// stay busy while loads use the remaining ports. Block sizes: a kc×16 B
// strip (16 KiB at kc=256) plus a 6×kc A strip stay in the 32 KiB L1, the
// mc×kc A block (144 KiB) in the 512 KiB L2, and the kc×nc B panel in L3.
var avx2Kernel6x16 = microKernel{name: "avx2fma6x16", mr: 6, nr: 16, mc: 144, kc: 256, nc: 4096, fn: kernel6x16, half: kernel6x8of16,
	rowA: kernel6x16RowA, halfRowA: kernel6x8of16RowA}

// hasAVX2FMA reports whether the CPU (and OS) support the assembly kernel.
var hasAVX2FMA = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// hasAVX512 reports whether the CPU (and OS, for the zmm state) support
// the AVX-512 pair kernel, and the environment does not turn it off:
// ONNXTRAIN_NO_AVX512=1 runs the AVX2 kernels on an AVX-512 host, so that
// one machine measures what a CPU without AVX-512 gets (bench/compare.py
// --no-avx512 sets it, and the peers' equivalents, for both sides).
var hasAVX512 = hasAVX2FMA && cpu.X86.HasAVX512F && os.Getenv("ONNXTRAIN_NO_AVX512") == ""

// AVX512 reports whether the GEMM uses its AVX-512 kernel (onnxtrain env).
func AVX512() bool { return hasAVX512 }

func init() {
	if hasAVX512 {
		avx2Kernel6x16.pair = kernel6x32Pair
		avx2Kernel6x16.pairS = kernel6x32PairS
		avx2Kernel6x16.pairA = kernel6x32PairA
		avx2Kernel6x16.pairNT = kernel6x32PairNT
		avx2Kernel6x16.bIn, avx2Kernel6x16.bInCols = kernel6x32PairB, 32
	} else {
		avx2Kernel6x16.bIn, avx2Kernel6x16.bInCols = kernel6x16B, 16
	}
	avx2Kernel6x16.fnNT = kernel6x16NT
	if hasAVX2FMA {
		kernel = avx2Kernel6x16
	}
}

// sgemmKernel6x32Pair is implemented in kernel512_amd64.s (AVX-512F): two
// adjacent 6×16 tiles from one A strip and two B strips packed 16 wide
// (bp and bp2), bit for bit what two sgemmKernel6x16 calls store.
//
//go:noescape
func sgemmKernel6x32Pair(kc int, ap, bp, bp2, c *float32, ldc int, alpha, beta float32)

// kernel6x32Pair checks the bounds the assembly relies on and calls it:
// the two B strips consecutive in bp (the second 16·kc floats on).
func kernel6x32Pair(kc int, ap, bp, c []float32, ldc int, alpha, beta float32) {
	_ = ap[6*kc-1]
	_ = bp[32*kc-1]
	_ = c[5*ldc+31]
	sgemmKernel6x32Pair(kc, &ap[0], &bp[0], &bp[16*kc], &c[0], ldc, alpha, beta)
}

// kernel6x32PairS is kernel6x32Pair with its two B strips anywhere: the
// first tile's columns from b1, the second's from b2 (each 16 wide, kc
// deep), as a product that starts its shared indices past a strip's
// first reads them.
func kernel6x32PairS(kc int, ap, b1, b2, c []float32, ldc int, alpha, beta float32) {
	_ = ap[6*kc-1]
	_ = b1[16*kc-1]
	_ = b2[16*kc-1]
	_ = c[5*ldc+31]
	sgemmKernel6x32Pair(kc, &ap[0], &b1[0], &b2[0], &c[0], ldc, alpha, beta)
}

// sgemmKernel6x32PairA is implemented in kernel512a_amd64.s (AVX-512F):
// sgemmKernel6x32Pair reading the A strip in place, element (i, q) at
// a[i*rs + q*ks], bit for bit what the pair kernel stores from the same
// values packed.
//
//go:noescape
func sgemmKernel6x32PairA(kc int, a *float32, rs, ks int, bp, c *float32, ldc int, alpha, beta float32)

// kernel6x32PairA checks the bounds the assembly relies on and calls it.
func kernel6x32PairA(kc int, a []float32, rs, ks int, bp, c []float32, ldc int, alpha, beta float32) {
	_ = a[5*rs+(kc-1)*ks]
	_ = bp[32*kc-1]
	_ = c[5*ldc+31]
	sgemmKernel6x32PairA(kc, &a[0], rs, ks, &bp[0], &c[0], ldc, alpha, beta)
}

// sgemmKernel6x32PairB is implemented in kernel512b_amd64.s (AVX-512F):
// sgemmKernel6x32Pair reading its kc×32 B block in place, row q at
// b[q*ldb], bit for bit what the pair kernel stores from the same values
// packed; each step prefetches the two lines pf elements on from its row.
//
//go:noescape
func sgemmKernel6x32PairB(kc int, ap, b *float32, ldb int, c *float32, ldc int, alpha, beta float32, pf int)

// kernel6x32PairB checks the bounds the assembly relies on and calls it.
// (A prefetch does not fault: pf may point past b.)
func kernel6x32PairB(kc int, ap, b []float32, ldb int, c []float32, ldc int, alpha, beta float32, pf int) {
	checkBIn(kc, 32, ap, b, ldb, c, ldc)
	sgemmKernel6x32PairB(kc, &ap[0], &b[0], ldb, &c[0], ldc, alpha, beta, pf)
}

// checkBIn panics, as slicing would, unless a 6×w tile reading its kc×w B
// block in place finds a 6-row A strip kc deep, B's block (rows ldb apart)
// and C's tile (rows ldc apart) inside the slices.
func checkBIn(kc, w int, ap, b []float32, ldb int, c []float32, ldc int) {
	_ = ap[6*kc-1]
	_ = b[(kc-1)*ldb+w-1]
	_ = c[5*ldc+w-1]
}

// sgemmKernel6x16B is implemented in kernelb_amd64.s (AVX2):
// sgemmKernel6x16 reading its kc×16 B block in place, row q at b[q*ldb],
// bit for bit what it stores from the same values packed; each step
// prefetches the lines pf elements on from its row.
//
//go:noescape
func sgemmKernel6x16B(kc int, ap, b *float32, ldb int, c *float32, ldc int, alpha, beta float32, pf int)

// kernel6x16B checks the bounds the assembly relies on and calls it.
func kernel6x16B(kc int, ap, b []float32, ldb int, c []float32, ldc int, alpha, beta float32, pf int) {
	checkBIn(kc, 16, ap, b, ldb, c, ldc)
	sgemmKernel6x16B(kc, &ap[0], &b[0], ldb, &c[0], ldc, alpha, beta, pf)
}

// sgemmKernel6x16 is implemented in kernel_amd64.s. It stores
// C = alpha*(A·B) + beta*C for one 6×16 tile from an A strip packed 6 wide
// and a B strip packed 16 wide, both kc (>= 1) deep; ldc is in elements.
// beta == 0 never reads C.
//
//go:noescape
func sgemmKernel6x16(kc int, ap, bp, c *float32, ldc int, alpha, beta float32)

// kernel6x16 checks the bounds the assembly relies on and calls it.
func kernel6x16(kc int, ap, bp, c []float32, ldc int, alpha, beta float32) {
	_ = ap[6*kc-1]
	_ = bp[16*kc-1]
	_ = c[5*ldc+15]
	sgemmKernel6x16(kc, &ap[0], &bp[0], &c[0], ldc, alpha, beta)
}

// sgemmKernel6x8of16 is implemented in kernel_amd64.s: the left 6×8 half
// of sgemmKernel6x16's tile (the B strip still packed 16 wide), bit for
// bit what the full kernel stores in those columns.
//
//go:noescape
func sgemmKernel6x8of16(kc int, ap, bp, c *float32, ldc int, alpha, beta float32)

// kernel6x8of16 checks the bounds the assembly relies on and calls it.
func kernel6x8of16(kc int, ap, bp, c []float32, ldc int, alpha, beta float32) {
	_ = ap[6*kc-1]
	_ = bp[16*kc-1]
	_ = c[5*ldc+7]
	sgemmKernel6x8of16(kc, &ap[0], &bp[0], &c[0], ldc, alpha, beta)
}

// sgemmKernel6x16RowA and sgemmKernel6x8of16RowA are implemented in
// kernel_amd64.s: the two kernels above reading A in place, six rows of a
// row-major matrix lda elements apart, instead of a packed strip.
//
//go:noescape
func sgemmKernel6x16RowA(kc int, a *float32, lda int, bp, c *float32, ldc int, alpha, beta float32)

//go:noescape
func sgemmKernel6x8of16RowA(kc int, a *float32, lda int, bp, c *float32, ldc int, alpha, beta float32)

// kernel6x16RowA checks the bounds the assembly relies on and calls it.
func kernel6x16RowA(kc int, a []float32, lda int, bp, c []float32, ldc int, alpha, beta float32) {
	_ = a[5*lda+kc-1]
	_ = bp[16*kc-1]
	_ = c[5*ldc+15]
	sgemmKernel6x16RowA(kc, &a[0], lda, &bp[0], &c[0], ldc, alpha, beta)
}

// kernel6x8of16RowA checks the bounds the assembly relies on and calls it.
func kernel6x8of16RowA(kc int, a []float32, lda int, bp, c []float32, ldc int, alpha, beta float32) {
	_ = a[5*lda+kc-1]
	_ = bp[16*kc-1]
	_ = c[5*ldc+7]
	sgemmKernel6x8of16RowA(kc, &a[0], lda, &bp[0], &c[0], ldc, alpha, beta)
}

// sgemmKernel6x32PairNT is implemented in kernel512_amd64.s: the pair
// kernel with beta = 0 and non-temporal stores of C (rows 64-byte aligned).
//
//go:noescape
func sgemmKernel6x32PairNT(kc int, ap, bp, c *float32, ldc int, alpha float32)

// kernel6x32PairNT checks the bounds the assembly relies on and calls it.
func kernel6x32PairNT(kc int, ap, bp, c []float32, ldc int, alpha float32) {
	_ = ap[6*kc-1]
	_ = bp[32*kc-1]
	_ = c[5*ldc+31]
	sgemmKernel6x32PairNT(kc, &ap[0], &bp[0], &c[0], ldc, alpha)
}

// sgemmKernel6x16NT is implemented in kernel_amd64.s: sgemmKernel6x16 with
// beta = 0 and non-temporal stores of C (rows 64-byte aligned).
//
//go:noescape
func sgemmKernel6x16NT(kc int, ap, bp, c *float32, ldc int, alpha float32)

// kernel6x16NT checks the bounds the assembly relies on and calls it.
func kernel6x16NT(kc int, ap, bp, c []float32, ldc int, alpha float32) {
	_ = ap[6*kc-1]
	_ = bp[16*kc-1]
	_ = c[5*ldc+15]
	sgemmKernel6x16NT(kc, &ap[0], &bp[0], &c[0], ldc, alpha)
}

// storeFence is SFENCE: the non-temporal stores issued before it are
// globally visible before any store after it (kernel_amd64.s).
//
//go:noescape
func storeFence()

// cpuid is the CPUID instruction (kernel_amd64.s).
func cpuid(leaf, sub uint32) (a, b, c, d uint32)

// cpuVendor is CPUID's vendor string ("AuthenticAMD", "GenuineIntel", ...).
func cpuVendor() string {
	_, b, c, d := cpuid(0, 0)
	return vendorString(b, c, d)
}

// vendorString is the vendor string CPUID leaf 0 spells in EBX, EDX and
// ECX, four little-endian bytes each.
func vendorString(b, c, d uint32) string {
	var s [12]byte
	for i, r := range [3]uint32{b, d, c} {
		s[4*i], s[4*i+1], s[4*i+2], s[4*i+3] = byte(r), byte(r>>8), byte(r>>16), byte(r>>24)
	}
	return string(s[:])
}

// onAMD is whether the CPU's vendor is AMD, read once: three GEMM paths
// (viewBPays, pairATransposed, NextOperandsPrefetchHelps) were measured
// faster on AMD's Zen 4 and slower on the AVX-512 Xeon, and follow it.
var onAMD = cpuVendor() == "AuthenticAMD"

// NextOperandsPrefetchHelps reports whether SgemmSerialNext's prefetch of
// the next product's operands pays on this CPU, for callers that choose
// whether to name the next product: on AMD's Zen 4 (EPYC, both kernels) it
// made each of attention's products at ViT-B/16's and the GPT's shapes
// 0-31% faster on one thread (BenchmarkAttentionVsGEMMViT/GPT, the two
// interleaved) and the step's per-head products 7% faster; on the
// AVX-512 Xeon measured before it made them 2-8% slower (its burst held
// the line fill buffers the kernel's own loads wait on).
func NextOperandsPrefetchHelps() bool { return onAMD }

// viewBPays lets PackedProduct read B in place (microKernel.bIn, a
// BViewer's blocks) instead of packing it. On AMD's Zen 4 it made
// ResNet-50's 56×56 passes with 64 output channels 8-10% faster
// (BenchmarkResNet50OneByOne, 0.78-0.80 → 0.86 of the 2048³ GEMM; in the
// step 0.77-0.80 → 0.81-0.84). On the AVX-512 Xeon (Intel, 2 MiB L2) it
// lost: alone, the passes that take it ran 9-25% slower with AVX-512 and
// 25-49% slower with AVX2 (56×56 256 → 128 forward 114 against 170
// GFLOP/s), and with ONNXTRAIN_NO_AVX512=1 the ResNet-50 step was 3% longer
// (1,247 against 1,207 ms, its 56×56 input gradient 64 ← 256 at 0.47 of
// the GEMM against 0.81; docs/large-models.md, 6 December 2026).
var viewBPays = onAMD

// CPUTuning names, for onnxtrain env, the vendor-chosen paths this CPU
// runs (onAMD), or says that none does; empty where the CPU has no AVX2
// kernels.
func CPUTuning() string {
	if !hasAVX2FMA {
		return ""
	}
	var on []string
	for _, p := range []struct {
		on   bool
		name string
	}{
		{viewBPays, "B read in place"},
		{pairATransposed, "transposed A read in place"},
		{NextOperandsPrefetchHelps(), "the next product's operands prefetched"},
	} {
		if p.on {
			on = append(on, p.name)
		}
	}
	if len(on) == 0 {
		return "B and transposed A packed, no prefetch of the next product's operands (the AMD paths are off)"
	}
	return strings.Join(on, ", ")
}

// pairATransposed lets blocked read a transposed A in place with the
// pair kernel (rs = 1, ks = lda) under column blocks of at most
// pairAMaxCols, as it reads a row-major one: on AMD's Zen 4 attention's
// dV = Pᵀ·dO and dK = dSᵀ·Q in the ViT-B/16 step ran at 0.92-0.94 and
// 0.83-0.90 of the 2048³ GEMM in place against 0.86-0.87 and 0.76-0.83
// packed (bench --op-profile, two alternations, 6 December 2026; a k
// step's six values use 24 bytes of each line it loads, but packing
// reads every line of P or dS once more for two strip pairs); on the
// AVX-512 Xeon measured before, in place was slower (docs/large-models.md).
var pairATransposed = onAMD
