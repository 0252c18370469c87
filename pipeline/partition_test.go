package pipeline_test

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/pipeline"
	"github.com/onnxtrain/onnxtrain/train"
	"github.com/onnxtrain/onnxtrain/train/data"
	"github.com/onnxtrain/onnxtrain/train/optim"
)

func loadFixture(t *testing.T, f fixture) *graph.Model {
	t.Helper()
	m, err := importer.Load(filepath.Join("..", "models", f.model))
	require.NoError(t, err)
	return m
}

// TestPartitionCoversTheModel: every node but the Constants lands in
// exactly one stage, in graph order; every trainable initializer in some
// stage; what leaves a stage is what enters the next, each crossing tensor
// sized from its shape.
func TestPartitionCoversTheModel(t *testing.T) {
	for _, f := range fixtures {
		m := loadFixture(t, f)
		var want []string
		for _, n := range m.Graph.Nodes {
			if n.OpType != "Constant" {
				want = append(want, n.Label())
			}
		}
		for _, S := range []int{1, 2, 4, 8} {
			t.Run(fmt.Sprintf("%s/%d", f.name, S), func(t *testing.T) {
				p, err := pipeline.Partition(m, pipeline.PartitionOptions{Stages: S, BatchSize: 4})
				require.NoError(t, err)
				require.Len(t, p.Stages, S)
				var got []string
				params := map[string]bool{}
				for s, st := range p.Stages {
					assert.NotEmpty(t, st.Nodes, "stage %d", s)
					got = append(got, st.Nodes...)
					for _, name := range st.Params {
						params[name] = true
					}
					if s+1 < S {
						assert.Equal(t, st.Outputs, p.Stages[s+1].Inputs, "cut %d", s)
						assert.NotEmpty(t, st.Outputs, "cut %d", s)
					}
					for _, ct := range st.Outputs {
						n := int64(1)
						for _, d := range ct.Shape {
							n *= int64(d)
						}
						size := int64(4)
						if ct.DType == graph.Int64 {
							size = 8
						}
						assert.Equal(t, n*size, ct.Bytes, "tensor %s", ct.Name)
					}
					assert.Positive(t, st.EstSeconds)
					assert.GreaterOrEqual(t, st.EstMemoryBytes, st.ParamBytes*4, "params, grads, two Adam slots")
				}
				assert.Equal(t, want, got)
				assert.Len(t, params, len(m.Graph.Initializers)-countNonTrainable(m))
				assert.Empty(t, p.Stages[0].Inputs)
				assert.Empty(t, p.Stages[S-1].Outputs)
			})
		}
	}
}

func countNonTrainable(m *graph.Model) int {
	n := 0
	for _, t := range m.Graph.Initializers {
		if !t.DType.IsFloat() || t.Size() == 0 {
			n++
		}
	}
	return n
}

// TestPartitionBalancesAndCutsSmall: on the ViT fixture two stages are
// balanced to within 15% by estimated time, and the cut carries only the
// residual stream and one block-internal activation, not the
// attention scores.
func TestPartitionBalancesAndCutsSmall(t *testing.T) {
	m := loadFixture(t, fixtures[0])
	p, err := pipeline.Partition(m, pipeline.PartitionOptions{Stages: 2, BatchSize: 8})
	require.NoError(t, err)
	mean := (p.Stages[0].EstSeconds + p.Stages[1].EstSeconds) / 2
	for _, st := range p.Stages {
		assert.LessOrEqual(t, math.Abs(st.EstSeconds-mean), 0.15*mean, "stage %d", st.Index)
	}
	var crossing int64
	for _, ct := range p.Stages[0].Outputs {
		crossing += ct.Bytes
	}
	// one [8,17,32] float tensor is 17 KiB; the attention scores [8,2,17,17]
	// would be 18 KiB each. Allow three residual-sized tensors.
	assert.LessOrEqual(t, crossing, int64(3*8*17*32*4))
	assert.LessOrEqual(t, len(p.Stages[0].Outputs), 3)
}

// TestSplitAt: manual cuts by node name or initializer name, and clear
// errors for names that cut nowhere.
func TestSplitAt(t *testing.T) {
	m := loadFixture(t, fixtures[1])
	p, err := pipeline.Partition(m, pipeline.PartitionOptions{SplitAt: []string{"/block/norm2/LayerNormalization", "head.weight"}})
	require.NoError(t, err)
	require.Len(t, p.Stages, 3)
	assert.Equal(t, "/block/norm2/LayerNormalization", p.Stages[1].Nodes[0])
	assert.Equal(t, "/head/Transpose", p.Stages[2].Nodes[0], "the first reader of head.weight")
	assert.Contains(t, p.Stages[2].Params, "head.weight")
	assert.Contains(t, p.String(), "stage 2: 6 nodes (/head/Transpose .. /SoftmaxCrossEntropyLoss)")

	_, err = pipeline.Partition(m, pipeline.PartitionOptions{SplitAt: []string{"/no/such/node"}})
	require.ErrorIs(t, err, pipeline.ErrPartition)
	assert.Contains(t, err.Error(), `"/no/such/node"`)
	_, err = pipeline.Partition(m, pipeline.PartitionOptions{Stages: 4, SplitAt: []string{"head.weight"}})
	assert.ErrorContains(t, err, "make 2 stages, not 4")
	_, err = pipeline.Partition(m, pipeline.PartitionOptions{Stages: 200})
	assert.ErrorIs(t, err, pipeline.ErrPartition)
}

