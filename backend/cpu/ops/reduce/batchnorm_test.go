package reduce

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestBatchNormStatsMatchTwoPass checks bnStats (one pass over shifted
// values, channels split over the goroutines) against the two-pass mean
// and population variance, on one goroutine and two, with a channel far
// from zero (mean 1000, standard deviation 0.01) where an unshifted
// one-pass variance would lose every digit.
func TestBatchNormStatsMatchTwoPass(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	b := blocks{outer: 4, r: 6, inner: 5000}
	x := make([]float32, b.outer*b.r*b.inner)
	for i := range x {
		v := rng.NormFloat64()*2 + 0.5
		if (i/b.inner)%b.r == 2 {
			v = 1000 + 0.01*rng.NormFloat64()
		}
		x[i] = float32(v)
	}
	count := float64(b.outer * b.inner)
	for _, procs := range []int{1, 2} {
		old := runtime.GOMAXPROCS(procs)
		mean, variance := bnStats(x, b)
		runtime.GOMAXPROCS(old)
		for p := 0; p < b.r; p++ {
			var s float64
			for o := 0; o < b.outer; o++ {
				for _, v := range x[(o*b.r+p)*b.inner : (o*b.r+p+1)*b.inner] {
					s += float64(v)
				}
			}
			m := s / count
			var q float64
			for o := 0; o < b.outer; o++ {
				for _, v := range x[(o*b.r+p)*b.inner : (o*b.r+p+1)*b.inner] {
					q += (float64(v) - m) * (float64(v) - m)
				}
			}
			assert.InDelta(t, m, mean[p], 1e-12*(1+math.Abs(m)), "mean[%d], GOMAXPROCS %d", p, procs)
			assert.InDelta(t, q/count, variance[p], 1e-9*q/count, "variance[%d], GOMAXPROCS %d", p, procs)
		}
	}
}
