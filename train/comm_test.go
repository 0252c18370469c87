package train

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
)

// TestGroupCommCarriesCollectivesInOrder: during a Run, started buckets
// travel while the caller goes on, a synchronous call queues behind them,
// and every result is the reduction over the ranks (bucket 0 of two
// tensors as one message, mean; the sum of sync-BN's statistics; ZeRO's
// reduce-scatter and all-gather). A bucket waited for that was never
// started, or started twice, is an error; a step whose Run failed drops
// what did not start.
func TestGroupCommCarriesCollectivesInOrder(t *testing.T) {
	groups := startTestGroups(t, 2)
	type result struct {
		a, b, stats, mine, all []float32
		errWait, errTwice      error
	}
	res := make([]result, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := newGroupComm(g)
			c.nBuckets = 1
			ctx := context.Background()
			c.begin(7)
			x := float32(r + 1) // rank 0: 1, rank 1: 2
			a, b := []float32{x, 2 * x}, []float32{10 * x}
			if errs[r] = c.StartAllReduce(ctx, 0, [][]float32{a, b}, backend.ReduceMean, backend.CommOptions{}); errs[r] != nil {
				return
			}
			res[r].errTwice = c.StartAllReduce(ctx, 0, [][]float32{a}, backend.ReduceMean, backend.CommOptions{})
			stats := []float32{x, x * x}
			if errs[r] = c.AllReduceSum(ctx, stats); errs[r] != nil {
				return
			}
			if errs[r] = c.Wait(ctx, 0); errs[r] != nil {
				return
			}
			res[r].errWait = c.Wait(ctx, 5)
			rs := []float32{x, 2 * x, 3 * x, 4 * x} // two blocks of two
			mine, err := c.ReduceScatter(ctx, rs, backend.ReduceSum, backend.CommOptions{})
			if errs[r] = err; err != nil {
				return
			}
			all := make([]float32, 4)
			if errs[r] = c.AllGather(ctx, []float32{x, -x}, all); errs[r] != nil {
				return
			}
			errs[r] = c.end(false)
			res[r].a, res[r].b, res[r].stats = a, b, stats
			res[r].mine, res[r].all = append([]float32(nil), mine...), all
		}()
	}
	wg.Wait()
	for r := range res {
		require.NoError(t, errs[r], "rank %d", r)
		assert.Equal(t, []float32{1.5, 3}, res[r].a, "rank %d: mean of the bucket's first tensor", r)
		assert.Equal(t, []float32{15}, res[r].b, "rank %d: and of its second, in the same message", r)
		assert.Equal(t, []float32{3, 5}, res[r].stats, "rank %d: the sync-BN sum, behind the bucket", r)
		assert.Equal(t, []float32{3 * float32(2*r+1), 3 * float32(2*r+2)}, res[r].mine, "rank %d: its block of the sum", r)
		assert.Equal(t, []float32{1, -1, 2, -2}, res[r].all, "rank %d: the gathered blocks in rank order", r)
		require.Error(t, res[r].errWait)
		assert.Contains(t, res[r].errWait.Error(), "bucket 5, which was not started")
		require.Error(t, res[r].errTwice)
		assert.Contains(t, res[r].errTwice.Error(), "started twice")
	}

	// A failed Run: what was queued but not started is dropped, and end
	// does not report the drop as an error of its own.
	c := newGroupComm(groups[0])
	require.NoError(t, groups[0].Close())
	c.begin(8)
	require.NoError(t, c.StartAllReduce(context.Background(), 0, [][]float32{{1}}, backend.ReduceSum, backend.CommOptions{}))
	err := c.Wait(context.Background(), 0)
	require.Error(t, err, "the closed group fails the bucket")
	assert.Contains(t, err.Error(), fmt.Sprintf("gradient all-reduce at step %d (bucket 1 of 0)", 8))
	assert.NoError(t, c.end(true))
}