// TestStageMemoryLimit: a limit below what any cut needs is an error; a
// limit the balanced cut breaks moves the cut.
func TestStageMemoryLimit(t *testing.T) {
	m := loadFixture(t, fixtures[0])
	_, err := pipeline.Partition(m, pipeline.PartitionOptions{Stages: 2, BatchSize: 8, StageMemory: 1000})
	require.ErrorIs(t, err, pipeline.ErrPartition)
	assert.Contains(t, err.Error(), "memory")

	free, err := pipeline.Partition(m, pipeline.PartitionOptions{Stages: 2, BatchSize: 8})
	require.NoError(t, err)
	limit := free.Stages[0].EstMemoryBytes - 1
	p, err := pipeline.Partition(m, pipeline.PartitionOptions{Stages: 2, BatchSize: 8, StageMemory: limit})
	require.NoError(t, err)
	for _, st := range p.Stages {
		assert.LessOrEqual(t, st.EstMemoryBytes, limit, "stage %d", st.Index)
	}
	assert.Less(t, len(p.Stages[0].Nodes), len(free.Stages[0].Nodes))
}

// tiedModel is a small language model whose embedding matrix is also its
// output projection (tied weights): Gather(E, x) -> MatMul W -> Relu ->
// MatMul E^T -> logits.
func tiedModel() *graph.Model {
	const V, D = 7, 5
	g := graph.NewGraph("tied")
	g.Inputs = []*graph.ValueInfo{{Name: "x", Type: &graph.Type{Kind: graph.KindTensor, DType: graph.Int64, HasShape: true, Shape: []graph.Dim{{Param: "batch"}}}}}
	g.Outputs = []*graph.ValueInfo{{Name: "logits", Type: &graph.Type{Kind: graph.KindTensor, DType: graph.Float32}}}
	fill := func(n int, seed float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(math.Sin(seed*float64(i+1))) * 0.5
		}
		return v
	}
	g.Initializers["E"] = graph.FromFloat32(fill(V*D, 1.3), V, D)
	g.Initializers["W"] = graph.FromFloat32(fill(D*D, 0.7), D, D)
	g.Initializers["b"] = graph.FromFloat32(fill(D, 2.1), D)
	g.Nodes = []*graph.Node{
		{Name: "embed", OpType: "Gather", Inputs: []string{"E", "x"}, Outputs: []string{"h0"}},
		{Name: "proj", OpType: "MatMul", Inputs: []string{"h0", "W"}, Outputs: []string{"h1"}},
		{Name: "bias", OpType: "Add", Inputs: []string{"h1", "b"}, Outputs: []string{"h2"}},
		{Name: "act", OpType: "Relu", Inputs: []string{"h2"}, Outputs: []string{"h3"}},
		{Name: "untie", OpType: "Transpose", Inputs: []string{"E"}, Outputs: []string{"Et"}, Attrs: map[string]*graph.Attr{"perm": graph.IntsAttr("perm", 1, 0)}},
		{Name: "head", OpType: "MatMul", Inputs: []string{"h3", "Et"}, Outputs: []string{"logits"}},
	}
	return &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17}, Graph: g}
}

