package gradient

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// SplitLike at sizes whose pieces the cores copy together (rows cut
// mid-row between chunks): every element of every piece is dy's element at
// its place, for float32 and float64, along the first, a middle and the
// last axis. The pieces come uninitialised, so an element no chunk copies
// stays zero, which dy (no zeros) never holds.
func TestSplitLikeParallelPieces(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, c := range []struct {
		shape  []int
		axis   int
		pieces []int
	}{
		{[]int{4, 197, 768}, 1, []int{1, 196}},    // ViT-B/16's class token and patches
		{[]int{3, 301, 211}, 1, []int{7, 1, 293}}, // rows of odd widths
		{[]int{300, 700}, 0, []int{13, 287}},      // leading rows
		{[]int{700, 3, 97}, 2, []int{50, 47}},     // many short rows
	} {
		for _, dt := range []graph.DType{graph.Float32, graph.Float64} {
			dy, err := graph.NewTensor(dt, c.shape)
			require.NoError(t, err)
			for i := range dy.Size() {
				v := 1 + rng.Float64()
				switch d := dy.Data.(type) {
				case []float32:
					d[i] = float32(v)
				case []float64:
					d[i] = v
				}
			}
			in := []*graph.Tensor{dy}
			for _, p := range c.pieces {
				sh := append([]int(nil), c.shape...)
				sh[c.axis] = p
				like, err := graph.NewTensor(dt, sh)
				require.NoError(t, err)
				in = append(in, like)
			}
			n := &graph.Node{Name: "split", OpType: "SplitLike", Domain: graph.InternalDomain, Outputs: make([]string, len(c.pieces))}
			n.SetAttr(graph.IntAttr("axis", int64(c.axis)))
			spec, ok := kern.Lookup(n.Domain, n.OpType, 17)
			require.True(t, ok)
			outs, err := spec.Fn(&kern.Context{Opset: 17}, n, in)
			require.NoError(t, err)
			require.Len(t, outs, len(c.pieces))
			outer, inner := 1, 1
			for a, d := range c.shape {
				if a < c.axis {
					outer *= d
				} else if a > c.axis {
					inner *= d
				}
			}
			off := 0
			for k, p := range c.pieces {
				require.Equal(t, in[k+1].Shape, outs[k].Shape)
				for o := range outer {
					for j := range p * inner {
						want := dy.Float(o*c.shape[c.axis]*inner + off*inner + j)
						got := outs[k].Float(o*p*inner + j)
						if want != got {
							t.Fatalf("%v %v axis %d piece %d: element (%d, %d) is %v, dy has %v", dt, c.shape, c.axis, k, o, j, got, want)
						}
					}
				}
				off += p
			}
		}
	}
}
