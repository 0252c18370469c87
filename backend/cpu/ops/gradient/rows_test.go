package gradient

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/backend/cpu/ops/reduce"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/stretchr/testify/require"
)

// forEachRowPath runs test through the assembly row kernels (where the CPU
// has them) and through their Go fallbacks.
func forEachRowPath(t *testing.T, test func(t *testing.T)) {
	saved := rowAsm
	defer func() { rowAsm = saved }()
	for _, asm := range []bool{true, false} {
		if asm && !saved {
			continue
		}
		rowAsm = asm
		t.Run(fmt.Sprintf("asm=%v", asm), test)
	}
}

// TestSumToShapeMatchesFloat64Sums runs SumToShape on float32 and float64
// gradients whose elements sit near 100 (so that a float32 running sum
// would drift) and checks every result against the float64 sum of its
// elements: within a float32 rounding for the column sums (bias gradients,
// the position embedding's, an outer dim kept, column counts that are not
// multiples of 4 and wider than one column block), the same with 1 and 2
// goroutines and through the assembly and the Go column sums; shapes that
// are no column sum (row sums, two columns) go through the general path.
func TestSumToShapeMatchesFloat64Sums(t *testing.T) {
	for _, c := range []struct {
		from, to []int
		columns  bool
	}{
		{[]int{64, 65, 384}, []int{384}, true},
		{[]int{64, 65, 128}, []int{1, 65, 128}, true},
		{[]int{64, 1, 128}, []int{1, 1, 128}, true},
		{[]int{64, 10}, []int{10}, true},
		{[]int{3, 200, 13}, []int{3, 1, 13}, true},
		{[]int{1, 1500, 2055}, []int{2055}, true},
		{[]int{2, 7, 1, 5}, []int{2, 1, 1, 5}, true},
		{[]int{5, 70, 2}, []int{5, 1, 2}, false},
		{[]int{300, 7}, []int{300, 1}, false},
		{[]int{4, 6, 9}, []int{1}, false},
	} {
		t.Run(fmt.Sprintf("%v_to_%v", c.from, c.to), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(product(c.from)), 3))
			g := make([]float64, product(c.from))
			for i := range g {
				g[i] = float64(float32(100 + rng.NormFloat64()))
			}
			// want[j] and abs[j]: Σ and Σ|·| of the elements that land
			// on output element j.
			full, target := sumTargets(c.from, c.to)
			want, abs := make([]float64, product(c.to)), make([]float64, product(c.to))
			for i, v := range g {
				want[target[i]] += v
				abs[target[i]] += math.Abs(v)
			}
			_, _, _, isColumns := columnSumLayout(c.from, full)
			require.Equal(t, c.columns, isColumns, "column-sum layout")
			g32 := make([]float32, len(g))
			for i, v := range g {
				g32[i] = float32(v)
			}
			n := &graph.Node{OpType: "SumToShape", Domain: graph.InternalDomain, Outputs: []string{"y"}}
			run := func(t *testing.T, src *graph.Tensor, procs int) []float64 {
				like := graph.FromFloat32(make([]float32, product(c.to)), c.to...)
				var out []*graph.Tensor
				var err error
				withProcs(procs, func() { out, err = sumToShape(&kern.Context{}, n, []*graph.Tensor{src, like}) })
				require.NoError(t, err)
				require.Equal(t, c.to, out[0].Shape)
				return toFloat64s(out[0])
			}
			paths := map[bool][]float64{}
			forEachRowPath(t, func(t *testing.T) {
				for _, src := range []*graph.Tensor{graph.FromFloat32(g32, c.from...), graph.FromFloat64(g, c.from...)} {
					got := run(t, src, 2)
					for j, w := range want {
						tol := 1e-7*math.Abs(w) + 1e-12*abs[j]
						if !c.columns {
							tol = 1e-5 * abs[j] // a float32 running sum
						}
						require.InDelta(t, w, got[j], tol, "%v element %d", src.DType, j)
					}
					require.Equal(t, got, run(t, src, 1), "%v: the same with 1 and 2 goroutines", src.DType)
					if src.DType == graph.Float32 {
						paths[rowAsm] = got
					}
				}
			})
			if a, g := paths[true], paths[false]; a != nil && g != nil {
				require.Equal(t, g, a, "assembly and Go agree")
			}
		})
	}
	_, err := sumToShape(&kern.Context{}, &graph.Node{OpType: "SumToShape"}, []*graph.Tensor{
		graph.FromFloat32(make([]float32, 20), 4, 5), graph.FromFloat32(make([]float32, 3), 3)})
	require.Error(t, err, "(4, 5) does not sum to (3)")
}

