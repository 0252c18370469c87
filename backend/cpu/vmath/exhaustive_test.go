package vmath

import (
	"math"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestExp32EveryFloat32InTheUsedRange runs Exp32 (the dispatched loop:
// AVX-512 where the CPU has it, else AVX2, else Go) over every float32 in
// [-104, -2^-20], the arguments of every exponential the steps take
// (softmax's and the loss's x - max, the GELU gradient's -(d·d); below
// -104 the result is 0, and above -2^-20 it is 1 or the float32 below),
// about 224 million values, and over every 61st float32 of the rest up to
// 88.75 (above 88.7228 the result is +Inf), and measures the largest error
// against float32(math.Exp(x)) in float32 ulps: at most 1, as the sweep
// tests find (the polynomial and the reduction are the same as when they
// were written; this is the bound over all of the used inputs, not a
// sample). Where the dispatched loop is the AVX-512 one, the eight-lane
// loop must give its bits on every one of them (the AVX-512 and AVX2 loops
// reach 2^k in different ways, see EXP_FINISH16 and EXP_FINISH).
func TestExp32EveryFloat32InTheUsedRange(t *testing.T) {
	type result struct {
		worst    int64
		at       float32
		mismatch int
		firstBad float32
		count    int
	}
	// Bit intervals and the stride through them.
	ranges := []struct{ lo, hi, stride uint32 }{
		{math.Float32bits(-0x1p-20), math.Float32bits(-104), 1},
		{1 << 31, math.Float32bits(-0x1p-20) - 1, 61},
		{0, math.Float32bits(88.75), 61},
	}
	const chunk = 1 << 16
	type job struct{ lo, hi, stride uint32 }
	jobs := make(chan job, 64)
	go func() {
		for _, r := range ranges {
			span := uint64(r.stride) * chunk
			for lo := uint64(r.lo); lo <= uint64(r.hi); lo += span {
				jobs <- job{uint32(lo), uint32(min(lo+span-1, uint64(r.hi))), r.stride}
			}
		}
		close(jobs)
	}()
	workers := runtime.GOMAXPROCS(0)
	results := make([]result, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func(res *result) {
			defer wg.Done()
			xs, got, eight := make([]float32, chunk), make([]float32, chunk), make([]float32, chunk)
			for j := range jobs {
				n := int((j.hi-j.lo)/j.stride) + 1
				for i := range n {
					xs[i] = math.Float32frombits(j.lo + uint32(i)*j.stride)
				}
				res.count += n
				Exp32(got[:n], xs[:n])
				m := n &^ 7
				if hasAVX512 && m > 0 {
					exp(eight[:m], xs[:m])
					for i := range m {
						if math.Float32bits(eight[i]) != math.Float32bits(got[i]) {
							if res.mismatch == 0 {
								res.firstBad = xs[i]
							}
							res.mismatch++
						}
					}
				}
				for i := range n {
					want := float32(math.Exp(float64(xs[i])))
					if d := ULPDistance32(got[i], want); d > res.worst {
						res.worst, res.at = d, xs[i]
					}
				}
			}
		}(&results[w])
	}
	wg.Wait()
	var all result
	for _, r := range results {
		if r.worst > all.worst {
			all.worst, all.at = r.worst, r.at
		}
		if r.mismatch > 0 && all.mismatch == 0 {
			all.firstBad = r.firstBad
		}
		all.mismatch += r.mismatch
		all.count += r.count
	}
	t.Logf("Exp32 (AVX-512 %v): max error %d ulp over %d values (worst at x = %g)", hasAVX512, all.worst, all.count, all.at)
	assert.Greater(t, all.count, 240_000_000, "values checked")
	assert.LessOrEqual(t, all.worst, int64(1), "worst at x = %g", all.at)
	assert.Zero(t, all.mismatch, "the eight-lane loop differs from the dispatched one, first at x = %g", all.firstBad)
}
