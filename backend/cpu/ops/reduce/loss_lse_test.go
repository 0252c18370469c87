package reduce

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
)

// TestSCELossWithoutLogProb: when no log_prob output is asked for, the
// loss comes from one log-sum-exp per row; it matches the definition
// -(x[t] - log Σ e^x)·w[t] (float64, here) with class weights, an ignored
// target and each reduction, over a wide class axis, on 1 and 2 cores, and
// the path that writes log_prob agrees.
func TestSCELossWithoutLogProb(t *testing.T) {
	const rows, c, ignore = 29, 5003, 11
	rng := rand.New(rand.NewPCG(7, 8))
	x := make([]float32, rows*c)
	for i := range x {
		x[i] = float32(4 * rng.NormFloat64())
	}
	labels := make([]int64, rows)
	for k := range labels {
		labels[k] = int64(rng.IntN(c))
	}
	labels[5] = ignore
	weight := make([]float32, c)
	for i := range weight {
		weight[i] = float32(0.5 + rng.Float64())
	}
	in := []*graph.Tensor{
		{DType: graph.Float32, Shape: []int{rows, c}, Data: x},
		{DType: graph.Int64, Shape: []int{rows}, Data: labels},
		{DType: graph.Float32, Shape: []int{c}, Data: weight},
	}
	want := make([]float64, rows)
	var wsum float64
	for k, l := range labels {
		if l == ignore {
			continue
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
		want[k] = -(float64(row[l]) - m - math.Log(z)) * float64(weight[l])
		wsum += float64(weight[l])
	}
	for _, reduction := range []string{"mean", "sum", "none"} {
		for _, procs := range []int{1, 2} {
			t.Run(reduction, func(t *testing.T) {
				node := func(outputs ...string) *graph.Node {
					return &graph.Node{Name: "sce", OpType: "SoftmaxCrossEntropyLoss", Outputs: outputs,
						Attrs: map[string]*graph.Attr{"reduction": graph.StringAttr("reduction", reduction),
							"ignore_index": graph.IntAttr("ignore_index", ignore)}}
				}
				old := runtime.GOMAXPROCS(procs)
				lseOut, err := softmaxCrossEntropyLoss(nil, node("loss"), in)
				require.NoError(t, err)
				fullOut, err := softmaxCrossEntropyLoss(nil, node("loss", "log_prob"), in)
				runtime.GOMAXPROCS(old)
				require.NoError(t, err)
				require.Len(t, lseOut, 1, "no log_prob without the output")
				require.Len(t, fullOut, 2)
				got, full := lseOut[0].Float32s(), fullOut[0].Float32s()
				switch reduction {
				case "none":
					require.Len(t, got, rows)
					for k := range want {
						assert.InDelta(t, want[k], got[k], 1e-6*math.Max(1, math.Abs(want[k])), "row %d", k)
						assert.InDelta(t, full[k], got[k], 1e-5*math.Max(1, math.Abs(want[k])), "row %d", k)
					}
				default:
					var sum float64
					for _, v := range want {
						sum += v
					}
					if reduction == "mean" {
						sum /= wsum
					}
					require.Len(t, got, 1)
					assert.InEpsilon(t, sum, got[0], 1e-6)
					assert.InEpsilon(t, full[0], got[0], 1e-5)
				}
			})
		}
	}
}

// BenchmarkSCELossVocab times SoftmaxCrossEntropyLoss over a GPT-2 batch
// of logits (4×128 positions × 50257 classes, mean reduction): the loss
// alone (one log-sum-exp per row) and with the log_prob output (the
// log-probability tensor written), in the same process.
func BenchmarkSCELossVocab(b *testing.B) {
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
	in := []*graph.Tensor{{DType: graph.Float32, Shape: []int{rows, c}, Data: x}, {DType: graph.Int64, Shape: []int{rows}, Data: labels}}
	for _, outs := range [][]string{{"loss"}, {"loss", "log_prob"}} {
		n := &graph.Node{Name: "sce", OpType: "SoftmaxCrossEntropyLoss", Outputs: outs, Attrs: map[string]*graph.Attr{}}
		b.Run(fmt.Sprintf("outputs=%d", len(outs)), func(b *testing.B) {
			b.SetBytes(int64(4 * rows * c))
			for b.Loop() {
				if _, err := softmaxCrossEntropyLoss(nil, n, in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
