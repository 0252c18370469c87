package distrib

import (
	"math"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/assert"
)

// kernelInput mixes ordinary values with the awkward ones: rounding ties,
// NaNs (quiet and signalling), infinities, subnormals, values that round
// up to infinity.
func kernelInput(rng *rand.Rand, n int) []float32 {
	special := []uint32{0x3f808000, 0x3f818000, 0x7fc00001, 0x7f800001, 0xffa00000, 0x7f800000, 0xff800000,
		0x00000001, 0x807fffff, 0x7f7fffff, 0xff7fc000, 0, 0x80000000, 0x477fe000}
	x := make([]float32, n)
	for i := range x {
		switch rng.Intn(4) {
		case 0:
			x[i] = math.Float32frombits(special[rng.Intn(len(special))])
		case 1:
			x[i] = math.Float32frombits(rng.Uint32())
		default:
			x[i] = float32(rng.NormFloat64())
		}
	}
	return x
}

// The AVX2 kernels (where the CPU has them) give the same bits as the Go
// loops, for every length (the tails go through the Go loops).
func TestKernelsMatchGenericLoops(t *testing.T) {
	t.Logf("AVX2 kernels: %v", useAVX2)
	rng := rand.New(rand.NewSource(1))
	for _, n := range []int{0, 1, 7, 8, 15, 16, 17, 31, 33, 100, 1000, 4099} {
		a, b := kernelInput(rng, n), kernelInput(rng, n)

		got := append([]float32(nil), a...)
		want := append([]float32(nil), a...)
		addTo(got, b)
		addToGeneric(want, b)
		assert.Equal(t, sumBits(want), sumBits(got), "addTo, n=%d", n)

		h, hw := make([]uint16, n), make([]uint16, n)
		toBF16(h, a)
		toBF16Generic(hw, a)
		assert.Equal(t, hw, h, "toBF16, n=%d", n)

		w, ww := make([]float32, n), make([]float32, n)
		fromBF16(w, h)
		fromBF16Generic(ww, h)
		assert.Equal(t, bitsOf(ww), bitsOf(w), "fromBF16, n=%d", n)

		got = append(got[:0], b...)
		want = append(want[:0], b...)
		addBF16(got, h)
		addBF16Generic(want, h)
		assert.Equal(t, sumBits(want), sumBits(got), "addBF16, n=%d", n)

		got = append(got[:0], a...)
		want = append(want[:0], a...)
		roundBF16(got)
		roundBF16Generic(want)
		assert.Equal(t, bitsOf(want), bitsOf(got), "roundBF16, n=%d", n)
	}
}

// sumBits is bitsOf with every NaN made the same: which operand's NaN
// payload a sum of two NaNs keeps depends on instruction operand order,
// which Go does not specify (it differs in race-detector builds).
func sumBits(x []float32) []uint32 {
	b := bitsOf(x)
	for i, f := range x {
		if f != f {
			b[i] = 0x7fc00000
		}
	}
	return b
}

func bitsOf(x []float32) []uint32 {
	b := make([]uint32, len(x))
	for i, f := range x {
		b[i] = math.Float32bits(f)
	}
	return b
}

// Kernel throughput, to compare with the link (bytes are float32 bytes).
func BenchmarkKernels(b *testing.B) {
	const n = 1 << 18
	x, y := rankData(1, 0, n), rankData(1, 1, n)
	h := make([]uint16, n)
	toBF16(h, y)
	for _, k := range []struct {
		name string
		f    func()
	}{
		{"addTo", func() { addTo(x, y) }},
		{"addToGeneric", func() { addToGeneric(x, y) }},
		{"toBF16", func() { toBF16(h, y) }},
		{"toBF16Generic", func() { toBF16Generic(h, y) }},
		{"addBF16", func() { addBF16(x, h) }},
		{"addBF16Generic", func() { addBF16Generic(x, h) }},
	} {
		b.Run(k.name, func(b *testing.B) {
			b.SetBytes(4 * n)
			for i := 0; i < b.N; i++ {
				k.f()
			}
		})
	}
}