// TestTiedWeights: a weight read by two stages is reported as shared, each
// stage holds a copy, and with the gradients summed across them training
// follows one process step for step (SGD with momentum, reference computed
// with train.Build and the same optimizer).
func TestTiedWeights(t *testing.T) {
	m := tiedModel()
	p, err := pipeline.Partition(m, pipeline.PartitionOptions{SplitAt: []string{"act"}, BatchSize: 3})
	require.NoError(t, err)
	assert.Equal(t, map[string][]int{"E": {0, 1}}, p.Shared)
	assert.Contains(t, p.String(), "shared parameter E: stages [0 1]")

	const M, steps = 2, 4
	batches := make([][]pipeline.Batch, steps)
	for s := range batches {
		for i := 0; i < M; i++ {
			x := graph.FromInt64([]int64{int64((s + i) % 7), int64((2*s + 3*i + 1) % 7), int64((5*s + i + 4) % 7)}, 3)
			y := graph.FromInt64([]int64{int64((s + 2*i) % 7), int64((s + i + 3) % 7), int64((3*s + 1) % 7)}, 3)
			batches[s] = append(batches[s], pipeline.Batch{Inputs: map[string]*graph.Tensor{"x": x}, Labels: y})
		}
	}
	newOpt := func(ps []*optim.Param) (optim.Optimizer, error) {
		return optim.NewSGD(optim.SGDConfig{LR: 0.5, Momentum: 0.9})
	}
	lc, err := train.ParseLoss("cross_entropy")
	require.NoError(t, err)

	// one process
	prog, err := train.Build(tiedModel(), train.ProgramConfig{Loss: lc}) // its own weights: the optimizer updates them in place
	require.NoError(t, err)
	params := make([]*optim.Param, len(prog.Params))
	for i, q := range prog.Params {
		// The program adopts q.Value as its state buffer (the CPU backend
		// does not copy it), so the optimizer updates what the next step reads.
		params[i] = &optim.Param{Name: q.Name, Value: q.Value}
	}
	opt, err := newOpt(params)
	require.NoError(t, err)
	var want []float64
	for _, mbs := range batches {
		loss := 0.0
		for i, b := range mbs {
			res, err := prog.ForwardBackward(context.Background(), b.Inputs, b.Labels, 1.0/M)
			require.NoError(t, err)
			loss += res.Loss / M
			for k, g := range res.Grads {
				if i == 0 {
					params[k].Grad = g.Clone()
				} else {
					a, s := params[k].Grad.Float32s(), g.Float32s()
					for j := range a {
						a[j] += s[j]
					}
				}
			}
		}
		require.NoError(t, opt.Step(params))
		want = append(want, loss)
	}

	sched, err := pipeline.New("1f1b", 2, M, 0)
	require.NoError(t, err)
	run, err := pipeline.NewRunner(p, sched, pipeline.RunnerConfig{Stage: pipeline.StageConfig{Loss: train.LossAppender(m, lc)},
		NewOptimizer: func(_ int, ps []*optim.Param) (optim.Optimizer, error) { return newOpt(ps) }})
	require.NoError(t, err)
	for s, mbs := range batches {
		st, err := run.Step(context.Background(), mbs)
		require.NoError(t, err)
		assert.InDelta(t, want[s], st.Loss, 1e-6*math.Abs(want[s]), "step %d", s+1)
	}
	assert.NotEqual(t, want[0], want[steps-1])
	// both copies of E moved together
	e0 := run.Stages[0].Params[0]
	e1 := run.Stages[1].Params[0]
	require.Equal(t, "E", e0.Name)
	require.Equal(t, "E", e1.Name)
	assert.Equal(t, e0.Value.Float32s(), e1.Value.Float32s())
	assert.NotEqual(t, m.Graph.Initializers["E"].Float32s(), e0.Value.Float32s())
}

// TestNodeSecondsMoveTheCut: with measured node costs (as --partition
// profile supplies), a node that costs as much as the rest of the model
// gets a stage nearly of its own.
func TestNodeSecondsMoveTheCut(t *testing.T) {
	m := loadFixture(t, fixtures[1])
	heavy := "/head/MatMul"
	secs := map[string]float64{}
	for _, n := range m.Graph.Nodes {
		secs[n.Label()] = 1e-6
	}
	secs[heavy] = 1e-6 * float64(len(m.Graph.Nodes))
	p, err := pipeline.Partition(m, pipeline.PartitionOptions{Stages: 2, BatchSize: 2, NodeSeconds: secs})
	require.NoError(t, err)
	assert.Contains(t, p.Stages[1].Nodes, heavy)
	assert.LessOrEqual(t, len(p.Stages[1].Nodes), 6, "the last stage is the heavy node and the few after it: %v", p.Stages[1].Nodes)
	free, err := pipeline.Partition(m, pipeline.PartitionOptions{Stages: 2, BatchSize: 2})
	require.NoError(t, err)
	assert.Greater(t, len(free.Stages[1].Nodes), 6, "the cost model alone cuts elsewhere")
}

