package benchlib

import (
	"bytes"
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	_ "github.com/onnxtrain/onnxtrain/backend/cpu"
	"github.com/onnxtrain/onnxtrain/graph"
)

func msDurations(ms ...float64) []time.Duration {
	out := make([]time.Duration, len(ms))
	for i, m := range ms {
		out[i] = time.Duration(m * float64(time.Millisecond))
	}
	return out
}

func TestSummarize(t *testing.T) {
	// 1..10 ms, shuffled: median (5+6)/2, mean 5.5, nearest-rank p90 = 9.
	s, err := Summarize(msDurations(7, 2, 9, 1, 10, 3, 8, 4, 6, 5))
	require.NoError(t, err)
	assert.InDelta(t, 5.5, s.MedianMS, 1e-9)
	assert.InDelta(t, 5.5, s.MeanMS, 1e-9)
	assert.InDelta(t, 9, s.P90MS, 1e-9)
	assert.InDelta(t, 1, s.MinMS, 1e-9)
	assert.InDelta(t, 10, s.MaxMS, 1e-9)

	// Odd count: the middle value; p90 of three is the largest (ceil(2.7) = 3).
	s, err = Summarize(msDurations(3, 1, 2))
	require.NoError(t, err)
	assert.InDelta(t, 2, s.MedianMS, 1e-9)
	assert.InDelta(t, 3, s.P90MS, 1e-9)
	assert.InDelta(t, 2, s.MeanMS, 1e-9)

	_, err = Summarize(nil)
	assert.Error(t, err)
}

func TestStatusField(t *testing.T) {
	status := []byte("Name:\tonnxtrain\nVmPeak:\t  999 kB\nVmHWM:\t   12345 kB\nVmRSS:\t 100 kB\n")
	v, err := statusField(status, "VmHWM")
	require.NoError(t, err)
	assert.Equal(t, int64(12345*1024), v)
	_, err = statusField(status, "VmSwap")
	assert.ErrorContains(t, err, "VmSwap")
	_, err = statusField([]byte("VmHWM:\t 12 parsecs\n"), "VmHWM")
	assert.ErrorContains(t, err, "unit")
}

// Touching 64 MiB of fresh memory raises the peak by about that much.
func TestPeakRSSSeesAllocation(t *testing.T) {
	before, err := PeakRSS()
	require.NoError(t, err)
	require.Positive(t, before)
	buf := make([]byte, 64<<20)
	for i := 0; i < len(buf); i += 4096 {
		buf[i] = 1
	}
	after, err := PeakRSS()
	require.NoError(t, err)
	runtime.KeepAlive(buf)
	assert.GreaterOrEqual(t, after-before, int64(48<<20), "peak RSS %d -> %d", before, after)
}

func dims(ds ...any) []graph.Dim {
	out := make([]graph.Dim, len(ds))
	for i, d := range ds {
		switch v := d.(type) {
		case int:
			out[i] = graph.Dim{Value: int64(v), Known: true}
		case string:
			out[i] = graph.Dim{Param: v}
		case nil:
			out[i] = graph.Dim{}
		}
	}
	return out
}

func tensorInput(name string, d graph.DType, shape []graph.Dim) *graph.ValueInfo {
	return &graph.ValueInfo{Name: name, Type: &graph.Type{Kind: graph.KindTensor, DType: d, HasShape: true, Shape: shape}}
}

