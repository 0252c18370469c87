package distrib

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
)

const unitRoundoff = 0x1p-24 // float32

// ringOrderSum is the documented addition order of AllReduce: element i of
// segment j is x[j+1] + x[j+2] + ... + x[j] (indices mod the world size),
// in float32.
func ringOrderSum(inputs [][]float32, i int) float32 {
	world := len(inputs)
	seg := balanced(len(inputs[0]), world)
	j := 0
	for ; j < world; j++ {
		if lo, hi := seg(j); i >= lo && i < hi {
			break
		}
	}
	acc := inputs[(j+1)%world][i]
	for k := 2; k <= world; k++ {
		acc += inputs[(j+k)%world][i]
	}
	return acc
}

func TestAllReduceMatchesFloat64Sum(t *testing.T) {
	ctx := context.Background()
	// Small chunks for worlds 3 and 4: hundreds of pipelined chunks per step.
	chunks := map[int]int{1: 0, 2: 0, 3: 4096, 4: 64 << 10}
	for world := 1; world <= 4; world++ {
		t.Run(fmt.Sprintf("world%d", world), func(t *testing.T) {
			groups := startGroups(t, world, func(c *Config) { c.ChunkBytes = chunks[world] })
			for _, n := range []int{1, 7, 1000, 1 << 20} {
				for _, op := range []ReduceOp{Sum, Mean} {
					inputs := make([][]float32, world)
					bufs := make([][]float32, world)
					for r := range inputs {
						inputs[r] = rankData(int64(n), r, n)
						bufs[r] = append([]float32(nil), inputs[r]...)
					}
					requireAllOK(t, onAll(groups, func(g *Group) error { return g.AllReduce(ctx, bufs[g.Rank()], op) }))
					var badSum, badBits, badOrder int
					firstBad := ""
					for i := 0; i < n; i++ {
						var sum, abs float64
						for r := range inputs {
							sum += float64(inputs[r][i])
							abs += math.Abs(float64(inputs[r][i]))
						}
						bound := float64(world-1) * unitRoundoff * abs
						if op == Mean {
							sum /= float64(world)
							bound = bound/float64(world) + unitRoundoff*math.Abs(sum)*1.001
						}
						got := bufs[0][i]
						if math.Abs(float64(got)-sum) > bound {
							if badSum == 0 {
								firstBad = fmt.Sprintf("element %d: got %v, float64 sum %v, bound %g", i, got, sum, bound)
							}
							badSum++
						}
						for r := 1; r < world; r++ {
							if math.Float32bits(bufs[r][i]) != math.Float32bits(got) {
								badBits++
							}
						}
						want := ringOrderSum(inputs, i)
						if op == Mean {
							want /= float32(world)
						}
						if math.Float32bits(want) != math.Float32bits(got) {
							badOrder++
						}
					}
					assert.Zero(t, badSum, "n=%d %v: elements off the float64 sum by more than float32 rounding; first: %s", n, op, firstBad)
					assert.Zero(t, badBits, "n=%d %v: elements that differ between ranks", n, op)
					assert.Zero(t, badOrder, "n=%d %v: elements not summed in ring order", n, op)
				}
			}
		})
	}
}

