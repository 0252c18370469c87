package elementwise

import (
	"fmt"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// integer is every Go integer type a tensor can hold.
type integer interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64
}

// float is the Go float types a tensor can hold natively (half types arrive
// converted to float32 unless a kernel is registered with RegisterHalf).
type float interface{ ~float32 | ~float64 }

// number is every numeric element type.
type number interface{ integer | float }

// signed is the numeric types that can hold negative values.
type signed interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~float32 | ~float64
}

// isFloatSlice reports whether T is a float type, for generic code that
// needs a float-only branch (e.g. math.Mod) outside its hot loop.
func isFloatSlice[T number](s []T) bool {
	switch any(s).(type) {
	case []float32, []float64:
		return true
	}
	return false
}

// newLike allocates an output tensor of dtype d and shape, naming the node on
// failure.
func newLike(n *graph.Node, d graph.DType, shape []int) (*graph.Tensor, error) {
	return kern.New(n, d, shape)
}

// newFull is newLike for kernels that write every element of the output
// (its planned storage is not zeroed first; see kern.NewUninit).
func newFull(n *graph.Node, d graph.DType, shape []int) (*graph.Tensor, error) {
	return kern.NewUninit(n, d, shape)
}

// sameType checks that all present inputs share the first input's dtype.
func sameType(n *graph.Node, in []*graph.Tensor) error {
	var first *graph.Tensor
	for i, t := range in {
		if t == nil {
			continue
		}
		if first == nil {
			first = t
			continue
		}
		if t.DType != first.DType {
			return n.Errorf("input %d has dtype %v, input 0 has %v (they must match)", i, t.DType, first.DType)
		}
	}
	return nil
}

// errDType reports a dtype the op does not accept.
func errDType(n *graph.Node, t *graph.Tensor) error {
	return n.Errorf("%w: dtype %v is not supported by %s", graph.ErrUnsupportedOp, t.DType, n.OpType)
}

// one returns the node's single output.
func one(t *graph.Tensor) []*graph.Tensor { return []*graph.Tensor{t} }

// validateData checks that a tensor's Data matches its dtype so type
// assertions in kernels cannot fail.
func validateData(n *graph.Node, in []*graph.Tensor) error {
	for i, t := range in {
		if t == nil {
			continue
		}
		if err := t.Validate(); err != nil {
			return n.Errorf("input %d: %v", i, err)
		}
	}
	return nil
}

// shapeString formats a shape for errors.
func shapeString(s []int) string { return fmt.Sprint(s) }

// isNumeric reports whether t holds a non-half numeric dtype.
func isNumeric(t *graph.Tensor) bool {
	return t.DType == graph.Float32 || t.DType == graph.Float64 || t.DType.IsInt()
}
