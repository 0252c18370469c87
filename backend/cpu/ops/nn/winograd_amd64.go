//go:build amd64 && !purego

package nn

import (
	"golang.org/x/sys/cpu"

	"github.com/onnxtrain/onnxtrain/backend/cpu/gemm"
)

// winoAVX2 reports whether the CPU (and OS) support the transforms in
// winograd_amd64.s.
var winoAVX2 = cpu.X86.HasAVX2

// winoAVX512 reports whether the 16-tile input transform runs with
// AVX-512 (winoInput16AVX512): where the GEMM's AVX-512 kernels do (the
// CPU has AVX-512F and ONNXTRAIN_NO_AVX512 is not set).
var winoAVX512 = winoAVX2 && gemm.AVX512()

//go:noescape
func winoInput16AVX512(dst *float32, dstStride int, src *float32, offs *int, plane, wp, channels, chStride int)

//go:noescape
func winoInputAVX2(dst *float32, dstStride int, src *float32, offs *int, plane, wp, channels, chStride, groups int)

//go:noescape
func winoOutput8AVX2(y *float32, offs *int, p *float32, ps, pm, oplane, ow, channels int, acc bool, pfa, pfb int)

// winoInput transforms the patches of len(offs) tiles (8 or 16) over
// channels channels (see winoInputAVX2): tile j's patch of channel c at
// src[offs[j] + c·plane] (rows wp apart), position ξ to dst[ξ·dstStride +
// c·chStride + j]. It checks the bounds the assembly relies on.
func winoInput(dst []float32, dstStride int, src []float32, offs []int, plane, wp, channels, chStride int) {
	groups := len(offs) / 8
	if channels <= 0 || groups == 0 {
		return
	}
	if groups > 2 || len(offs) != 8*groups {
		panic("nn: winoInput takes 8 or 16 tiles")
	}
	_ = dst[15*dstStride+(channels-1)*chStride+len(offs)-1]
	last := (channels-1)*plane + 3*wp + 4
	for _, o := range offs {
		_ = src[o : o+last]
	}
	if groups == 2 && winoAVX512 {
		winoInput16AVX512(&dst[0], dstStride, &src[0], &offs[0], plane, wp, channels, chStride)
		return
	}
	winoInputAVX2(&dst[0], dstStride, &src[0], &offs[0], plane, wp, channels, chStride, groups)
}

// winoOutput8 is the output transform of 8 tiles over channels channels
// (see winoOutput8AVX2), checking the bounds the assembly relies on. next
// holds the output offsets of the tiles the caller transforms next (up to
// 8, the first and last of them fetched ahead; none: the 8 tiles' own).
func winoOutput8(y []float32, offs []int, p []float32, ps, pm, oplane, ow, channels int, acc bool, next []int) {
	if channels <= 0 {
		return
	}
	_ = p[15*ps+(channels-1)*pm+7]
	_ = offs[7]
	last := (channels-1)*oplane + ow + 2
	for _, o := range offs[:8] {
		_ = y[o : o+last]
	}
	if len(next) == 0 {
		next = offs[:8]
	}
	// Only lines inside y are asked for (an edge tile's second row or
	// column may lie past it).
	span := (channels-1)*oplane + ow + 1
	a, b := next[0], next[len(next)-1]+1
	if a < 0 || a+span > len(y) {
		a = offs[0]
	}
	if b < 0 || b+span > len(y) {
		b = offs[0]
	}
	winoOutput8AVX2(&y[0], &offs[0], &p[0], ps, pm, oplane, ow, channels, acc, 4*a, 4*b)
}

//go:noescape
func winoKernelsAVX2(dst *float32, pos *int, src *float32, idx *int32, mask *int32, qStride, k int, smask *int32)

// winoKernels transforms shared indices [0, k) of one 6-row A strip's
// kernels (see winoKernelsAVX2): row i of index q is the 3×3 kernel at
// src[q·qStride + i·rowStride] (rows below rows; the others transform
// zeros), position ξ of its transform goes to dst[pos[ξ] + q·6 + i]. It
// reports the indices it did: all of them, or none where the assembly's
// 32-bit lane offsets would overflow.
func winoKernels(dst []float32, pos *[16]int, src []float32, rowStride, qStride, rows, k int) int {
	if k < 1 || rows <= 0 || rows > 6 || int64((rows-1)*rowStride) > 1<<31-1 {
		return 0
	}
	var idx, mask, smask [8]int32
	for i := 0; i < 8; i++ {
		if i < rows {
			idx[i], mask[i] = int32(i*rowStride), -1
		}
		if i < 6 {
			smask[i] = -1
		}
	}
	var byteOff [16]int
	maxPos := 0
	for xi, p := range pos {
		byteOff[xi] = 4 * p
		maxPos = max(maxPos, p)
	}
	_ = dst[maxPos+(k-1)*6+5]
	_ = src[(k-1)*qStride+(rows-1)*rowStride+8]
	winoKernelsAVX2(&dst[0], &byteOff[0], &src[0], &idx[0], &mask[0], qStride, k, &smask[0])
	return k
}
