package train_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/tensorio"
	"github.com/onnxtrain/onnxtrain/train"
)

const (
	resnetTrain = "../models/cifar_resnet/cifar_resnet_train.onnx"
	resnetCase  = "../models/cifar_resnet/train_case.npz"
)

var crossEntropy = train.LossConfig{Kind: "cross_entropy", IgnoreIndex: -100}

// memHub is an in-memory collective for ranks that are goroutines of one
// test: every AllReduceSum waits for all ranks and returns the sum, added
// in rank order.
type memHub struct {
	world int
	mu    sync.Mutex
	cond  *sync.Cond
	round int
	in    [][]float32
	sum   []float32
	left  int // ranks still to copy the current sum out
	calls int
}

func newMemHub(world int) *memHub {
	h := &memHub{world: world, in: make([][]float32, world)}
	h.cond = sync.NewCond(&h.mu)
	return h
}

type memRank struct {
	h    *memHub
	rank int
}

func (r memRank) WorldSize() int { return r.h.world }

func (r memRank) AllReduceSum(_ context.Context, x []float32) error {
	h := r.h
	h.mu.Lock()
	defer h.mu.Unlock()
	for h.left > 0 { // the previous round is still being read
		h.cond.Wait()
	}
	round := h.round
	h.in[r.rank] = x
	arrived := 0
	for _, v := range h.in {
		if v != nil {
			arrived++
		}
	}
	if arrived == h.world {
		h.sum = make([]float32, len(x))
		for _, v := range h.in {
			if len(v) != len(x) {
				return fmt.Errorf("ranks sent %d and %d values", len(v), len(x))
			}
			for i := range v {
				h.sum[i] += v[i]
			}
		}
		h.in = make([][]float32, h.world)
		h.left = h.world
		h.round++
		h.calls++
		h.cond.Broadcast()
	}
	for h.round == round {
		h.cond.Wait()
	}
	copy(x, h.sum)
	h.left--
	if h.left == 0 {
		h.cond.Broadcast()
	}
	return nil
}

// resnetBatch reads the fixture batch (8 images) and returns examples
// [from, to).
func resnetBatch(t *testing.T, from, to int) (*graph.Tensor, *graph.Tensor) {
	t.Helper()
	b, err := tensorio.ReadNPZ(resnetCase)
	require.NoError(t, err)
	x, y := b["input"], b["labels"]
	per := x.Size() / x.Shape[0]
	shape := append([]int{to - from}, x.Shape[1:]...)
	xs := graph.FromFloat32(append([]float32{}, x.Float32s()[from*per:to*per]...), shape...)
	ys := graph.FromInt64(append([]int64{}, y.Data.([]int64)[from:to]...), to-from)
	return xs, ys
}

func buildResnet(t *testing.T, sync bool) *train.Program {
	t.Helper()
	m, err := importer.Load(resnetTrain)
	require.NoError(t, err)
	p, err := train.Build(m, train.ProgramConfig{Loss: crossEntropy, SyncBatchNorm: sync})
	require.NoError(t, err)
	return p
}

// closeRel asserts |got - want| <= tol·max|want| element-wise.
func closeRel(t *testing.T, want, got *graph.Tensor, tol float64, what string) {
	t.Helper()
	require.Equal(t, want.Shape, got.Shape, what)
	scale := 0.0
	for i := 0; i < want.Size(); i++ {
		scale = math.Max(scale, math.Abs(want.Float(i)))
	}
	worst, at := 0.0, 0
	for i := 0; i < want.Size(); i++ {
		if d := math.Abs(got.Float(i) - want.Float(i)); d > worst {
			worst, at = d, i
		}
	}
	assert.LessOrEqual(t, worst, tol*math.Max(scale, 1e-12), "%s: element %d: got %.8g, want %.8g (max |want| %.3g)", what, at, got.Float(at), want.Float(at), scale)
}

