package gradient

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// TestSCERowsMatchDefinition checks the one-pass float32 gradient of
// SoftmaxCrossEntropyLoss over a wide class axis (C = 5003, not a multiple
// of 8: the assembly body and the Go tail both run), with class weights,
// an ignored target, and each reduction, against the definition
// (softmax − one-hot)·weight·scale computed here in float64, on 1 and 2
// cores.
func TestSCERowsMatchDefinition(t *testing.T) {
	const rows, c, ignore = 37, 5003, 7
	rng := rand.New(rand.NewPCG(5, 6))
	x := make([]float32, rows*c)
	for i := range x {
		x[i] = float32(3 * rng.NormFloat64())
	}
	labels := make([]int64, rows)
	for k := range labels {
		labels[k] = int64(rng.IntN(c))
	}
	labels[3] = ignore
	weight := make([]float32, c)
	for i := range weight {
		weight[i] = float32(0.5 + rng.Float64())
	}
	xt := &graph.Tensor{DType: graph.Float32, Shape: []int{rows, c}, Data: x}
	tt := &graph.Tensor{DType: graph.Int64, Shape: []int{rows}, Data: labels}
	wt := &graph.Tensor{DType: graph.Float32, Shape: []int{c}, Data: weight}
	dlossNone := make([]float32, rows)
	for k := range dlossNone {
		dlossNone[k] = float32(rng.NormFloat64())
	}
	for _, reduction := range []string{"mean", "sum", "none"} {
		for _, procs := range []int{1, 2} {
			t.Run(reduction, func(t *testing.T) {
				n := &graph.Node{Name: "sce_grad", OpType: "SoftmaxCrossEntropyLossGrad", Domain: graph.InternalDomain,
					Attrs: map[string]*graph.Attr{"reduction": graph.StringAttr("reduction", reduction),
						"ignore_index": graph.IntAttr("ignore_index", ignore)}}
				dloss := &graph.Tensor{DType: graph.Float32, Shape: []int{}, Data: []float32{1.5}}
				if reduction == "none" {
					dloss = &graph.Tensor{DType: graph.Float32, Shape: []int{rows}, Data: dlossNone}
				}
				var out []*graph.Tensor
				var err error
				withProcs(procs, func() {
					out, err = softmaxCrossEntropyLossGrad(nil, n, []*graph.Tensor{dloss, xt, tt, wt, nil})
				})
				require.NoError(t, err)
				got := out[0].Float32s()
				var wsum float64
				for k, l := range labels {
					if l != ignore {
						wsum += float64(weight[l])
					}
					_ = k
				}
				worst := 0.0
				for k, l := range labels {
					scale := 1.5
					switch reduction {
					case "mean":
						scale /= wsum
					case "none":
						scale = float64(dlossNone[k])
					}
					ws := float64(weight[l]) * scale
					if l == ignore {
						ws = 0
					}
					row := x[k*c : (k+1)*c]
					m := math.Inf(-1)
					for _, v := range row {
						m = math.Max(m, float64(v))
					}
					var z float64
					for _, v := range row {
						z += math.Exp(float64(v) - m)
					}
					for j, v := range row {
						want := math.Exp(float64(v)-m) / z * ws
						if int64(j) == l {
							want -= ws
						}
						d := math.Abs(float64(got[k*c+j]) - want)
						worst = math.Max(worst, d/(math.Abs(ws)+1e-30))
					}
				}
				// Relative to the row's scale: float32 rounding of e^(x-m)
				// (1 ulp) and of the product.
				assert.Less(t, worst, 1e-6, "procs %d", procs)
			})
		}
	}
}

