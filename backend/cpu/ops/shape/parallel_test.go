package shape

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
)

// randomCuts returns 0 = c0 < c1 < ... < ck = n: a random split of [0, n)
// into contiguous ranges, some of one unit (the tails a pool's chunks end
// on).
func randomCuts(rng *rand.Rand, n int) []int {
	cuts := []int{0}
	for c := 0; c < n; {
		step := 1 + rng.IntN(max(1, n/3))
		if rng.IntN(4) == 0 {
			step = 1
		}
		c = min(c+step, n)
		cuts = append(cuts, c)
	}
	return cuts
}

// Any split of a gather's units into contiguous ranges, each copied on its
// own (as the pool's chunks do), gives exactly the whole gather: transposes
// that take the tiled path (planes of 32-row strips with short last strips)
// row gathers with tables, padding and strided inner axes, and single runs
// cut into flatUnit pieces alike. The
// destination starts poisoned, so a unit no range covers fails too.
func TestGatherUnitsAnySplitMatchesWhole(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	src := make([]int32, 1<<16)
	for i := range src {
		src[i] = int32(i)
	}
	fill := []int32{-7}
	tiled, flat := 0, 0
	for trial := 0; trial < 400; trial++ {
		var maps []axisMap
		var run []int32 // what a flat trial must copy
		if trial%8 == 7 {
			// Leading rows of a matrix: one contiguous run after
			// simplifyMaps (the flat plan), often several flatUnit
			// pieces long.
			rows, cols, start := 1+rng.IntN(3), 1+rng.IntN(20000), rng.IntN(100)
			maps = append(maps, arith(rows, start, cols), arith(cols, 0, 1))
			run = src[start : start+rows*cols]
		} else if trial%2 == 0 {
			// A transpose of a random shape (some axes past tileBlock).
			r := 2 + rng.IntN(3)
			shape := make([]int, r)
			for a := range shape {
				shape[a] = 1 + rng.IntN(12)
				if rng.IntN(3) == 0 {
					shape[a] = tileBlock + rng.IntN(50)
				}
			}
			for prod(shape) > len(src) {
				shape[rng.IntN(r)] = 2
			}
			perm := rng.Perm(r)
			st := graph.Strides(shape)
			for _, p := range perm {
				maps = append(maps, arith(shape[p], 0, st[p]))
			}
		} else {
			r := 1 + rng.IntN(4)
			for range r {
				n := 1 + rng.IntN(30)
				switch rng.IntN(3) {
				case 0:
					tab := make([]int, n)
					for i := range tab {
						tab[i] = rng.IntN(50)
						if rng.IntN(6) == 0 {
							tab[i] = padOffset
						}
					}
					maps = append(maps, tabled(tab))
				default:
					maps = append(maps, arith(n, rng.IntN(4), []int{0, 1, 2, 35}[rng.IntN(4)]))
				}
			}
		}
		size := 1
		for _, m := range maps {
			size *= m.n
		}
		want := make([]int32, size)
		require.NoError(t, gatherView(want, src, 0, append([]axisMap{}, maps...), fill))
		if run != nil {
			require.Equal(t, run, want, "trial %d: the whole run", trial)
		}

		var buf [stackRank]axisMap
		var g gatherPlan
		require.True(t, g.init(buf[:], 0, append([]axisMap{}, maps...)))
		if g.tiled {
			tiled++
		}
		if g.flat && g.units > 1 {
			flat++
		}
		require.Equal(t, size, g.units*g.unitElems-tailShortfall(&g), "trial %d: units × elements per unit", trial)
		for rep := 0; rep < 3; rep++ {
			got := make([]int32, size)
			for i := range got {
				got[i] = -99
			}
			cuts := randomCuts(rng, g.units)
			for k := 1; k < len(cuts); k++ {
				gatherUnits(got, src, fill[0], &g, cuts[k-1], cuts[k])
			}
			require.Equal(t, want, got, "trial %d (tiled %v) maps %+v cuts %v", trial, g.tiled, maps, cuts)
		}
	}
	assert.Greater(t, tiled, 30, "trials that took the tiled path")
	assert.Greater(t, flat, 20, "trials that took the flat path in more than one piece")
}

// tailShortfall is how many elements the last strip of each plane of a
// tiled plan lacks (its plane's rows not a multiple of tileBlock).
func tailShortfall(g *gatherPlan) int {
	if g.flat {
		return g.units*g.unitElems - g.maps[0].n
	}
	if !g.tiled {
		return 0
	}
	nc := g.maps[g.c].n
	short := g.tiles*tileBlock - nc
	return short * g.maps[len(g.maps)-1].n * (g.units / g.tiles)
}