// sumTargets returns, for a sum of shape from down to shape to, the
// to-shape aligned to from's rank (ones in front) and, for every element of
// from in row-major order, the output element it lands on.
func sumTargets(from, to []int) (full, target []int) {
	full = make([]int, len(from))
	for i := range full {
		full[i] = 1
		if k := i - (len(from) - len(to)); k >= 0 {
			full[i] = to[k]
		}
	}
	st := kern.BroadcastStrides(full, from)
	target = make([]int, product(from))
	for i := range target {
		j, rem := 0, i
		for d := len(from) - 1; d >= 0; d-- {
			j += rem % from[d] * st[d]
			rem /= from[d]
		}
		target[i] = j
	}
	return full, target
}

// TestSumToShapeFewRowsBits: column sums over at most
// columnSumDirectRows rows (the position embeddings' gradients) go
// straight into the output; each element must be the float64 sum from +0
// in row order, rounded once, bit for bit (what the partial sums gave),
// through the assembly and the Go loop, with 1 and 2 goroutines, and the
// same for more rows than that (the partial sums' path) as a control.
// The values mix magnitudes and signed zeros so that another order or an
// early rounding shows.
func TestSumToShapeFewRowsBits(t *testing.T) {
	for _, c := range []struct{ from, to []int }{
		{[]int{4, 128, 768}, []int{1, 128, 768}},
		{[]int{4, 197, 768}, []int{1, 197, 768}},
		{[]int{3, 5, 13}, []int{1, 5, 13}},
		{[]int{8, 2, 9}, []int{1, 2, 9}},
		{[]int{6, 1, 7}, []int{1, 1, 7}},
		{[]int{2, 3, 4, 11}, []int{2, 1, 4, 11}},
		{[]int{9, 3, 33}, []int{1, 3, 33}},
		{[]int{0, 3000}, []int{3000}},
	} {
		t.Run(fmt.Sprintf("%v_to_%v", c.from, c.to), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(product(c.from)), 7))
			g := make([]float32, product(c.from))
			for i := range g {
				switch rng.IntN(6) {
				case 0:
					g[i] = float32(math.Copysign(0, -1))
				case 1:
					g[i] = float32(rng.NormFloat64() * 1e7)
				default:
					g[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(9)-4)))
				}
			}
			// Each element's sum in the source's row-major order: for every
			// output element, its rows in order, from +0.
			_, target := sumTargets(c.from, c.to)
			sums := make([]float64, product(c.to))
			for i, v := range g {
				sums[target[i]] += float64(v)
			}
			want := make([]float32, len(sums))
			for j, v := range sums {
				want[j] = float32(v)
			}
			n := &graph.Node{OpType: "SumToShape", Domain: graph.InternalDomain, Outputs: []string{"y"}}
			forEachRowPath(t, func(t *testing.T) {
				for _, procs := range []int{1, 2} {
					var out []*graph.Tensor
					var err error
					withProcs(procs, func() {
						out, err = sumToShape(&kern.Context{}, n, []*graph.Tensor{graph.FromFloat32(g, c.from...), graph.FromFloat32(make([]float32, product(c.to)), c.to...)})
					})
					require.NoError(t, err)
					got := out[0].Float32s()
					require.Len(t, got, len(want))
					for j := range want {
						require.Equal(t, math.Float32bits(want[j]), math.Float32bits(got[j]), "element %d with %d goroutines: %v, want %v", j, procs, got[j], want[j])
					}
				}
			})
		})
	}
}

// TestSoftmaxBackwardFloat32Rows checks the float32 softmax backward over
// contiguous rows against dx = y·(dy − Σ dy·y) in float64, for row lengths
// around the 8-element steps of the row kernels, through the assembly
// row kernels and through their Go fallbacks.
func TestSoftmaxBackwardFloat32Rows(t *testing.T) {
	for _, size := range []int{1, 7, 8, 9, 65, 130} {
		t.Run(fmt.Sprintf("size%d", size), func(t *testing.T) {
			rows := max(64, 40000/size)
			rng := rand.New(rand.NewPCG(uint64(size), 23))
			dy, y := make([]float32, rows*size), make([]float32, rows*size)
			for i := range y {
				dy[i], y[i] = float32(rng.NormFloat64()), float32(rng.Float64())
			}
			want, scale := make([]float64, len(y)), make([]float64, len(y))
			for j := 0; j < rows; j++ {
				var s float64
				for i := j * size; i < (j+1)*size; i++ {
					s += float64(dy[i]) * float64(y[i])
				}
				for i := j * size; i < (j+1)*size; i++ {
					want[i] = float64(y[i]) * (float64(dy[i]) - s)
					scale[i] = float64(y[i]) * (math.Abs(float64(dy[i])) + math.Abs(s))
				}
			}
			forEachRowPath(t, func(t *testing.T) {
				dx := make([]float32, len(y))
				withProcs(2, func() { softmaxBackward(false, dy, y, dx, layout{outer: rows, r: size, inner: 1}) })
				for i, w := range want {
					if math.Abs(float64(dx[i])-w) > 1e-7*scale[i] {
						require.InDelta(t, w, float64(dx[i]), 1e-7*scale[i], "dx[%d]", i)
					}
				}
			})
		})
	}
}