// TestSyncBatchNormRewritesEveryTrainingBatchNorm: the pass replaces each
// training-mode BatchNormalization by primitives with two all-reduces.
func TestSyncBatchNormRewritesEveryTrainingBatchNorm(t *testing.T) {
	m, err := importer.Load(resnetTrain)
	require.NoError(t, err)
	bn := 0
	var bnOutputs []string
	for _, n := range m.Graph.Nodes {
		if n.OpType == "BatchNormalization" {
			bn++
			bnOutputs = append(bnOutputs, n.Outputs[0])
		}
	}
	require.Equal(t, 9, bn, "cifar_resnet has 9 BatchNorm layers")
	count, err := train.SyncBatchNorm(m.Graph, m.Opset())
	require.NoError(t, err)
	assert.Equal(t, bn, count)
	reduces := 0
	for _, n := range m.Graph.Nodes {
		assert.NotEqual(t, "BatchNormalization", n.OpType)
		if n.Domain == graph.InternalDomain && n.OpType == graph.AllReduceSumOp {
			reduces++
		}
	}
	assert.Equal(t, 2*bn, reduces)
	require.NoError(t, graph.TopoSort(m.Graph), "the rewritten graph is well formed")

	// Shape inference types the all-reduces ([C+1] for sums and count, [C]
	// for squared deviations) and gives every BatchNorm output X's shape.
	types, err := graph.InferShapes(m.Graph, m.Opset(), nil)
	require.NoError(t, err)
	var sizes []int64
	for _, n := range m.Graph.Nodes {
		if n.OpType == graph.AllReduceSumOp {
			ty := types[n.Outputs[0]]
			require.NotNil(t, ty, "type of %s", n.Outputs[0])
			assert.Equal(t, graph.Float32, ty.DType)
			require.True(t, ty.HasShape && len(ty.Shape) == 1 && ty.Shape[0].Known, "shape of %s: %v", n.Outputs[0], ty)
			sizes = append(sizes, ty.Shape[0].Value)
		}
	}
	assert.Equal(t, []int64{9, 8, 9, 8, 9, 8, 17, 16, 17, 16, 17, 16, 33, 32, 33, 32, 33, 32}, sizes)
	for _, name := range bnOutputs {
		ty := types[name]
		require.NotNil(t, ty, name)
		require.True(t, ty.HasShape, name)
		assert.Len(t, ty.Shape, 4, name)
	}

	// Inference-mode nodes are left alone.
	eval, err := importer.Load(resnetTrain)
	require.NoError(t, err)
	for _, n := range eval.Graph.Nodes {
		if n.OpType == "BatchNormalization" {
			n.SetAttr(graph.IntAttr("training_mode", 0))
			n.Outputs = n.Outputs[:1]
		}
	}
	before := len(eval.Graph.Nodes)
	count, err = train.SyncBatchNorm(eval.Graph, eval.Opset())
	require.NoError(t, err)
	assert.Zero(t, count)
	assert.Len(t, eval.Graph.Nodes, before)
}

// TestSyncBatchNormOneProcessMatchesBatchNorm: without a collective the
// rewritten graph gives the loss, gradients and running statistics of the
// fused BatchNormalization kernel, and the running statistics PyTorch
// computed for the same two training-mode passes.
func TestSyncBatchNormOneProcessMatchesBatchNorm(t *testing.T) {
	x, y := resnetBatch(t, 0, 8)
	plain, synced := buildResnet(t, false), buildResnet(t, true)
	ctx := context.Background()
	for step := 0; step < 2; step++ {
		want, err := plain.ForwardBackward(ctx, map[string]*graph.Tensor{"input": x}, y, 1)
		require.NoError(t, err)
		got, err := synced.ForwardBackward(ctx, map[string]*graph.Tensor{"input": x}, y, 1)
		require.NoError(t, err)
		assert.InEpsilon(t, want.Loss, got.Loss, 1e-6, "pass %d: loss", step+1)
		require.Len(t, got.Grads, len(want.Grads))
		for i, g := range want.Grads {
			closeRel(t, g, got.Grads[i], 1e-4, fmt.Sprintf("pass %d: gradient of %s", step+1, plain.Params[i].Name))
		}
	}
	golden, err := tensorio.ReadNPZ("../models/cifar_resnet/bn_running_golden.npz")
	require.NoError(t, err)
	require.Len(t, synced.Buffers, len(plain.Buffers))
	for name, w := range plain.Buffers {
		closeRel(t, w, synced.Buffers[name], 1e-5, "running statistic "+name)
		closeRel(t, golden[name], synced.Buffers[name], 1e-5, "running statistic "+name+" against PyTorch")
	}
}