// Any split of a Concat's output elements into contiguous ranges gives the
// whole Concat: ranges that start and end inside a source's run, on run and
// row boundaries, and sources of zero width.
func TestConcatRangesAnySplitMatchesWhole(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for trial := 0; trial < 300; trial++ {
		outer := 1 + rng.IntN(6)
		k := 1 + rng.IntN(4)
		runs := make([]int, k)
		srcs := make([]any, k)
		row := 0
		for i := range runs {
			runs[i] = rng.IntN(9)
			s := make([]float32, outer*runs[i])
			for j := range s {
				s[j] = float32(1000*i + j)
			}
			srcs[i] = s
			row += runs[i]
		}
		want := make([]float32, outer*row)
		require.NoError(t, concatInto(want, srcs, runs, outer))
		// The reference, from the definition.
		p := 0
		for o := 0; o < outer; o++ {
			for i, s := range srcs {
				for j := 0; j < runs[i]; j++ {
					require.Equal(t, s.([]float32)[o*runs[i]+j], want[p])
					p++
				}
			}
		}
		for rep := 0; rep < 3; rep++ {
			got := make([]float32, len(want))
			for i := range got {
				got[i] = -1
			}
			cuts := randomCuts(rng, len(want))
			for c := 1; c < len(cuts); c++ {
				require.NoError(t, concatRange(got, srcs, runs, outer, cuts[c-1], cuts[c]))
			}
			require.Equal(t, want, got, "trial %d runs %v outer %d cuts %v", trial, runs, outer, cuts)
		}
	}
	_, err := call(t, "Concat", 13, []*graph.Attr{graph.IntAttr("axis", 0)}, iota32(2), &graph.Tensor{DType: graph.Int64, Shape: []int{1}, Data: []int64{1}})
	assert.ErrorContains(t, err, "dtype")
}

// Transpose, Slice and Concat of tensors large enough to be split over the
// pool (at two workers) give the naive results, every element written
// (their outputs are not zeroed first).
func TestLargeShapeOpsSplitOverThePool(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0))))
	require.Greater(t, copyWorkers(4*copyGrain, 4*copyGrain), 1, "these sizes split")
	rng := rand.New(rand.NewPCG(9, 10))
	for _, c := range []struct{ shape, perm []int }{
		{[]int{4, 197, 12, 64}, []int{0, 2, 1, 3}}, // attention's heads
		{[]int{4, 768, 196}, []int{0, 2, 1}},       // the patch embedding (tiled)
		{[]int{3, 101, 37, 29}, []int{3, 1, 0, 2}},
	} {
		checkTransposeNaive(t, rng, c.shape, c.perm)
	}
	// A Slice of the last axis of a [197, 4, 2304] in-projection output.
	x := iota32(197, 4, 2304)
	y := call1(t, "Slice", 13, nil, x, i64(768), i64(1536), i64(2))
	require.Equal(t, []int{197, 4, 768}, y.Shape)
	for o := 0; o < 197*4; o++ {
		for j := 0; j < 768; j++ {
			if y.Float32s()[o*768+j] != float32(o*2304+768+j) {
				t.Fatalf("slice element (%d, %d) is %v", o, j, y.Float32s()[o*768+j])
			}
		}
	}
	// Its gradient's Concat along that axis, and the class token's along 1.
	parts := []*graph.Tensor{iota32(197, 4, 768), iota32(197, 4, 768), iota32(197, 4, 768)}
	y = call1(t, "Concat", 13, []*graph.Attr{graph.IntAttr("axis", 2)}, parts...)
	require.Equal(t, []int{197, 4, 2304}, y.Shape)
	for o := 0; o < 197*4; o++ {
		for j := 0; j < 2304; j++ {
			if y.Float32s()[o*2304+j] != float32(o*768+j%768) {
				t.Fatalf("concat element (%d, %d) is %v", o, j, y.Float32s()[o*2304+j])
			}
		}
	}
	y = call1(t, "Concat", 13, []*graph.Attr{graph.IntAttr("axis", 1)}, iota32(4, 1, 768), iota32(4, 196, 768))
	require.Equal(t, []int{4, 197, 768}, y.Shape)
	for b := 0; b < 4; b++ {
		for s := 0; s < 197; s++ {
			for j := 0; j < 768; j++ {
				want := float32(b*768 + j)
				if s > 0 {
					want = float32((b*196+s-1)*768 + j)
				}
				if got := y.Float32s()[(b*197+s)*768+j]; got != want {
					t.Fatalf("class-token concat element (%d, %d, %d) is %v, want %v", b, s, j, got, want)
				}
			}
		}
	}
}

// A float32 gather whose rows each repeat one source value (Expand of
// [N, C, 1, 1] to [N, C, H, W]: one outer axis, an inner axis of stride
// 0) takes gatherRows' fill, not the transpose tiles: any split of its
// rows gives every element its row's value, bit for bit (NaN payloads,
// −0), for rows of 1 to 60 elements starting at odd and even offsets.
func TestBroadcastRowsFloat32(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	src := make([]float32, 4096)
	for i := range src {
		src[i] = rng.Float32() - 0.5
	}
	src[3] = math.Float32frombits(0x7fc01234)
	src[5] = float32(math.Copysign(0, -1))
	for trial := 0; trial < 200; trial++ {
		rows, n := 1+rng.IntN(100), 1+rng.IntN(60)
		if trial%4 == 0 {
			n = 49
		}
		stride, start := []int{1, 2, 35}[rng.IntN(3)], rng.IntN(8)
		maps := []axisMap{arith(rows, start, stride), arith(n, 0, 0)}
		var buf [stackRank]axisMap
		var g gatherPlan
		require.True(t, g.init(buf[:], 0, append([]axisMap{}, maps...)))
		require.False(t, g.tiled, "trial %d: a broadcast row is not a transpose", trial)
		got := make([]float32, rows*n)
		for i := range got {
			got[i] = -99
		}
		cuts := randomCuts(rng, g.units)
		for k := 1; k < len(cuts); k++ {
			gatherUnits(got, src, 0, &g, cuts[k-1], cuts[k])
		}
		for i, v := range got {
			want := src[start+(i/n)*stride]
			require.Equal(t, math.Float32bits(want), math.Float32bits(v), "trial %d: element %d (rows %d of %d, stride %d)", trial, i, rows, n, stride)
		}
	}
}