// TestLayerNormBackwardOneElementRows: normalising a row of one element
// gives the constant 0 (its bias aside), so dx is exactly 0, whatever dy,
// x and scale are; dscale is 0 and dbias Σ dy.
func TestLayerNormBackwardOneElementRows(t *testing.T) {
	const rows = 3000
	rng := rand.New(rand.NewPCG(1, 29))
	x, dy, scale := randomFloat64s(rng, rows), randomFloat64s(rng, rows), []float64{1.7}
	var sumDy float64
	for i := range x {
		x[i] = float64(float32(300 * x[i]))
		dy[i] = float64(float32(dy[i]))
		sumDy += dy[i]
	}
	forEachRowPath(t, func(t *testing.T) {
		dx, ds, db := make([]float64, rows), make([]float64, 1), make([]float64, 1)
		layerNormRowsBackward(dy, x, dx, rows, 1, 1e-5, scale, ds, db)
		for i, v := range dx {
			if v != 0 {
				require.Zero(t, v, "float64 dx[%d]", i)
			}
		}
		require.Zero(t, ds[0])
		require.InDelta(t, sumDy, db[0], 1e-9)

		x32, dy32, dx32 := make([]float32, rows), make([]float32, rows), make([]float32, rows)
		for i := range x {
			x32[i], dy32[i] = float32(x[i]), float32(dy[i])
		}
		ds, db = make([]float64, 1), make([]float64, 1)
		layerNormRowsBackward(dy32, x32, dx32, rows, 1, 1e-5, scale, ds, db)
		for i, v := range dx32 {
			if v != 0 {
				require.Zero(t, v, "float32 dx[%d]", i)
			}
		}
		require.Zero(t, ds[0])
		require.InDelta(t, sumDy, db[0], 1e-4)
	})
}

// softmaxGradSumModel is, in Go, the sum the softmax gradient's row takes
// on the path in use: with the row kernel (rowAsm, eight elements or
// more), its two four-lane accumulators over the first n&^7 elements,
// added lane by lane and folded as (l0 + l2) + (l1 + l3), then dot32's
// pairs over the rest; otherwise dot32.
func softmaxGradSumModel(dy, y []float32) float64 {
	n := len(dy)
	if !rowAsm || n < 8 {
		return dot32(dy, y)
	}
	body := n &^ 7
	var lanes [8]float64
	for i := 0; i < body; i++ {
		lanes[i%8] += float64(dy[i]) * float64(y[i])
	}
	var t [4]float64
	for j := range t {
		t[j] = lanes[j] + lanes[j+4]
	}
	return (t[0] + t[2]) + (t[1] + t[3]) + dot32(dy[body:], y[body:])
}

