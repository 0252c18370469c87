//go:build amd64 && !purego

package nn

import (
	"math/rand/v2"
	"testing"

	"github.com/onnxtrain/onnxtrain/internal/testutil"
	"github.com/stretchr/testify/assert"
)

// TestWinoInput16AVX512SameBits checks the 16-tile AVX-512 input
// transform against the AVX2 one (two 8-tile groups, the same arithmetic)
// bit for bit, on patches at scattered offsets over several channels, and
// against the Go transform within rounding of the same sums (it adds the
// same values in the same order: exactly).
func TestWinoInput16AVX512SameBits(t *testing.T) {
	if !winoAVX512 {
		testutil.SkipHardware(t, "no AVX-512F on this CPU (or ONNXTRAIN_NO_AVX512 set)")
	}
	rng := rand.New(rand.NewPCG(21, 22))
	const channels, wp, plane, chStride = 5, 37, 37 * 11, 16
	src := make([]float32, channels*plane)
	for i := range src {
		src[i] = float32(rng.NormFloat64())
	}
	offs := make([]int, 16)
	for j := range offs {
		offs[j] = rng.IntN(7)*wp + rng.IntN(wp-4) // the patch's 4 rows inside the plane
	}
	dstStride := channels*chStride + 3
	run := func(avx512 bool) []float32 {
		saved := winoAVX512
		winoAVX512 = avx512
		defer func() { winoAVX512 = saved }()
		dst := make([]float32, 16*dstStride)
		winoInput(dst, dstStride, src, offs, plane, wp, channels, chStride)
		return dst
	}
	wide, narrow := run(true), run(false)
	assert.Equal(t, narrow, wide)
	var d [16]float32
	for c := 0; c < channels; c++ {
		for j, o := range offs {
			for r := 0; r < 4; r++ {
				copy(d[4*r:4*r+4], src[c*plane+o+r*wp:])
			}
			want := make([]float32, 15*dstStride+1)
			winoInputTransform(&d, want, dstStride)
			for xi := 0; xi < 16; xi++ {
				assert.Equal(t, want[xi*dstStride], wide[xi*dstStride+c*chStride+j], "channel %d tile %d position %d", c, j, xi)
			}
		}
	}
}
