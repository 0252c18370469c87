package training

import (
	"math"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// Domain is the ONNX domain of the optimizer-update ops.
const Domain = "ai.onnx.preview.training"

func init() {
	kern.RegisterSpec(Domain, "Adagrad", kern.Spec{Fn: adagrad})
	kern.RegisterSpec(Domain, "Adam", kern.Spec{Fn: adam})
	kern.RegisterSpec(Domain, "Momentum", kern.Spec{Fn: momentum})
}

// float is the element types the optimizer ops accept for the optimized
// tensors (half types arrive converted to float32 by the executor).
type float interface{ ~float32 | ~float64 }

// updateFn computes one optimized tensor's outputs from its operands, all of
// the same length: ops is [X, G, state...] and outs is [X_new, state_new...].
type updateFn[T float] func(ops, outs [][]T)

// optimScalars reads the learning rate R (a float scalar) and the update
// count T (an integer scalar), the first two inputs of every optimizer op.
func optimScalars(n *graph.Node, in []*graph.Tensor) (rate float64, count int64, err error) {
	if err := kern.Need(n, in, 2); err != nil {
		return 0, 0, err
	}
	r, t := in[0], in[1]
	if !r.DType.IsFloat() {
		return 0, 0, n.Errorf("learning rate R must be a float scalar, got %v", r.DType)
	}
	if r.Size() != 1 || !hasElements(r, 1) {
		return 0, 0, n.Errorf("learning rate R must be a scalar, got shape %v", r.Shape)
	}
	if !t.DType.IsInt() {
		return 0, 0, n.Errorf("update count T must be an integer scalar, got %v", t.DType)
	}
	if t.Size() != 1 || !hasElements(t, 1) {
		return 0, 0, n.Errorf("update count T must be a scalar, got shape %v", t.Shape)
	}
	return r.Float(0), t.Int(0), nil
}

// hasElements reports whether t's data slice holds exactly size elements,
// guarding the typed loops against a tensor whose Data disagrees with its Shape.
func hasElements(t *graph.Tensor, size int) bool {
	switch s := t.Data.(type) {
	case []float32:
		return len(s) == size
	case []float64:
		return len(s) == size
	case []int8:
		return len(s) == size
	case []int16:
		return len(s) == size
	case []int32:
		return len(s) == size
	case []int64:
		return len(s) == size
	case []uint8:
		return len(s) == size
	case []uint16:
		return len(s) == size
	case []uint32:
		return len(s) == size
	case []uint64:
		return len(s) == size
	}
	return false
}

// applyOptimizer runs an optimizer update over every optimized tensor of n.
// The inputs are R, T, then 2+states blocks of k tensors each (the k values X,
// their k gradients G, then k tensors per state); the outputs are 1+states
// blocks of k tensors (the k new values, then k new tensors per state). Each
// tensor's operands are broadcast to a common shape, and the update for its
// dtype (f32 or f64, built once per node from the scalar inputs and
// attributes) computes its outputs.
func applyOptimizer(n *graph.Node, in []*graph.Tensor, states int, f32 updateFn[float32], f64 updateFn[float64]) ([]*graph.Tensor, error) {
	per := 2 + states
	rest := len(n.Inputs) - 2
	if rest <= 0 || rest%per != 0 {
		return nil, n.Errorf("expects R, T and %d groups of optimized tensors (X, G and %d state tensors per optimized tensor), got %d inputs", per, states, len(n.Inputs))
	}
	if len(in) < len(n.Inputs) {
		return nil, n.Errorf("expects %d inputs, got %d", len(n.Inputs), len(in))
	}
	k := rest / per
	if len(n.Outputs) > (1+states)*k {
		return nil, n.Errorf("optimizes %d tensors so has at most %d outputs, got %d", k, (1+states)*k, len(n.Outputs))
	}
	out := make([]*graph.Tensor, (1+states)*k)
	for i := 0; i < k; i++ {
		x := in[2+i]
		if x == nil {
			return nil, n.Errorf("optimized tensor %d (input %d) is missing", i, 2+i)
		}
		var err error
		switch x.DType {
		case graph.Float32:
			err = optimizeTensor(n, in, k, i, states, f32, out)
		case graph.Float64:
			err = optimizeTensor(n, in, k, i, states, f64, out)
		default:
			err = n.Errorf("optimized tensor %d (input %d) must be float or double, got %v", i, 2+i, x.DType)
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// optimizeTensor gathers the operands of optimized tensor i, broadcasts them
// to a common shape, allocates its outputs into out and runs update.
func optimizeTensor[T float](n *graph.Node, in []*graph.Tensor, k, i, states int, update updateFn[T], out []*graph.Tensor) error {
	per := 2 + states
	tensors := make([]*graph.Tensor, per)
	shapes := make([][]int, per)
	for j := range tensors {
		idx := 2 + j*k + i
		t := in[idx]
		if t == nil {
			return n.Errorf("input %d (%s of optimized tensor %d) is missing", idx, operandName(j), i)
		}
		if t.DType != in[2+i].DType {
			return n.Errorf("input %d (%s of optimized tensor %d) has dtype %v, want %v like the tensor", idx, operandName(j), i, t.DType, in[2+i].DType)
		}
		if size, err := graph.NumElements(t.Shape); err != nil || !hasElements(t, size) {
			return n.Errorf("input %d (%s of optimized tensor %d): data does not match shape %v", idx, operandName(j), i, t.Shape)
		}
		tensors[j], shapes[j] = t, t.Shape
	}
	shape, err := kern.BroadcastShape(shapes...)
	if err != nil {
		return n.Errorf("optimized tensor %d: %w", i, err)
	}
	ops := make([][]T, per)
	for j, t := range tensors {
		data := t.Data.([]T)
		if !sameShape(t.Shape, shape) {
			data = expandTo(data, t.Shape, shape)
		}
		ops[j] = data
	}
	outs := make([][]T, 1+states)
	for j := range outs {
		t, err := kern.New(n, tensors[0].DType, shape)
		if err != nil {
			return err
		}
		outs[j] = t.Data.([]T)
		out[j*k+i] = t
	}
	update(ops, outs)
	return nil
}

// operandName names the j-th operand of an optimized tensor in errors.
func operandName(j int) string {
	switch j {
	case 0:
		return "value X"
	case 1:
		return "gradient G"
	}
	return "state"
}

// sameShape reports whether a and b are the same shape.
func sameShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// expandTo copies data (of shape from) broadcast to shape to.
func expandTo[T any](data []T, from, to []int) []T {
	idx := kern.BroadcastIndex(from, to)
	out := make([]T, len(idx))
	for i, j := range idx {
		out[i] = data[j]
	}
	return out
}

// sqrt is the element type's square root (correctly rounded for float32 too,
// as float64 has more than twice float32's precision).
func sqrt[T float](v T) T { return T(math.Sqrt(float64(v))) }