func TestAllReduceBF16(t *testing.T) {
	ctx := context.Background()
	const world, n = 3, 100003
	groups := startGroups(t, world, func(c *Config) { c.ChunkBytes = 4096 })
	for _, op := range []ReduceOp{Sum, Mean} {
		inputs := make([][]float32, world)
		bufs := make([][]float32, world)
		for r := range inputs {
			inputs[r] = rankData(7, r, n)
			bufs[r] = append([]float32(nil), inputs[r]...)
		}
		requireAllOK(t, onAll(groups, func(g *Group) error { return g.AllReduce(ctx, bufs[g.Rank()], op, WithBF16()) }))
		round := func(f float32) float32 { return graph.BFloat16ToFloat32(graph.Float32ToBFloat16(f)) }
		seg := balanced(n, world)
		var badBits, notBF16, badSim, far int
		for i := 0; i < n; i++ {
			got := bufs[0][i]
			for r := 1; r < world; r++ {
				if math.Float32bits(bufs[r][i]) != math.Float32bits(got) {
					badBits++
				}
			}
			if math.Float32bits(got)&0xffff != 0 {
				notBF16++
			}
			// Simulate the wire: every hop carries the partial sum in bf16,
			// the owner accumulates in float32 and rounds the result.
			j := 0
			for lo, hi := seg(j); i < lo || i >= hi; lo, hi = seg(j) {
				j++
			}
			acc := inputs[(j+1)%world][i]
			for k := 2; k <= world; k++ {
				acc = inputs[(j+k)%world][i] + round(acc)
			}
			var sum, abs float64
			for r := range inputs {
				sum += float64(inputs[r][i])
				abs += math.Abs(float64(inputs[r][i]))
			}
			if op == Mean {
				acc /= world
				sum /= world
				abs /= world
			}
			if math.Float32bits(round(acc)) != math.Float32bits(got) {
				badSim++
			}
			if math.Abs(float64(got)-sum) > world*0x1p-8*abs {
				far++
			}
		}
		assert.Zero(t, badBits, "%v: elements that differ between ranks", op)
		assert.Zero(t, notBF16, "%v: results that are not bfloat16 values", op)
		assert.Zero(t, badSim, "%v: results that differ from the simulated bf16 ring", op)
		assert.Zero(t, far, "%v: results off the float64 sum by more than bf16 rounding", op)
	}
}

// Golden values from PyTorch 1.13: torch.tensor(x).to(torch.bfloat16)
// (float32 bits in, bfloat16 bits out), ties to even, NaN/inf/subnormals.
func TestBF16ConversionMatchesPyTorch(t *testing.T) {
	golden := [][2]uint32{
		{0x3f800000, 0x3f80}, {0xc0200000, 0xc020}, {0x40490000, 0x4049},
		{0x3f808000, 0x3f80}, {0x3f818000, 0x3f82}, {0x3f810000, 0x3f81},
		{0x3f818008, 0x3f82}, {0x477fe000, 0x4780}, {0x7f7f0000, 0x7f7f},
		{0x7f7fc99e, 0x7f80}, {0x000116c2, 0x0001}, {0x80000000, 0x8000},
		{0x7f800000, 0x7f80}, {0x3dcccccd, 0x3dcd}, {0xc2f6e979, 0xc2f7},
		{0x00080000, 0x0008},
	}
	src := make([]float32, len(golden))
	for i, g := range golden {
		src[i] = math.Float32frombits(g[0])
	}
	dst := make([]uint16, len(src))
	toBF16(dst, src)
	back := make([]float32, len(src))
	fromBF16(back, dst)
	rounded := append([]float32(nil), src...)
	roundBF16(rounded)
	for i, g := range golden {
		assert.Equal(t, uint16(g[1]), dst[i], "float32 bits %#08x", g[0])
		assert.Equal(t, g[1]<<16, math.Float32bits(back[i]), "float32 bits %#08x", g[0])
		assert.Equal(t, g[1]<<16, math.Float32bits(rounded[i]), "float32 bits %#08x", g[0])
	}
	acc := []float32{1, 2}
	addBF16(acc, []uint16{0x3f80, 0xc020}) // + 1, - 2.5
	assert.Equal(t, []float32{2, -0.5}, acc)
}