// TestSoftmaxGradRowsMatchesModel: SoftmaxGradRows32 (one assembly call a
// row where the CPU has the row kernels, each fetching the next row's
// lines) writes every row as float32(y·(dy − s)) with s the sum in the
// order softmaxGradSumModel spells out, bit for bit, for row lengths
// around the 8-element steps and their tails (pairs and an odd element),
// attention's 128 and 197, in place (dx = dy, as the fused attention
// gradient writes) and apart; through the Go loops too. The gradients
// span twelve decades, so that the float64 sums round, and the kernel's
// sum is checked itself (dx rarely shows its last bits): a row kernel
// that summed in another order fails.
func TestSoftmaxGradRowsMatchesModel(t *testing.T) {
	forEachRowPath(t, func(t *testing.T) {
		for _, cols := range []int{1, 7, 8, 9, 10, 11, 15, 16, 17, 23, 128, 197} {
			rng := rand.New(rand.NewPCG(uint64(cols), 31))
			const rows = 37
			dy, y := make([]float32, rows*cols), make([]float32, rows*cols)
			for i := range y {
				// Magnitudes 1e-6..1e6, so that the float64 sums round
				// and their order shows.
				dy[i], y[i] = float32(rng.NormFloat64()*math.Pow(10, 12*rng.Float64()-6)), float32(rng.Float64())
			}
			want := make([]float32, len(y))
			for o := 0; o < len(y); o += cols {
				s := softmaxGradSumModel(dy[o:o+cols], y[o:o+cols])
				for i := o; i < o+cols; i++ {
					want[i] = float32(float64(y[i]) * (float64(dy[i]) - s))
				}
			}
			apart := make([]float32, len(y))
			SoftmaxGradRows32(dy, y, apart, cols)
			inPlace := append([]float32(nil), dy...)
			SoftmaxGradRows32(inPlace, y, inPlace, cols)
			if rowAsm && cols >= 8 {
				out := make([]float32, cols)
				for o := 0; o < len(y); o += cols {
					s := softmaxGradRowAVX2(&dy[o], &y[o], &out[0], cols, 0)
					require.Equal(t, math.Float64bits(softmaxGradSumModel(dy[o:o+cols], y[o:o+cols])), math.Float64bits(s), "cols %d, row %d's sum", cols, o/cols)
				}
			}
			for i := range want {
				require.Equal(t, math.Float32bits(want[i]), math.Float32bits(apart[i]), "cols %d, dx[%d] apart", cols, i)
				require.Equal(t, math.Float32bits(want[i]), math.Float32bits(inPlace[i]), "cols %d, dx[%d] in place", cols, i)
			}
		}
	})
}

// TestSoftmaxGradCausalRows: SoftmaxGradCausalRows32 over causal heads
// (y from reduce.SoftmaxCausalRows32 of random scores, two heads of t×t)
// gives what SoftmaxGradRows32 gives over the whole rows with dy +0 past
// each diagonal (the filled dP it replaces), bit for bit, where a reader
// of that reach reads (reduce.CausalRowEnd), with dy NaN past the diagonal
// instead; past that end dx keeps what it held. In place and apart, for t
// around the 8-element steps and the reaches' blocks, through both row
// paths; with a scale (the attention's dS scale) multiplied in after.
func TestSoftmaxGradCausalRows(t *testing.T) {
	forEachRowPath(t, func(t *testing.T) {
		for _, tt := range []int{5, 8, 13, 64, 100, 131, 200} {
			for _, reach := range []int{0, 32, 64} {
				rng := rand.New(rand.NewPCG(uint64(tt), uint64(reach)))
				const heads = 2
				n := heads * tt * tt
				scores, y := make([]float32, n), make([]float32, n)
				for i := range scores {
					scores[i] = float32(rng.NormFloat64() * 3)
				}
				reduce.SoftmaxCausalRows32(y, scores, make([]float32, tt), tt)
				filled, garbage := make([]float32, n), make([]float32, n)
				for i := range filled {
					g := float32(rng.NormFloat64() * math.Pow(10, 6*rng.Float64()-3))
					if r, c := i/tt%tt, i%tt; c > r {
						filled[i], garbage[i] = 0, float32(math.NaN())
						continue
					}
					filled[i], garbage[i] = g, g
				}
				want := make([]float32, n)
				SoftmaxGradRows32(filled, y, want, tt)
				scale := float32(1)
				if reach == 32 {
					scale = 0.3 // the attention's dS scale, after the rows
					for i := range want {
						want[i] *= scale
					}
				}
				poison := float32(-7)
				apart := make([]float32, n)
				for i := range apart {
					apart[i] = poison
				}
				in := append([]float32(nil), garbage...)
				SoftmaxGradCausalRows32(in, y, apart, tt, reach, scale)
				inPlace := append([]float32(nil), garbage...)
				SoftmaxGradCausalRows32(inPlace, y, inPlace, tt, reach, scale)
				for i := range want {
					r, c := i/tt%tt, i%tt
					name := fmt.Sprintf("t %d, reach %d, head %d, dx[%d, %d]", tt, reach, i/(tt*tt), r, c)
					if c >= reduce.CausalRowEnd(r, tt, reach) {
						require.Equal(t, poison, apart[i], "%s: past the reach, written", name)
						require.True(t, garbage[i] == inPlace[i] || garbage[i] != garbage[i] && inPlace[i] != inPlace[i], "%s: past the reach, written in place", name)
						continue
					}
					require.Equal(t, math.Float32bits(want[i]), math.Float32bits(apart[i]), "%s apart", name)
					require.Equal(t, math.Float32bits(want[i]), math.Float32bits(inPlace[i]), "%s in place", name)
				}
			}
		}
	})
}
