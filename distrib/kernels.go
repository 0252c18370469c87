package distrib

import "github.com/onnxtrain/onnxtrain/graph"

// The element kernels of the collectives. On amd64 with AVX2 the bulk of
// each slice goes through the assembly in kernels_amd64.s (16 or 8
// elements at a time) and the tail through the Go loops below, which are
// also the kernels of every other architecture. Both give the same bits.

// addTo adds src into dst element by element (len(src) >= len(dst)).
func addTo(dst, src []float32) {
	src = src[:len(dst)]
	done := 0
	if useAVX2 && len(dst) >= 16 {
		done = len(dst) &^ 15
		addF32AVX2(&dst[0], &src[0], done)
	}
	addToGeneric(dst[done:], src[done:])
}

// toBF16 rounds src to bfloat16 (to nearest even, as PyTorch does; NaNs
// stay quiet NaNs).
func toBF16(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	done := 0
	if useAVX2 && len(src) >= 16 {
		done = len(src) &^ 15
		toBF16AVX2(&dst[0], &src[0], done)
	}
	toBF16Generic(dst[done:], src[done:])
}

// fromBF16 widens bfloat16 values to float32 (exactly).
func fromBF16(dst []float32, src []uint16) {
	src = src[:len(dst)]
	done := 0
	if useAVX2 && len(dst) >= 8 {
		done = len(dst) &^ 7
		fromBF16AVX2(&dst[0], &src[0], done)
	}
	fromBF16Generic(dst[done:], src[done:])
}

// addBF16 adds bfloat16 values into float32 ones.
func addBF16(dst []float32, src []uint16) {
	src = src[:len(dst)]
	done := 0
	if useAVX2 && len(dst) >= 8 {
		done = len(dst) &^ 7
		addBF16AVX2(&dst[0], &src[0], done)
	}
	addBF16Generic(dst[done:], src[done:])
}

// roundBF16 rounds float32 values to the nearest bfloat16 value in place.
func roundBF16(x []float32) {
	done := 0
	if useAVX2 && len(x) >= 8 {
		done = len(x) &^ 7
		roundBF16AVX2(&x[0], done)
	}
	roundBF16Generic(x[done:])
}

func divideBy(x []float32, d float32) {
	for i := range x {
		x[i] /= d
	}
}

func addToGeneric(dst, src []float32) {
	src = src[:len(dst)]
	i := 0
	for ; i+8 <= len(dst); i += 8 {
		d := dst[i : i+8 : i+8]
		s := src[i : i+8 : i+8]
		d[0] += s[0]
		d[1] += s[1]
		d[2] += s[2]
		d[3] += s[3]
		d[4] += s[4]
		d[5] += s[5]
		d[6] += s[6]
		d[7] += s[7]
	}
	for ; i < len(dst); i++ {
		dst[i] += src[i]
	}
}

func toBF16Generic(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	for i, f := range src {
		dst[i] = graph.Float32ToBFloat16(f)
	}
}

func fromBF16Generic(dst []float32, src []uint16) {
	src = src[:len(dst)]
	for i, h := range src {
		dst[i] = graph.BFloat16ToFloat32(h)
	}
}

func addBF16Generic(dst []float32, src []uint16) {
	src = src[:len(dst)]
	for i, h := range src {
		dst[i] += graph.BFloat16ToFloat32(h)
	}
}

func roundBF16Generic(x []float32) {
	for i, f := range x {
		x[i] = graph.BFloat16ToFloat32(graph.Float32ToBFloat16(f))
	}
}