// TestProfilePartition: --partition profile measures fine pieces and cuts
// on the measured costs: a complete plan whose estimates are measured
// times (not the cost model's).
func TestProfilePartition(t *testing.T) {
	f := fixtures[1]
	m := loadFixture(t, f)
	ds, err := data.OpenNPZ("../models/"+f.data, data.NPZOptions{NoLabels: true, Inputs: f.inputs})
	require.NoError(t, err)
	var micro []pipeline.Batch
	for i := 0; i < 2; i++ {
		in, _, err := ds.Gather(0, []int{2 * i, 2*i + 1})
		require.NoError(t, err)
		micro = append(micro, pipeline.Batch{Inputs: in})
	}
	opts := pipeline.PartitionOptions{Stages: 2, BatchSize: 2}
	p, err := pipeline.ProfilePartition(context.Background(), m, opts, pipeline.StageConfig{LossOutput: "loss"}, micro, 2)
	require.NoError(t, err)
	require.Len(t, p.Stages, 2)
	est, err := pipeline.Partition(m, opts)
	require.NoError(t, err)
	n := 0
	for s, st := range p.Stages {
		n += len(st.Nodes)
		assert.Positive(t, st.EstSeconds)
		assert.NotEqual(t, est.Stages[s].EstSeconds, st.EstSeconds, "stage %d estimate comes from the measurement", s)
	}
	assert.Equal(t, len(est.Stages[0].Nodes)+len(est.Stages[1].Nodes), n)
}

// A float initializer holding -inf (a causal mask the export writes as an
// initializer) is a constant in a pipelined run as in one process
// (train.Build leaves it untrained): no stage lists it as a parameter, so
// no stage's optimizer moves its zeros.
func TestPartitionLeavesNonFiniteInitializersUntrained(t *testing.T) {
	inf := float32(math.Inf(-1))
	g := graph.NewGraph("masked")
	g.Inputs = []*graph.ValueInfo{{Name: "x", Type: &graph.Type{Kind: graph.KindTensor, DType: graph.Float32, HasShape: true,
		Shape: []graph.Dim{{Param: "batch"}, {Value: 3, Known: true}}}}}
	g.Initializers["w"] = graph.FromFloat32([]float32{0.5, -0.25, 1, 0.75, 0.1, -0.4, 0.3, 0.2, -0.6}, 3, 3)
	g.Initializers["mask"] = graph.FromFloat32([]float32{0, inf, 0}, 3)
	g.Initializers["w2"] = graph.FromFloat32([]float32{1, 0, 0, 0, 1, 0, 0, 0, 1}, 3, 3)
	g.Nodes = []*graph.Node{
		{Name: "mm", OpType: "MatMul", Inputs: []string{"x", "w"}, Outputs: []string{"h"}},
		{Name: "add", OpType: "Add", Inputs: []string{"h", "mask"}, Outputs: []string{"y"}},
		{Name: "mm2", OpType: "MatMul", Inputs: []string{"y", "w2"}, Outputs: []string{"z"}},
	}
	g.Outputs = []*graph.ValueInfo{{Name: "z"}}
	m := &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17}, Graph: g}
	for _, stages := range []int{1, 2} {
		plan, err := pipeline.Partition(m, pipeline.PartitionOptions{Stages: stages, BatchSize: 2})
		require.NoError(t, err)
		var params []string
		for _, st := range plan.Stages {
			params = append(params, st.Params...)
		}
		assert.ElementsMatch(t, []string{"w", "w2"}, params, "%d stages: the mask is no stage's parameter", stages)
	}
	one, err := train.Build(m, train.ProgramConfig{Loss: train.LossConfig{Kind: "mse"}})
	require.NoError(t, err)
	var names []string
	for _, p := range one.Params {
		names = append(names, p.Name)
	}
	assert.ElementsMatch(t, []string{"w", "w2"}, names, "one process trains the same parameters")
}

// With TrainOnly, the weights it freezes are constants of their stages,
// held once (no gradient, no optimizer state): the stage's memory
// estimate counts them so, where it counted nothing for them before.
func TestPartitionCountsFrozenWeights(t *testing.T) {
	m, err := importer.Load(filepath.Join("..", "models", "transformer_loss", "transformer_loss_train.onnx"))
	require.NoError(t, err)
	all, err := pipeline.Partition(m, pipeline.PartitionOptions{Stages: 1, BatchSize: 2})
	require.NoError(t, err)
	var last string
	for _, name := range all.Stages[0].Params {
		last = name
	}
	require.NotEmpty(t, last)
	only := regexp.MustCompile("^" + regexp.QuoteMeta(last) + "$")
	part, err := pipeline.Partition(m, pipeline.PartitionOptions{Stages: 1, BatchSize: 2, TrainOnly: only})
	require.NoError(t, err)
	st, whole := part.Stages[0], all.Stages[0]
	require.Equal(t, []string{last}, st.Params)
	require.Less(t, st.ParamBytes, whole.ParamBytes)
	const slots = 2 // AdamW's, the default
	frozen := whole.ParamBytes - st.ParamBytes
	assert.Equal(t, whole.ActivationBytes, st.ActivationBytes)
	assert.Equal(t, st.ParamBytes*(2+slots)+frozen+2*st.ActivationBytes, st.EstMemoryBytes,
		"trained weights with gradient and slots, frozen ones once, activations")
	assert.Equal(t, whole.ParamBytes*(2+slots)+2*whole.ActivationBytes, whole.EstMemoryBytes)
}