func TestReduceScatter(t *testing.T) {
	ctx := context.Background()
	const world, m = 3, 1001
	groups := startGroups(t, world, func(c *Config) { c.ChunkBytes = 1024 })
	for _, op := range []ReduceOp{Sum, Mean} {
		inputs := make([][]float32, world)
		bufs := make([][]float32, world)
		outs := make([][]float32, world)
		for r := range inputs {
			inputs[r] = rankData(3, r, world*m)
			bufs[r] = append([]float32(nil), inputs[r]...)
			outs[r] = make([]float32, m)
		}
		requireAllOK(t, onAll(groups, func(g *Group) error {
			return g.ReduceScatter(ctx, bufs[g.Rank()], outs[g.Rank()], op)
		}))
		for r := 0; r < world; r++ {
			assert.Equal(t, inputs[r], bufs[r], "rank %d's input changed", r)
			bad := 0
			for i := 0; i < m; i++ {
				var sum, abs float64
				for q := range inputs {
					sum += float64(inputs[q][r*m+i])
					abs += math.Abs(float64(inputs[q][r*m+i]))
				}
				bound := (world - 1) * unitRoundoff * abs
				if op == Mean {
					sum /= world
					bound = bound/world + unitRoundoff*math.Abs(sum)*1.001
				}
				if math.Abs(float64(outs[r][i])-sum) > bound {
					bad++
				}
			}
			assert.Zero(t, bad, "%v rank %d: elements off the float64 sum", op, r)
		}
		// The in-place form gives the same bits.
		shards := make([][]float32, world)
		requireAllOK(t, onAll(groups, func(g *Group) error {
			s, err := g.ReduceScatterInPlace(ctx, bufs[g.Rank()], op)
			shards[g.Rank()] = s
			return err
		}))
		for r := 0; r < world; r++ {
			assert.Equal(t, outs[r], shards[r], "%v rank %d in place", op, r)
		}
	}
}

func TestAllGather(t *testing.T) {
	ctx := context.Background()
	const world, m = 4, 777
	groups := startGroups(t, world, func(c *Config) { c.ChunkBytes = 512 })
	inputs := make([][]float32, world)
	outs := make([][]float32, world)
	var want []float32
	for r := range inputs {
		inputs[r] = rankData(5, r, m)
		want = append(want, inputs[r]...)
		outs[r] = make([]float32, world*m)
	}
	requireAllOK(t, onAll(groups, func(g *Group) error { return g.AllGather(ctx, inputs[g.Rank()], outs[g.Rank()]) }))
	for r := range outs {
		assert.Equal(t, want, outs[r], "rank %d", r)
	}
}

func TestBroadcast(t *testing.T) {
	ctx := context.Background()
	const world, n = 3, 100000
	groups := startGroups(t, world, func(c *Config) { c.ChunkBytes = 4096 })
	for root := 0; root < world; root++ {
		bufs := make([][]float32, world)
		for r := range bufs {
			bufs[r] = rankData(int64(root), r, n)
		}
		want := append([]float32(nil), bufs[root]...)
		requireAllOK(t, onAll(groups, func(g *Group) error { return g.Broadcast(ctx, bufs[g.Rank()], root) }))
		for r := range bufs {
			assert.Equal(t, want, bufs[r], "root %d, rank %d", root, r)
		}
	}
}

func TestBarrierWaitsForEveryRank(t *testing.T) {
	ctx := context.Background()
	const world = 4
	groups := startGroups(t, world, nil)
	for round := 0; round < 3; round++ {
		var arrived atomic.Int32
		seen := make([]int32, world)
		requireAllOK(t, onAll(groups, func(g *Group) error {
			// Later ranks arrive later; nobody may leave before the last.
			time.Sleep(time.Duration(g.Rank()*15) * time.Millisecond)
			arrived.Add(1)
			err := g.Barrier(ctx)
			seen[g.Rank()] = arrived.Load()
			return err
		}))
		for r, s := range seen {
			assert.Equal(t, int32(world), s, "round %d: rank %d left the barrier before every rank arrived", round, r)
		}
	}
}