// BenchmarkSCEGradVocab times SoftmaxCrossEntropyLossGrad over a GPT-2
// batch of logits (4×128 positions × 50257 classes, mean reduction): the
// one-pass kernel, and the generic float64 loop it replaced for this case
// (run in the same process, as the ratio's peer).
func BenchmarkSCEGradVocab(b *testing.B) {
	const rows, c = 512, 50257
	rng := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, rows*c)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	labels := make([]int64, rows)
	for k := range labels {
		labels[k] = int64(rng.IntN(c))
	}
	xt := &graph.Tensor{DType: graph.Float32, Shape: []int{rows, c}, Data: x}
	tt := &graph.Tensor{DType: graph.Int64, Shape: []int{rows}, Data: labels}
	dloss := &graph.Tensor{DType: graph.Float32, Shape: []int{}, Data: []float32{1}}
	n := &graph.Node{Name: "g", OpType: "SoftmaxCrossEntropyLossGrad", Domain: graph.InternalDomain,
		Attrs: map[string]*graph.Attr{"reduction": graph.StringAttr("reduction", "mean")}}
	b.Run("one-pass", func(b *testing.B) {
		b.SetBytes(int64(2 * 4 * rows * c))
		for b.Loop() {
			if _, err := softmaxCrossEntropyLossGrad(nil, n, []*graph.Tensor{dloss, xt, tt}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("generic", func(b *testing.B) {
		b.SetBytes(int64(2 * 4 * rows * c))
		dx := make([]float32, rows*c)
		w, s := make([]float64, rows), make([]float64, rows)
		for k := range w {
			w[k], s[k] = 1, 1.0/rows
		}
		p, g := make([]float64, c), make([]float64, c)
		for b.Loop() {
			sceBackward(x, nil, dx, layout{outer: rows, r: c, inner: 1}, labels, w, s, p, g)
		}
	})
}

// dirtyAlloc serves kern.NewUninit from storage filled with NaN (what a
// planned buffer may hold from an earlier value) and kern.New from zeros.
type dirtyAlloc struct{}

func (dirtyAlloc) Alloc(_ *graph.Node, d graph.DType, shape []int, elems int) *graph.Tensor {
	return graph.Zeros(d, shape...)
}

func (dirtyAlloc) AllocUninit(_ *graph.Node, d graph.DType, shape []int, elems int) *graph.Tensor {
	t := graph.Zeros(d, shape...)
	switch v := t.Data.(type) {
	case []float32:
		for i := range v {
			v[i] = float32(math.NaN())
		}
	case []float64:
		for i := range v {
			v[i] = math.NaN()
		}
	}
	return t
}

// TestSCERowsWriteEveryElement: the row kernel's output comes unzeroed
// (kern.NewUninit), so every element must be written, the rows of an
// ignored target (weight 0) included: on storage full of NaN the result
// is bit for bit the one on fresh zeroed storage.
func TestSCERowsWriteEveryElement(t *testing.T) {
	const rows, c, ignore = 9, 1003, 5
	rng := rand.New(rand.NewPCG(7, 8))
	x := make([]float32, rows*c)
	for i := range x {
		x[i] = float32(2 * rng.NormFloat64())
	}
	labels := make([]int64, rows)
	for k := range labels {
		labels[k] = int64(rng.IntN(c))
	}
	labels[2], labels[7] = ignore, ignore
	in := []*graph.Tensor{{DType: graph.Float32, Shape: []int{}, Data: []float32{1}},
		{DType: graph.Float32, Shape: []int{rows, c}, Data: x}, {DType: graph.Int64, Shape: []int{rows}, Data: labels}}
	node := func() *graph.Node {
		return &graph.Node{Name: "sce_grad", OpType: "SoftmaxCrossEntropyLossGrad", Domain: graph.InternalDomain,
			Outputs: []string{"dx"}, Attrs: map[string]*graph.Attr{"reduction": graph.StringAttr("reduction", "mean"),
				"ignore_index": graph.IntAttr("ignore_index", ignore)}}
	}
	want, err := softmaxCrossEntropyLossGrad(nil, node(), in)
	require.NoError(t, err)
	n := node()
	b := &kern.Binding{Allocator: dirtyAlloc{}}
	kern.Bind(n, b)
	defer kern.Unbind(n)
	got, err := softmaxCrossEntropyLossGrad(nil, n, in)
	require.NoError(t, err)
	w, g := want[0].Float32s(), got[0].Float32s()
	for i := range w {
		require.Equal(t, math.Float32bits(w[i]), math.Float32bits(g[i]), "element %d (row %d)", i, i/c)
	}
	assert.Zero(t, g[2*c+labels[0]%c], "an ignored row is all zeros")
}

// BenchmarkSCEGradRows times the row kernel of SoftmaxCrossEntropyLossGrad
// alone over a GPT-2 batch of logits (512 × 50257) into a gradient buffer
// made once, as a compiled step's planned buffer is (the kernel benchmark
// above also allocates and faults in 103 MB per call). Bytes: the scores
// read and the gradient written.
func BenchmarkSCEGradRows(b *testing.B) {
	const rows, c = 512, 50257
	rng := rand.New(rand.NewPCG(1, 2))
	x, dx := make([]float32, rows*c), make([]float32, rows*c)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	labels := make([]int64, rows)
	w, s := make([]float64, rows), make([]float64, rows)
	for k := range labels {
		labels[k] = int64(rng.IntN(c))
		w[k], s[k] = 1, 1.0/rows
	}
	t := sceRowsTask{x: x, dx: dx, c: c, labels: labels, w: w, s: s}
	t.run(rows) // the gradient's pages faulted in before the clock starts
	b.SetBytes(int64(2 * 4 * rows * c))
	for b.Loop() {
		t := sceRowsTask{x: x, dx: dx, c: c, labels: labels, w: w, s: s}
		t.run(rows)
	}
}
