package train

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/tensorio"
)

// FuzzMergeZeroShards: whatever two shard files and the optimizer file
// hold, merging them into the optimizer state returns an error or a state
// whose every tensor is valid; it never panics, and it never allocates a
// tensor larger than the shards' data could fill.
func FuzzMergeZeroShards(f *testing.F) {
	s0 := shardFile(f, 0, map[string]zeroRange{"w": {0, 2, []int{2, 2}}}, map[string]*graph.Tensor{"w/exp_avg": vecF32(1, 2), "w/step": graph.FromInt64([]int64{3})})
	s1 := shardFile(f, 1, map[string]zeroRange{"w": {2, 4, []int{2, 2}}}, map[string]*graph.Tensor{"w/exp_avg": vecF32(3, 4), "w/step": graph.FromInt64([]int64{3})})
	none, err := tensorio.EncodeSafetensors(map[string]*graph.Tensor{"step": graph.FromInt64([]int64{3})}, nil)
	require.NoError(f, err)
	clash, err := tensorio.EncodeSafetensors(map[string]*graph.Tensor{"w/exp_avg": graph.FromFloat64([]float64{1, 2, 3, 4}, 2, 2)}, nil)
	require.NoError(f, err)
	huge := shardFile(f, 0, map[string]zeroRange{"w": {0, 1, []int{1 << 20, 1 << 20}}}, map[string]*graph.Tensor{"w/exp_avg": vecF32(1)})
	f.Add(none, s0, s1)
	f.Add(clash, s0, s1)
	f.Add(none, huge, s1)
	f.Add(none, s0, s0)
	f.Fuzz(func(t *testing.T, optFile, shard0, shard1 []byte) {
		opt, _, err := tensorio.DecodeSafetensors(optFile)
		if err != nil {
			return
		}
		data := map[string][]byte{ZeroShardFile(0, 2): shard0, ZeroShardFile(1, 2): shard1}
		if err := mergeZeroShards("ck", opt, data, 2); err != nil {
			return
		}
		for key, v := range opt {
			require.NoError(t, v.Validate(), key)
			if v.DType == graph.Float32 {
				require.LessOrEqual(t, 4*v.Size(), len(optFile)+len(shard0)+len(shard1), "%s: %v from %d bytes of files", key, v.Shape, len(optFile)+len(shard0)+len(shard1))
			}
		}
	})
}

// vecF32 is a float32 vector of x.
func vecF32(x ...float32) *graph.Tensor { return graph.FromFloat32(x, len(x)) }

// expAvgShards is two shards of w's exp_avg over the ranges r0 and r1 of
// a [2, 2] parameter, holding x0 and x1.
func expAvgShards(t *testing.T, r0, r1 [2]int, x0, x1 []float32) map[string][]byte {
	data := map[string][]byte{}
	for rank, r := range [][2]int{r0, r1} {
		data[ZeroShardFile(rank, 2)] = shardFile(t, rank, map[string]zeroRange{"w": {r[0], r[1], []int{2, 2}}},
			map[string]*graph.Tensor{"w/exp_avg": vecF32([][]float32{x0, x1}[rank]...)})
	}
	return data
}

// TestZeroShardsOverlap: two shards whose ranges overlap, so that their
// element counts add up to the parameter's size while leaving part of it
// unwritten, fail to load instead of leaving zeros in the state.
func TestZeroShardsOverlap(t *testing.T) {
	data := expAvgShards(t, [2]int{0, 2}, [2]int{0, 2}, []float32{1, 2}, []float32{1, 2})
	err := mergeZeroShards("ck", map[string]*graph.Tensor{}, data, 2)
	require.ErrorIs(t, err, ErrCheckpointCorrupt)
	require.Contains(t, err.Error(), "overlaps")
}

// TestZeroShardsOptimizerFileClash: an optimizer file that already holds
// a per-parameter entry of another dtype than the shards' is an error
// naming the entry, not a panic.
func TestZeroShardsOptimizerFileClash(t *testing.T) {
	data := expAvgShards(t, [2]int{0, 2}, [2]int{2, 4}, []float32{1, 2}, []float32{3, 4})
	opt := map[string]*graph.Tensor{"w/exp_avg": graph.FromFloat64([]float64{1, 2, 3, 4}, 2, 2)}
	err := mergeZeroShards("ck", opt, data, 2)
	require.ErrorIs(t, err, ErrCheckpointCorrupt)
	require.Contains(t, err.Error(), `"w/exp_avg"`)
}