func TestObjectCollectives(t *testing.T) {
	ctx := context.Background()
	const world = 3
	groups := startGroups(t, world, nil)
	objs := [][]byte{[]byte("rank zero"), {}, bytes.Repeat([]byte{0xab, 0xcd}, 1<<19)}

	all := make([][][]byte, world)
	requireAllOK(t, onAll(groups, func(g *Group) error {
		var err error
		all[g.Rank()], err = g.AllGatherObject(ctx, objs[g.Rank()])
		return err
	}))
	for r := range all {
		require.Len(t, all[r], world)
		for q := range objs {
			assert.True(t, bytes.Equal(objs[q], all[r][q]), "rank %d's copy of rank %d's object", r, q)
		}
	}

	for root := 0; root < world; root++ {
		gathered := make([][][]byte, world)
		requireAllOK(t, onAll(groups, func(g *Group) error {
			var err error
			gathered[g.Rank()], err = g.GatherObject(ctx, objs[g.Rank()], root)
			return err
		}))
		for r := range gathered {
			if r != root {
				assert.Nil(t, gathered[r], "root %d: rank %d should get nothing", root, r)
				continue
			}
			require.Len(t, gathered[r], world)
			for q := range objs {
				assert.True(t, bytes.Equal(objs[q], gathered[r][q]), "root %d: rank %d's object", root, q)
			}
		}

		got := make([][]byte, world)
		requireAllOK(t, onAll(groups, func(g *Group) error {
			var err error
			got[g.Rank()], err = g.BroadcastObject(ctx, objs[g.Rank()], root)
			return err
		}))
		for r := range got {
			assert.True(t, bytes.Equal(objs[root], got[r]), "broadcast from %d: rank %d", root, r)
		}
	}
}

func TestWorldOfOneNeedsNoNetwork(t *testing.T) {
	ctx := context.Background()
	g, err := Init(ctx, Config{Rank: 0, WorldSize: 1}) // no master address or port
	require.NoError(t, err)
	defer g.Close()
	x := []float32{1, 2, 3, 4}
	require.NoError(t, g.AllReduce(ctx, x, Mean))
	assert.Equal(t, []float32{1, 2, 3, 4}, x)
	out := make([]float32, 4)
	require.NoError(t, g.ReduceScatter(ctx, x, out, Sum))
	assert.Equal(t, x, out)
	gathered := make([]float32, 4)
	require.NoError(t, g.AllGather(ctx, x, gathered))
	assert.Equal(t, x, gathered)
	require.NoError(t, g.Broadcast(ctx, x, 0))
	require.NoError(t, g.Barrier(ctx))
	objs, err := g.AllGatherObject(ctx, []byte("m"))
	require.NoError(t, err)
	assert.Equal(t, [][]byte{[]byte("m")}, objs)
	err = g.Broadcast(ctx, x, 1)
	assert.ErrorIs(t, err, ErrInvalid)
	assert.ErrorContains(t, err, "root 1 is outside 0..0")
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	assert.ErrorIs(t, g.AllReduce(cancelled, x, Sum), context.Canceled)
	require.NoError(t, g.Close())
	assert.ErrorIs(t, g.AllReduce(ctx, x, Sum), ErrClosed)
}

// Many small collectives of mixed kinds back to back: the headers keep the
// streams in step.
func TestMixedCollectivesInSequence(t *testing.T) {
	ctx := context.Background()
	const world = 4
	groups := startGroups(t, world, func(c *Config) { c.ChunkBytes = 64 })
	requireAllOK(t, onAll(groups, func(g *Group) error {
		for i := 0; i < 50; i++ {
			x := []float32{float32(g.Rank() + i), 1, 2}
			if err := g.AllReduce(ctx, x, Sum); err != nil {
				return err
			}
			if x[0] != float32(6+4*i) || x[1] != 4 {
				return fmt.Errorf("iteration %d: got %v", i, x)
			}
			o, err := g.AllGatherObject(ctx, []byte{byte(g.Rank())})
			if err != nil {
				return err
			}
			if len(o) != world || o[3][0] != 3 {
				return fmt.Errorf("iteration %d: objects %v", i, o)
			}
			if err := g.Barrier(ctx); err != nil {
				return err
			}
		}
		return nil
	}))
}
