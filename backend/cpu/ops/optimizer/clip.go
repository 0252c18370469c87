package optimizer

import (
	"math"
	"sync/atomic"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// clipGradNorm is graph.ClipGradNormOp (torch.nn.utils.clip_grad_norm_):
// the total is the norm of the per-tensor norms (each a float32 tensor in
// PyTorch, so rounded to float32), the coefficient max_norm/(total+1e-6)
// is float32 and applied only when below 1.
func clipGradNorm(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	maxNorm, err := scalarF32(n, in, 0, "max_norm")
	if err != nil {
		return nil, err
	}
	st := kern.State[nodeState](n)
	defer st.dropOperands()
	if err := prepare(ctx, n, in, st); err != nil {
		return nil, err
	}
	// Per-tensor sums in float64, each in one pass from the start (the
	// order of the sum matters for the rounding).
	st.partial = kern.Grow(st.partial, st.n)
	kern.RunChunks("clip worker", st.n, min(st.n, workersFor(st.sizes[:st.n])), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			st.partial[i] = sumSquares(0, st.ops[i])
		}
	})
	total, coef := clipCoef(st.partial[:st.n], maxNorm)
	if coef < 1 {
		st.scalar = coef
		if st.fn == nil {
			st.fn = func(i, lo, hi int) { scaleRun(st, i, lo, hi) }
		}
		st.runner.forChunks(st.sizes[:st.n], st.fn)
	}
	if err := st.setNorm(n, total); err != nil {
		return nil, err
	}
	return kern.Results(n, st.outs...), nil
}

// sumSquares is s plus the squares of g in float64, added in element
// order: a tensor's sum for ClipGradNorm, which the fused updates that
// take a per-tensor ClipGradNorm in continue block after block to get its
// bits (the order of the sum matters for the rounding).
func sumSquares(s float64, g []float32) float64 {
	for _, x := range g {
		s += float64(x) * float64(x)
	}
	return s
}

// scaleBy multiplies g by c (the clip coefficient), each product rounded
// to float32.
func scaleBy(g []float32, c float32) {
	for j := range g {
		g[j] *= c
	}
}

// setNorm makes total (clipCoef's) the op's output 0, the norm.
func (st *nodeState) setNorm(n *graph.Node, total float32) error {
	t, err := kern.NewUninit(n, graph.Float32, nil)
	if err != nil {
		return err
	}
	t.Float32s()[0] = total
	st.outs[0] = t
	return nil
}

// clipCoef is clip_grad_norm_'s total norm of the tensors whose sums of
// squares are partial, and its coefficient for maxNorm (applied only when
// below 1).
func clipCoef(partial []float64, maxNorm float32) (total, coef float32) {
	var sum float64
	for _, p := range partial {
		nrm := float64(float32(math.Sqrt(p)))
		sum += nrm * nrm
	}
	total = float32(math.Sqrt(sum))
	// clip_coef = max_norm / (total_norm + 1e-6): a float32 tensor, and
	// scalar/tensor is tensor.reciprocal() * scalar.
	return total, (1 / (total + float32(1e-6))) * maxNorm
}

func scaleRun(st *nodeState, i, lo, hi int) { scaleBy(st.ops[i][lo:hi], st.scalar) }

// workersFor is how many goroutines a pass over tensors of these sizes
// uses.
func workersFor(sizes []int) int {
	total := 0
	for _, s := range sizes {
		total += s
	}
	return total/parallelElems + 1
}

// clipGradValue is graph.ClipGradValueOp (torch.nn.utils.clip_grad_value_);
// NaNs stay NaN.
func clipGradValue(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	v, err := scalarF32(n, in, 0, "clip")
	if err != nil {
		return nil, err
	}
	if v < 0 || v != v {
		return nil, n.Errorf("invalid clip value %v", v)
	}
	st := kern.State[nodeState](n)
	defer st.dropOperands()
	if err := prepare(ctx, n, in, st); err != nil {
		return nil, err
	}
	st.scalar = v
	st.runner.forChunks(st.sizes[:st.n], func(i, lo, hi int) {
		g := st.ops[i][lo:hi]
		hi32 := st.scalar
		for j, x := range g {
			if x > hi32 {
				g[j] = hi32
			} else if x < -hi32 {
				g[j] = -hi32
			}
		}
	})
	return kern.Results(n, st.outs...), nil
}

// unscaleGrads is graph.UnscaleGradsOp (GradScaler.unscale_: inf/NaN
// checked before multiplying by the float32 inverse scale).
func unscaleGrads(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	inv, err := scalarF32(n, in, 0, "inv_scale")
	if err != nil {
		return nil, err
	}
	st := kern.State[nodeState](n)
	defer st.dropOperands()
	if err := prepare(ctx, n, in, st); err != nil {
		return nil, err
	}
	st.scalar = inv
	st.found = kern.Grow(st.found, st.n)
	clear(st.found)
	st.runner.forChunks(st.sizes[:st.n], func(i, lo, hi int) {
		g := st.ops[i][lo:hi]
		c := st.scalar
		found := false
		for j, x := range g {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				found = true
			}
			g[j] = x * c
		}
		if found {
			atomic.StoreInt32(&st.found[i], 1)
		}
	})
	any := false
	for _, f := range st.found[:st.n] {
		any = any || f != 0
	}
	flag, err := kern.New(n, graph.Bool, nil)
	if err != nil {
		return nil, err
	}
	flag.Data.([]bool)[0] = any
	st.outs[0] = flag
	return kern.Results(n, st.outs...), nil
}

// accumulateGrad is graph.AccumulateGradOp: S = fresh ? G : S + G.
func accumulateGrad(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if len(in) == 0 || in[0] == nil || in[0].DType != graph.Bool || in[0].Size() != 1 || in[0].Validate() != nil {
		return nil, n.Errorf("input 0 (fresh) must be a bool scalar")
	}
	st := kern.State[nodeState](n)
	defer st.dropOperands()
	if err := prepare(ctx, n, in, st); err != nil {
		return nil, err
	}
	st.fresh = in[0].Data.([]bool)[0]
	st.runner.forChunks(st.sizes[:st.n], func(i, lo, hi int) {
		s, g := st.ops[i][lo:hi], st.ops[st.n+i][lo:hi]
		g = g[:len(s)]
		if st.fresh {
			copy(s, g)
			return
		}
		for j := range s {
			s[j] += g[j]
		}
	})
	return kern.Results(n, st.outs...), nil
}
