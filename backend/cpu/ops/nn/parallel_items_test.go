package nn

import (
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// itemRecorder records which worker ran each item.
type itemRecorder struct {
	worker []atomic.Int32 // worker+1, 0 for not run
	runs   []atomic.Int32
}

func (r *itemRecorder) Item(worker, item int) {
	r.worker[item].Store(int32(worker + 1))
	r.runs[item].Add(1)
}

// ParallelItemsOf runs every item once on a worker in range; with static
// set worker w runs the block of items w·⌈items/workers⌉ onwards.
func TestParallelItemsOf(t *testing.T) {
	for _, c := range []struct{ items, workers int }{{0, 2}, {1, 3}, {9, 1}, {10, 2}, {17, 4}, {3, 8}} {
		for _, static := range []bool{false, true} {
			rec := itemRecorder{worker: make([]atomic.Int32, c.items), runs: make([]atomic.Int32, c.items)}
			ParallelItemsOf(c.items, c.workers, static, rec)
			workers := max(1, min(c.workers, c.items))
			per := (c.items + workers - 1) / max(workers, 1)
			for i := 0; i < c.items; i++ {
				require.Equal(t, int32(1), rec.runs[i].Load(), "%+v static %v: runs of item %d", c, static, i)
				w := int(rec.worker[i].Load()) - 1
				require.True(t, w >= 0 && w < workers, "%+v static %v: item %d on worker %d", c, static, i, w)
				if static && workers > 1 {
					require.Equal(t, i/per, w, "%+v: item %d", c, i)
				}
			}
		}
	}
}