func TestResolveInputShapes(t *testing.T) {
	g := &graph.Graph{
		Inputs: []*graph.ValueInfo{
			tensorInput("x", graph.Float32, dims("batch", 3, "h")),
			tensorInput("ids", graph.Int64, dims("N", "batch")), // "batch" reused after the first dim
			tensorInput("w", graph.Float32, dims(3, 3)),         // an initializer listed as input
		},
		Initializers: map[string]*graph.Tensor{"w": graph.Zeros(graph.Float32, 3, 3)},
	}
	_, _, err := ResolveInputShapes(g, 4, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"x"`)
	assert.Contains(t, err.Error(), "--dim h=")

	shapes, syms, err := ResolveInputShapes(g, 4, map[string]int64{"h": 5})
	require.NoError(t, err)
	assert.Equal(t, Shapes{"x": {4, 3, 5}, "ids": {4, 4}}, shapes)
	assert.Equal(t, map[string]int64{"batch": 4, "N": 4, "h": 5}, syms)

	// --dim may also size the first dimension.
	shapes, _, err = ResolveInputShapes(g, 4, map[string]int64{"h": 5, "N": 7})
	require.NoError(t, err)
	assert.Equal(t, []int{7, 4}, shapes["ids"])

	// An unnamed open dimension past the first cannot be sized.
	g2 := &graph.Graph{Inputs: []*graph.ValueInfo{tensorInput("x", graph.Float32, dims(nil, nil))}}
	_, _, err = ResolveInputShapes(g2, 2, nil)
	assert.ErrorContains(t, err, "dimension 1 has no size")

	// A fixed batch must match --batch-size.
	g4 := &graph.Graph{Inputs: []*graph.ValueInfo{tensorInput("x", graph.Float32, dims(8, 3))}}
	shapes, _, err = ResolveInputShapes(g4, 8, nil)
	require.NoError(t, err)
	assert.Equal(t, []int{8, 3}, shapes["x"])
	_, _, err = ResolveInputShapes(g4, 4, nil)
	assert.ErrorContains(t, err, "--batch-size 8")

	// Unshaped inputs, no inputs, bad sizes.
	g3 := &graph.Graph{Inputs: []*graph.ValueInfo{{Name: "x", Type: &graph.Type{Kind: graph.KindTensor, DType: graph.Float32}}}}
	_, _, err = ResolveInputShapes(g3, 2, nil)
	assert.ErrorContains(t, err, `"x" has no declared tensor shape`)
	_, _, err = ResolveInputShapes(&graph.Graph{}, 2, nil)
	assert.ErrorContains(t, err, "no data inputs")
	_, _, err = ResolveInputShapes(g, 0, nil)
	assert.ErrorContains(t, err, "batch size")
	_, _, err = ResolveInputShapes(g, 2, map[string]int64{"h": -1})
	assert.ErrorContains(t, err, "h=-1")
}

func TestRandomTensorDistributions(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	x, err := RandomTensor(rng, graph.Float32, []int{20000}, 0)
	require.NoError(t, err)
	var sum, sq float64
	for _, v := range x.Float32s() {
		sum += float64(v)
		sq += float64(v) * float64(v)
	}
	mean := sum / 20000
	assert.InDelta(t, 0, mean, 0.05)
	assert.InDelta(t, 1, sq/20000-mean*mean, 0.05)

	ids, err := RandomTensor(rng, graph.Int64, []int{1000}, 3)
	require.NoError(t, err)
	seen := map[int64]int{}
	for _, v := range ids.Int64s() {
		seen[v]++
	}
	assert.Len(t, seen, 3)
	for v := range seen {
		assert.True(t, v >= 0 && v < 3, "value %d outside [0, 3)", v)
	}

	i32, err := RandomTensor(rng, graph.Int32, []int{2, 5}, 4)
	require.NoError(t, err)
	for i := 0; i < i32.Size(); i++ {
		assert.True(t, i32.Int(i) >= 0 && i32.Int(i) < 4)
	}
	_, err = RandomTensor(rng, graph.Int64, []int{2}, 0)
	assert.ErrorContains(t, err, "upper bound")
	_, err = RandomTensor(rng, graph.String, []int{2}, 1)
	assert.Error(t, err)
}

func TestRandomLabels(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	l, err := RandomLabels(rng, "cross_entropy", []int{64, 5, 3})
	require.NoError(t, err)
	assert.Equal(t, graph.Int64, l.DType)
	assert.Equal(t, []int{64, 3}, l.Shape)
	seen := map[int64]bool{}
	for _, v := range l.Int64s() {
		assert.True(t, v >= 0 && v < 5, "class %d outside [0, 5)", v)
		seen[v] = true
	}
	assert.Len(t, seen, 5)

	l, err = RandomLabels(rng, "mse", []int{4, 2})
	require.NoError(t, err)
	assert.Equal(t, graph.Float32, l.DType)
	assert.Equal(t, []int{4, 2}, l.Shape)

	l, err = RandomLabels(rng, "bce_with_logits", []int{10, 3})
	require.NoError(t, err)
	for _, v := range l.Float32s() {
		assert.True(t, v >= 0 && v < 1)
	}

	l, err = RandomLabels(rng, "output", []int{4})
	require.NoError(t, err)
	assert.Nil(t, l)

	_, err = RandomLabels(rng, "cross_entropy", []int{4})
	assert.ErrorContains(t, err, "rank")
	_, err = RandomLabels(rng, "hinge", []int{4, 2})
	assert.ErrorContains(t, err, "hinge")
}

func TestOutputShape(t *testing.T) {
	// Declared: [batch, 10] with batch known.
	m := &graph.Model{Opsets: map[string]int64{"": 17}, Graph: &graph.Graph{
		Inputs:  []*graph.ValueInfo{tensorInput("x", graph.Float32, dims("batch", 4))},
		Outputs: []*graph.ValueInfo{tensorInput("y", graph.Float32, dims("batch", 10))},
	}}
	shape, err := OutputShape(m, "y", Shapes{"x": {8, 4}}, map[string]int64{"batch": 8})
	require.NoError(t, err)
	assert.Equal(t, []int{8, 10}, shape)
	_, err = OutputShape(m, "z", Shapes{"x": {8, 4}}, nil)
	assert.ErrorContains(t, err, `"z" is not an output`)

	// Undeclared: shape inference of x[N,4] · W[4,3].
	m2 := &graph.Model{Opsets: map[string]int64{"": 17}, Graph: &graph.Graph{
		Inputs:       []*graph.ValueInfo{tensorInput("x", graph.Float32, dims("batch", 4))},
		Outputs:      []*graph.ValueInfo{{Name: "y"}},
		Nodes:        []*graph.Node{{Name: "mm", OpType: "MatMul", Inputs: []string{"x", "W"}, Outputs: []string{"y"}}},
		Initializers: map[string]*graph.Tensor{"W": graph.Zeros(graph.Float32, 4, 3)},
	}}
	shape, err = OutputShape(m2, "y", Shapes{"x": {6, 4}}, map[string]int64{"batch": 6})
	require.NoError(t, err)
	assert.Equal(t, []int{6, 3}, shape)
}

func TestEvalGraphSwitchesModesOnACopy(t *testing.T) {
	bn := &graph.Node{Name: "bn", OpType: "BatchNormalization", Inputs: []string{"x", "s", "b", "m", "v"},
		Outputs: []string{"y", "m2", "v2"}, Attrs: map[string]*graph.Attr{}}
	bn.SetAttr(graph.IntAttr("training_mode", 1))
	do := &graph.Node{Name: "do", OpType: "Dropout", Inputs: []string{"y", "r", "t"}, Outputs: []string{"z"}}
	g := &graph.Graph{Nodes: []*graph.Node{bn, do}}
	e := evalGraph(g)
	require.Len(t, e.Nodes, 2)
	assert.Equal(t, int64(0), e.Nodes[0].AttrInt("training_mode", -1))
	assert.Equal(t, []string{"y"}, e.Nodes[0].Outputs)
	assert.Equal(t, []string{"y", "r"}, e.Nodes[1].Inputs)
	// The original is untouched.
	assert.Equal(t, int64(1), bn.AttrInt("training_mode", -1))
	assert.Len(t, bn.Outputs, 3)
	assert.Len(t, do.Inputs, 3)
}

func TestParseGemmShape(t *testing.T) {
	m, n, k, err := ParseGemmShape("128, 784,512")
	require.NoError(t, err)
	assert.Equal(t, [3]int{128, 784, 512}, [3]int{m, n, k})
	for _, bad := range []string{"1,2", "1,2,3,4", "a,2,3", "0,2,3", "1,-2,3", ""} {
		_, _, _, err := ParseGemmShape(bad)
		assert.Error(t, err, bad)
	}
}

// The benchmark multiplies what it says: every transpose combination gives
// the textbook product of the operands as stored.
func TestGemmOperandsComputeTheProduct(t *testing.T) {
	const m, n, k = 37, 29, 41
	for _, ta := range []bool{false, true} {
		for _, tb := range []bool{false, true} {
			o := GemmOptions{M: m, N: n, K: k, TransA: ta, TransB: tb, Seed: 7}
			g, err := newGemmOperands(o)
			require.NoError(t, err)
			g.run(o)
			at := func(i, p int) float64 {
				if ta {
					return float64(g.a[p*g.lda+i])
				}
				return float64(g.a[i*g.lda+p])
			}
			bt := func(p, j int) float64 {
				if tb {
					return float64(g.b[j*g.ldb+p])
				}
				return float64(g.b[p*g.ldb+j])
			}
			maxErr := 0.0
			for i := 0; i < m; i++ {
				for j := 0; j < n; j++ {
					want := 0.0
					for p := 0; p < k; p++ {
						want += at(i, p) * bt(p, j)
					}
					maxErr = math.Max(maxErr, math.Abs(want-float64(g.c[i*g.ldc+j])))
				}
			}
			assert.Less(t, maxErr, 1e-3, "transA=%v transB=%v", ta, tb)
			g.free()
		}
	}
	_, err := newGemmOperands(GemmOptions{M: 0, N: 1, K: 1})
	assert.ErrorContains(t, err, "positive")
}

func TestRunGemmReportsConsistentFigures(t *testing.T) {
	r, err := RunGemm(GemmOptions{M: 64, N: 48, K: 32, TransB: true, Reps: 3, MinRepTime: time.Millisecond})
	require.NoError(t, err)
	assert.Equal(t, 3, r.Reps)
	assert.True(t, r.TransB)
	assert.Positive(t, r.GFLOPS)
	assert.LessOrEqual(t, r.MinGFLOPS, r.GFLOPS)
	assert.LessOrEqual(t, r.GFLOPS, r.MaxGFLOPS)
	// GFLOP/s and the time per product describe the same measurement.
	assert.InEpsilon(t, 2*64*48*32, r.GFLOPS*1e9*r.MedianMS/1000, 1e-9)
	_, err = RunGemm(GemmOptions{M: 4, N: 4, K: 4, Reps: -1})
	assert.ErrorContains(t, err, "negative")
}

// Training a BatchNorm model: the parameter count is PyTorch's
// (sum(p.numel() for p in CifarResNet().parameters()) = 19954), the
// batch-statistics path runs, and the CPU profile is written.
func TestRunModelCifarResNet(t *testing.T) {
	var prof bytes.Buffer
	r, err := RunModel(context.Background(), ModelOptions{
		Model: "../../models/cifar_resnet/cifar_resnet_train.onnx", BatchSize: 4, Steps: 2, Warmup: 1, LR: 0.05, Profile: &prof,
	})
	require.NoError(t, err)
	assert.Equal(t, "train", r.Mode)
	assert.Equal(t, 19954, r.Parameters)
	assert.Equal(t, "sgd", r.Optimizer)
	assert.Equal(t, 2, r.Steps)
	assert.LessOrEqual(t, r.MedianStepMS, r.P90StepMS)
	assert.InEpsilon(t, 4/(r.MeanStepMS/1000), r.SamplesPerS, 1e-9)
	assert.False(t, math.IsNaN(r.LastLoss))
	require.Greater(t, prof.Len(), 2)
	assert.Equal(t, []byte{0x1f, 0x8b}, prof.Bytes()[:2], "pprof profiles are gzip-compressed")
}

func TestRunModelErrors(t *testing.T) {
	_, err := RunModel(context.Background(), ModelOptions{BatchSize: 1, Steps: 1})
	assert.ErrorContains(t, err, "--model")
	_, err = RunModel(context.Background(), ModelOptions{Model: "x.onnx", BatchSize: 1, Steps: 0})
	assert.ErrorContains(t, err, "--steps")
	_, err = RunModel(context.Background(), ModelOptions{Model: "no/such/model.onnx", BatchSize: 1, Steps: 1})
	assert.ErrorContains(t, err, "no/such/model.onnx")
	_, err = RunModel(context.Background(), ModelOptions{Model: "../../models/mlp/mlp_train.onnx", BatchSize: 2, Steps: 1, Optimizer: "lbfgs"})
	assert.ErrorContains(t, err, "lbfgs")
	_, err = RunModel(context.Background(), ModelOptions{Model: "../../models/mlp/mlp_train.onnx", BatchSize: 2, Steps: 1, Loss: "output:nope"})
	assert.ErrorContains(t, err, "nope")
}

// TestRunStreamComputesTheTriad: the triad runs on the threads asked for,
// checks its own result and reports a positive bandwidth; bad sizes are
// errors.
func TestRunStreamComputesTheTriad(t *testing.T) {
	r, err := RunStream(StreamOptions{Elements: 1 << 16, Reps: 2, Threads: 3})
	require.NoError(t, err)
	assert.Positive(t, r.TriadGBps)
	assert.Equal(t, 3, r.Threads)
	assert.InDelta(t, 0.5, r.ArrayMiB, 1e-12)
	_, err = RunStream(StreamOptions{Elements: 2, Threads: 4})
	assert.ErrorContains(t, err, "invalid sizes")
	out := make([]float64, 5)
	triad(out, []float64{1, 2, 3, 4, 5}, []float64{1, 1, 1, 1, 2}, 0.5)
	assert.Equal(t, []float64{1.5, 2.5, 3.5, 4.5, 6}, out)
}

// ModelOptions.CheckModel sees the model RunModel loaded (the command
// vets the batch against memory with it instead of loading the file a
// second time), and its error stops the run before any step.
func TestRunModelCheckModel(t *testing.T) {
	var seen *graph.Model
	stop := errors.New("refused")
	_, err := RunModel(context.Background(), ModelOptions{
		Model: "../../models/mlp/mlp_train.onnx", BatchSize: 2, Steps: 1,
		CheckModel: func(m *graph.Model) error { seen = m; return stop },
	})
	require.ErrorIs(t, err, stop)
	require.NotNil(t, seen)
	assert.NotEmpty(t, seen.Graph.Inputs)
	assert.NotEmpty(t, seen.Graph.Initializers, "the model with its weights, as the step uses it")
}
