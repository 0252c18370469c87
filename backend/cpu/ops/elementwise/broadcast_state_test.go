package elementwise

import (
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/internal/testutil"
)

// bruteOffsets lists, for every output element in row-major order, each
// operand's flat index under numpy broadcasting, by decoding the element's
// multi-index.
func bruteOffsets(shapes [][]int, out []int) [][]int {
	size := 1
	for _, d := range out {
		size *= d
	}
	res := make([][]int, size)
	idx := make([]int, len(out))
	for e := 0; e < size; e++ {
		r := e
		for d := len(out) - 1; d >= 0; d-- {
			idx[d] = r % out[d]
			r /= out[d]
		}
		offs := make([]int, len(shapes))
		for j, s := range shapes {
			off := 0
			for k, dim := range s {
				i := idx[len(out)-len(s)+k]
				if dim == 1 {
					i = 0
				}
				off = off*dim + i
			}
			offs[j] = off
		}
		res[e] = offs
	}
	return res
}

// TestPlanStateMatchesBruteForce: plans built again and again in one
// node's state (as the executor's nodes do), for random shapes of rank up
// to 10 and up to 4 operands (beyond the inline buffers), walk exactly the
// offsets numpy broadcasting gives.
func TestPlanStateMatchesBruteForce(t *testing.T) {
	n := &graph.Node{OpType: "Where"}
	b := &kern.Binding{}
	kern.Bind(n, b)
	defer kern.Unbind(n)
	r := rand.New(rand.NewPCG(5, 6))
	var first *bcastPlan
	for iter := 0; iter < 300; iter++ {
		rank := r.IntN(11)
		out := make([]int, rank)
		for i := range out {
			out[i] = 1 + r.IntN(3)
		}
		ops := 1 + r.IntN(4)
		shapes := make([][]int, ops)
		for j := range shapes {
			sr := r.IntN(rank + 1)
			s := append([]int{}, out[rank-sr:]...)
			for k := range s {
				if r.IntN(3) == 0 {
					s[k] = 1
				}
			}
			shapes[j] = s
		}
		out, err := kern.BroadcastShape(shapes...)
		require.NoError(t, err)
		p, err := newPlan(n, shapes...)
		require.NoError(t, err)
		if first == nil {
			first = p
		}
		require.Same(t, first, p, "a bound node keeps one plan")
		want := bruteOffsets(shapes, out)
		require.Equal(t, out, append([]int{}, p.out...), "shapes %v", shapes)
		require.Equal(t, len(want), p.size)
		var got [][]int
		p.eachRow(func(o int, offs []int) {
			for i := 0; i < p.inner; i++ {
				e := make([]int, len(offs))
				for j, off := range offs {
					e[j] = off + i*p.innerStride(j)
				}
				require.Equal(t, len(got), o+i)
				got = append(got, e)
			}
		})
		if len(want) == 0 {
			assert.Empty(t, got)
			continue
		}
		require.Equal(t, want, got, "shapes %v", shapes)
	}
	_, err := newPlan(n, []int{2, 3}, []int{4})
	assert.ErrorContains(t, err, "cannot be broadcast")
	runtime.KeepAlive(b) // the binding is weak
}

// fixedAlloc serves one preallocated tensor per request.
type fixedAlloc struct{ t *graph.Tensor }

func (f *fixedAlloc) Alloc(_ *graph.Node, d graph.DType, shape []int, _ int) *graph.Tensor {
	f.t.DType, f.t.Shape = d, append(f.t.Shape[:0], shape...)
	return f.t
}

// TestBoundBinaryAllocatesNothing: an Add (broadcast and not, serial and
// split over goroutines) on a node whose output storage the executor
// serves allocates nothing in the plan, the fan-out or the result slice
// once its state exists, and still computes the reference's result. The
// three objects left are arithLoops's func values (arith.go builds the
// generic row kernels' closures on every call).
func TestBoundBinaryAllocatesNothing(t *testing.T) {
	testutil.SkipShort(t, "allocation counts over large shapes")
	r := rand.New(rand.NewPCG(7, 8))
	for _, s := range [][2][]int{{{4, 5}, {4, 5}}, {{8, 3, 6}, {3, 1}}, {{64, 33, 40}, {33, 1}}, {{300000}, {300000}}} {
		a, bt := randTensor(r, s[0]), randTensor(r, s[1])
		want := referenceBinary(t, "Add", a, bt)
		n := &graph.Node{OpType: "Add", Inputs: []string{"a", "b"}, Outputs: []string{"y"}}
		fa := &fixedAlloc{t: &graph.Tensor{Data: make([]float32, want.Size())}}
		b := &kern.Binding{Allocator: fa}
		kern.Bind(n, b)
		spec, ok := kern.Lookup("", "Add", 14)
		require.True(t, ok)
		ctx := &kern.Context{Opset: 14}
		in := []*graph.Tensor{a, bt}
		call := func() {
			if _, err := spec.Fn(ctx, n, in); err != nil {
				panic(err)
			}
		}
		call()
		allocs := testing.AllocsPerRun(20, call)
		out, err := spec.Fn(ctx, n, in)
		require.NoError(t, err)
		assert.Equal(t, want.Data, out[0].Data, "shapes %v", s)
		assert.LessOrEqual(t, allocs, 3.0, "allocations per Add of shapes %v", s)
		runtime.KeepAlive(b) // the binding is weak
		kern.Unbind(n)
	}
}
