package optimizer

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFMA32(t *testing.T) {
	// Rounding x*y+z once differs from rounding the product first.
	x, y, z := float32(1+1.0/(1<<12)), float32(1+1.0/(1<<12)), float32(-1)
	assert.Equal(t, float32(1.0/(1<<11)+1.0/(1<<24)), fma32(x, y, z))
	assert.NotEqual(t, x*y+z, fma32(x, y, z))
	// Exhaustive-ish check against math.FMA on values where the float64
	// sum is exact (then a single rounding to float32 is the answer).
	for i := 0; i < 2000; i++ {
		a := float32(i)*0.37 - 300
		b := float32(i%97) * 1.3e-3
		c := float32(i%13) - 6
		want := float32(math.FMA(float64(a), float64(b), float64(c)))
		assert.Equal(t, want, fma32(a, b, c))
	}
	// Double-rounding trap: x*y = 2^6 - 2^-40, z = 2^30 + 2^7. The float64
	// sum drops the -2^-40 and lands on a float32 tie, which rounds to even
	// (2^30 + 2^8); the exact sum is below the tie.
	x = float32(64 * (1 + 1.0/(1<<23)))
	y = float32(1 - 1.0/(1<<23))
	z = float32(1<<30 + 1<<7)
	assert.Equal(t, float32(1<<30+1<<8), float32(float64(x)*float64(y)+float64(z)))
	assert.Equal(t, float32(1<<30+1<<7), fma32(x, y, z))
	// Random triples against exact arithmetic, with z's exponent near the
	// product's so that ties occur.
	rng := rand.New(rand.NewPCG(1, 2))
	exact := func(a, b, c float32) float32 {
		p := new(big.Float).SetPrec(200).SetFloat64(float64(a))
		p.Mul(p, new(big.Float).SetPrec(200).SetFloat64(float64(b)))
		p.Add(p, new(big.Float).SetPrec(200).SetFloat64(float64(c)))
		f, _ := p.Float32()
		return f
	}
	for i := 0; i < 100000; i++ {
		a := math.Float32frombits(0x3f800000 | rng.Uint32()&0x7fffff)
		b := math.Float32frombits(0x3f800000 | rng.Uint32()&0x7fffff)
		if rng.IntN(2) == 0 {
			b = -b
		}
		c := float32(math.Ldexp(float64(math.Float32frombits(0x3f800000|rng.Uint32()&0x7fffff)), rng.IntN(60)-30))
		require.Equal(t, exact(a, b, c), fma32(a, b, c), "fma32(%g, %g, %g)", a, b, c)
	}
}

// TestFMAAxpy32: the vector update (the CPU's fused multiply-add where it
// has one) gives fma32's result for every element, at every length (the
// tails after blocks of 8 included), on random values, rounding ties,
// results below float32's normal range, overflow and infinities.
func TestFMAAxpy32(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	for _, n := range []int{0, 1, 7, 8, 9, 15, 16, 17, 100, 1027} {
		for trial := 0; trial < 4; trial++ {
			alpha := float32(rng.NormFloat64())
			x, y := make([]float32, n), make([]float32, n)
			for i := range x {
				switch rng.IntN(6) {
				case 0: // near a tie: z's exponent close to the product's
					x[i] = math.Float32frombits(0x3f800000 | rng.Uint32()&0x7fffff)
					y[i] = float32(math.Ldexp(float64(math.Float32frombits(0x3f800000|rng.Uint32()&0x7fffff)), rng.IntN(60)-30))
				case 1: // tiny: subnormal results
					x[i] = float32(rng.NormFloat64() * 1e-38)
					y[i] = float32(rng.NormFloat64() * 1e-39)
				case 2: // huge: overflow
					x[i] = float32(rng.NormFloat64() * 3e38)
					y[i] = float32(rng.NormFloat64() * 3e38)
				case 3:
					x[i], y[i] = float32(math.Inf(1)), float32(rng.NormFloat64())
				default:
					x[i], y[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
				}
			}
			want := make([]float32, n)
			for i := range want {
				want[i] = fma32(alpha, x[i], y[i])
			}
			fmaAxpy32(alpha, x, y)
			for i := range want {
				if math.IsNaN(float64(want[i])) {
					require.True(t, math.IsNaN(float64(y[i])), "n=%d [%d]", n, i)
					continue
				}
				require.Equal(t, math.Float32bits(want[i]), math.Float32bits(y[i]), "n=%d [%d]: fma(%g, %g, ·)", n, i, alpha, x[i])
			}
		}
	}
	// The double-rounding trap of TestFMA32, in a vector block.
	x := make([]float32, 8)
	y := make([]float32, 8)
	for i := range x {
		x[i], y[i] = float32(64*(1+1.0/(1<<23))), float32(1<<30+1<<7)
	}
	fmaAxpy32(float32(1-1.0/(1<<23)), x, y)
	assert.Equal(t, float32(1<<30+1<<7), y[3])
}