// TestSyncBatchNormTwoRanksMatchDoubleBatch: two ranks (goroutines sharing
// an in-memory collective) with 4 examples each give the loss (mean over
// ranks), the gradients (mean over ranks, as data parallel averages them)
// and the running statistics of one process with all 8 examples; without
// synchronisation they do not.
func TestSyncBatchNormTwoRanksMatchDoubleBatch(t *testing.T) {
	x, y := resnetBatch(t, 0, 8)
	single := buildResnet(t, false)
	want, err := single.ForwardBackward(context.Background(), map[string]*graph.Tensor{"input": x}, y, 1)
	require.NoError(t, err)

	run := func(t *testing.T, synced bool) (loss float64, grads []*graph.Tensor, ranks []*train.Program) {
		hub := newMemHub(2)
		res := make([]*train.StepResult, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for r := 0; r < 2; r++ {
			ranks = append(ranks, buildResnet(t, synced))
			xr, yr := resnetBatch(t, 4*r, 4*r+4)
			ctx := backend.WithCollective(context.Background(), memRank{hub, r})
			wg.Add(1)
			go func(r int) {
				defer wg.Done()
				res[r], errs[r] = ranks[r].ForwardBackward(ctx, map[string]*graph.Tensor{"input": xr}, yr, 1)
			}(r)
		}
		wg.Wait()
		require.NoError(t, errs[0])
		require.NoError(t, errs[1])
		if synced {
			assert.Equal(t, 4*9, hub.calls, "2 all-reduces forward and 2 backward per BatchNorm layer")
		}
		loss = (res[0].Loss + res[1].Loss) / 2
		for i := range res[0].Grads {
			g := res[0].Grads[i].Clone()
			for j := range g.Float32s() {
				g.Float32s()[j] = (g.Float32s()[j] + res[1].Grads[i].Float32s()[j]) / 2
			}
			grads = append(grads, g)
		}
		return loss, grads, ranks
	}

	t.Run("synchronised", func(t *testing.T) {
		loss, grads, ranks := run(t, true)
		assert.InEpsilon(t, want.Loss, loss, 1e-5, "loss")
		for i, g := range want.Grads {
			closeRel(t, g, grads[i], 1e-4, "gradient of "+single.Params[i].Name)
		}
		for _, p := range ranks {
			for name, w := range single.Buffers {
				closeRel(t, w, p.Buffers[name], 1e-5, "running statistic "+name)
			}
		}
	})
	t.Run("unsynchronised differs", func(t *testing.T) {
		loss, grads, _ := run(t, false)
		assert.Greater(t, math.Abs(loss-want.Loss), 1e-4*math.Abs(want.Loss), "per-rank statistics should change the loss")
		differs := false
		for i, g := range want.Grads {
			for j := 0; j < g.Size(); j++ {
				differs = differs || math.Abs(g.Float(j)-grads[i].Float(j)) > 1e-3*math.Abs(g.Float(j))+1e-6
			}
		}
		assert.True(t, differs, "per-rank statistics should change the gradients")
	})
}

// TestSyncBatchNormGradCheck compares the gradients autodiff takes through
// the rewritten BatchNorm (one process) with central differences, in
// float64, for X, scale and B, at ranks 2, 3 and 4.
func TestSyncBatchNormGradCheck(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	rnd := func(lo, hi float64, shape ...int) *graph.Tensor {
		v := graph.Zeros(graph.Float64, shape...)
		for i := range v.Float64s() {
			v.Float64s()[i] = lo + (hi-lo)*r.Float64()
		}
		return v
	}
	for _, shape := range [][]int{{5, 3}, {3, 2, 4}, {2, 3, 2, 3}} {
		t.Run(fmt.Sprint(shape), func(t *testing.T) {
			c := shape[1]
			in := map[string]*graph.Tensor{"x": rnd(-2, 2, shape...), "scale": rnd(0.5, 2, c), "bias": rnd(-1, 1, c)}
			g := graph.NewGraph("bn")
			for _, name := range []string{"x", "scale", "bias"} {
				g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: name, Type: &graph.Type{Kind: graph.KindTensor, DType: graph.Float64}})
			}
			g.Initializers["mean"] = rnd(-1, 1, c)
			g.Initializers["var"] = rnd(0.5, 2, c)
			g.Initializers["R"] = rnd(-1, 1, shape...)
			bn := &graph.Node{Name: "bn", OpType: "BatchNormalization", Inputs: []string{"x", "scale", "bias", "mean", "var"},
				Outputs: []string{"y", "rm", "rv"}}
			bn.SetAttr(graph.IntAttr("training_mode", 1))
			bn.SetAttr(graph.FloatAttr("epsilon", 1e-3))
			g.Nodes = append(g.Nodes, bn,
				&graph.Node{Name: "prod", OpType: "Mul", Inputs: []string{"y", "R"}, Outputs: []string{"prod"}},
				&graph.Node{Name: "loss", OpType: "ReduceSum", Inputs: []string{"prod"}, Outputs: []string{"loss"},
					Attrs: map[string]*graph.Attr{"keepdims": graph.IntAttr("keepdims", 0)}})
			const opset = 17
			n, err := train.SyncBatchNorm(g, opset)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			require.NoError(t, graph.LowerForAutodiff(g, opset))
			xs := []string{"x", "scale", "bias"}
			grads, err := graph.Gradients(g, "loss", xs, "", opset)
			require.NoError(t, err)
			g.Outputs = []*graph.ValueInfo{{Name: "loss"}}
			for i, gn := range grads {
				out := "grad_" + xs[i]
				g.Nodes = append(g.Nodes, &graph.Node{Name: out, OpType: "Identity", Inputs: []string{gn}, Outputs: []string{out}})
				g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: out})
			}
			be, err := backend.Open("cpu")
			require.NoError(t, err)
			exe, err := be.Compile(&graph.Model{IRVersion: 8, Opsets: map[string]int64{"": opset}, Graph: g}, backend.CompileOptions{NoFold: true})
			require.NoError(t, err)
			ctx := context.Background()
			res, err := exe.Run(ctx, in)
			require.NoError(t, err)
			lossAt := func() float64 {
				out, err := exe.Run(ctx, in)
				require.NoError(t, err)
				return out["loss"].Float(0)
			}
			const h = 1e-6
			for _, name := range xs {
				analytic := res["grad_"+name]
				require.Equal(t, in[name].Shape, analytic.Shape, name)
				data := in[name].Float64s()
				for j := range data {
					orig := data[j]
					data[j] = orig + h
					up := lossAt()
					data[j] = orig - h
					down := lossAt()
					data[j] = orig
					numeric := (up - down) / (2 * h)
					assert.InDelta(t, numeric, analytic.Float(j), 1e-5+1e-4*math.Abs(numeric), "d loss / d %s[%d]", name, j)
				}
			}
		})
	}
}

