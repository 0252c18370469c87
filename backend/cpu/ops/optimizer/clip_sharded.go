package optimizer

import (
	"math"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.RegisterSpec(graph.InternalDomain, graph.ClipGradNormShardedOp, kern.Spec{Fn: clipGradNormSharded})
	kern.RegisterSpec(graph.InternalDomain, graph.UnscaleGradsShardedOp, kern.Spec{Fn: unscaleGradsSharded})
}

// shardedState is what a ClipGradNormSharded node keeps between runs.
type shardedState struct {
	nodeState
	sliceOf   []int
	whole     []float64 // this process's, then every process's, sums per whole tensor
	mine, all []float32 // the sums' bits for the communicator
}

// clipGradNormSharded is graph.ClipGradNormShardedOp: ClipGradNorm over
// this process's slices of whole tensors, whose per-tensor sums of squares
// are added over the processes (graph/zero_ops.go has the exact order).
func clipGradNormSharded(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	maxNorm, err := scalarF32(n, in, 0, "max_norm")
	if err != nil {
		return nil, err
	}
	st := kern.State[shardedState](n)
	if st.sliceOf == nil || st.node != n {
		whole, of, err := graph.ShardedClipLayout(n)
		if err != nil {
			return nil, err
		}
		st.sliceOf, st.whole = of, make([]float64, whole)
	}
	if err := prepare(ctx, n, in, &st.nodeState); err != nil {
		return nil, err
	}
	if len(st.sliceOf) != st.n {
		return nil, n.Errorf("%d slices, slice_of has %d", st.n, len(st.sliceOf))
	}
	st.partial = kern.Grow(st.partial, st.n)
	kern.RunChunks("clip worker", st.n, max(1, min(st.n, workersFor(st.sizes[:st.n]))), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			st.partial[i] = sumSquares(0, st.ops[i])
		}
	})
	clear(st.whole)
	for i, j := range st.sliceOf {
		st.whole[j] += st.partial[i]
	}
	var c backend.Communicator
	if ctx != nil && ctx.Ctx != nil {
		c = backend.CommunicatorFrom(ctx.Ctx)
	}
	if c != nil && c.WorldSize() > 1 && len(st.whole) > 0 {
		w := len(st.whole)
		st.mine = kern.Grow(st.mine, 2*w)
		st.all = kern.Grow(st.all, 2*w*c.WorldSize())
		for j, s := range st.whole {
			b := math.Float64bits(s)
			st.mine[2*j], st.mine[2*j+1] = math.Float32frombits(uint32(b)), math.Float32frombits(uint32(b>>32))
		}
		if err := c.AllGather(ctx.Ctx, st.mine, st.all); err != nil {
			return nil, n.Errorf("gathering the sums of squares of %d tensors over %d processes: %w", w, c.WorldSize(), err)
		}
		clear(st.whole)
		for r := range c.WorldSize() {
			blk := st.all[2*w*r : 2*w*(r+1)]
			for j := range st.whole {
				st.whole[j] += math.Float64frombits(uint64(math.Float32bits(blk[2*j])) | uint64(math.Float32bits(blk[2*j+1]))<<32)
			}
		}
	}
	var sum float64
	for _, s := range st.whole {
		nrm := float64(float32(math.Sqrt(s)))
		sum += nrm * nrm
	}
	total := float32(math.Sqrt(sum))
	coef := (1 / (total + float32(1e-6))) * maxNorm
	if coef < 1 && st.n > 0 {
		st.scalar = coef
		if st.fn == nil {
			st.fn = func(i, lo, hi int) { scaleRun(&st.nodeState, i, lo, hi) }
		}
		st.runner.forChunks(st.sizes[:st.n], st.fn)
	}
	norm, err := kern.NewUninit(n, graph.Float32, nil)
	if err != nil {
		return nil, err
	}
	norm.Float32s()[0] = total
	st.outs[0] = norm
	return kern.Results(n, st.outs...), nil
}

// unscaleGradsSharded is graph.UnscaleGradsShardedOp: UnscaleGrads over
// this process's slices, its found-inf flag added over the processes.
func unscaleGradsSharded(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	outs, err := unscaleGrads(ctx, n, in)
	if err != nil {
		return nil, err
	}
	flag := outs[0].Data.([]bool)
	var c backend.Communicator
	if ctx != nil && ctx.Ctx != nil {
		c = backend.CommunicatorFrom(ctx.Ctx)
	}
	if c != nil && c.WorldSize() > 1 {
		st := kern.State[shardedState](n)
		st.mine = kern.Grow(st.mine, 1)
		st.mine[0] = 0
		if flag[0] {
			st.mine[0] = 1
		}
		if err := c.AllReduceSum(ctx.Ctx, st.mine[:1]); err != nil {
			return nil, n.Errorf("adding the found-inf flags of %d processes: %w", c.WorldSize(), err)
		}
		flag[0] = st.mine[0] > 0
	}
	return outs, nil
}
