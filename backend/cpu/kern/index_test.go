package kern

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBroadcastIndexCached: BroadcastIndex gives numpy's flat indices
// (decoded from each output element's multi-index) for random shape pairs,
// asked several times and interleaved (the cache never answers for another
// pair, e.g. shapes that differ only in rank), and small maps asked again
// allocate nothing.
func TestBroadcastIndexCached(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	type pair struct{ shape, out []int }
	var pairs []pair
	for len(pairs) < 200 {
		rank := r.IntN(10)
		out := make([]int, rank)
		for i := range out {
			out[i] = 1 + r.IntN(3)
		}
		sr := r.IntN(rank + 1)
		shape := append([]int{}, out[rank-sr:]...)
		for k := range shape {
			if r.IntN(3) == 0 {
				shape[k] = 1
			}
		}
		pairs = append(pairs, pair{shape, out})
	}
	pairs = append(pairs, pair{[]int{1}, []int{1}}, pair{[]int{1, 1}, []int{1, 1}}, pair{nil, []int{1}}, pair{nil, nil}, pair{[]int{3}, []int{2, 3}}, pair{[]int{2, 1}, []int{2, 3}})
	for round := 0; round < 3; round++ {
		for _, p := range pairs {
			got := BroadcastIndex(p.shape, p.out)
			size := 1
			for _, d := range p.out {
				size *= d
			}
			require.Len(t, got, size, "%v -> %v", p.shape, p.out)
			idx := make([]int, len(p.out))
			for e := 0; e < size; e++ {
				rem := e
				for d := len(p.out) - 1; d >= 0; d-- {
					idx[d] = rem % p.out[d]
					rem /= p.out[d]
				}
				want := 0
				for k, dim := range p.shape {
					i := idx[len(p.out)-len(p.shape)+k]
					if dim == 1 {
						i = 0
					}
					want = want*dim + i
				}
				require.Equal(t, want, got[e], "%v -> %v element %d", p.shape, p.out, e)
			}
		}
	}
	a, b := []int{4, 1, 3}, []int{2, 4, 5, 3}
	BroadcastIndex(a, b)
	assert.Zero(t, testing.AllocsPerRun(20, func() { BroadcastIndex(a, b) }))
	big := []int{100, 100}
	assert.Len(t, BroadcastIndex([]int{100, 1}, big), 10000, "large maps are built, not kept")
}