// TestSyncBatchNormRefusesWhatItCannotRewrite: clear errors naming the node.
func TestSyncBatchNormRefusesWhatItCannotRewrite(t *testing.T) {
	old := graph.NewGraph("old")
	old.Nodes = []*graph.Node{{Name: "bn_old", OpType: "BatchNormalization", Inputs: []string{"x", "s", "b", "m", "v"},
		Outputs: []string{"y", "m2", "v2", "sm", "sv"}}}
	_, err := train.SyncBatchNorm(old, 9)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "bn_old")
	assert.Contains(t, err.Error(), "opset 9")

	// A good node then a bad one: the error names the bad one and the graph
	// is left as it was.
	short := graph.NewGraph("short")
	good := &graph.Node{Name: "bn_good", OpType: "BatchNormalization", Inputs: []string{"x", "s", "b", "m", "v"}, Outputs: []string{"y"}}
	good.SetAttr(graph.IntAttr("training_mode", 1))
	bad := &graph.Node{Name: "bn_short", OpType: "BatchNormalization", Inputs: []string{"y", "s", "b"}, Outputs: []string{"z"}}
	bad.SetAttr(graph.IntAttr("training_mode", 1))
	short.Nodes = []*graph.Node{good, bad}
	_, err = train.SyncBatchNorm(short, 17)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "bn_short")
	assert.Contains(t, err.Error(), "5 inputs")
	assert.Equal(t, []*graph.Node{good, bad}, short.Nodes)
	assert.Empty(t, short.Initializers)
}

// BenchmarkSyncBatchNormStep times one forward and backward pass of
// cifar_resnet at batch 32 with the fused BatchNormalization kernel and with
// the synchronised rewrite on one process (no exchange: the cost of the
// decomposition itself).
func BenchmarkSyncBatchNormStep(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	x := graph.Zeros(graph.Float32, 32, 3, 32, 32)
	for i := range x.Float32s() {
		x.Float32s()[i] = float32(r.NormFloat64())
	}
	y := graph.Zeros(graph.Int64, 32)
	for i := range y.Int64s() {
		y.Int64s()[i] = int64(r.IntN(10))
	}
	for _, synced := range []bool{false, true} {
		b.Run(map[bool]string{false: "fused", true: "sync"}[synced], func(b *testing.B) {
			m, err := importer.Load(resnetTrain)
			require.NoError(b, err)
			p, err := train.Build(m, train.ProgramConfig{Loss: crossEntropy, SyncBatchNorm: synced})
			require.NoError(b, err)
			for i := 0; i < b.N; i++ {
				if _, err := p.ForwardBackward(context.Background(), map[string]*graph.Tensor{"input": x}, y, 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
