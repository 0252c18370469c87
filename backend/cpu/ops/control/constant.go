package control

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.RegisterHalf("Constant", constantKernel)
	kern.RegisterHalf("Identity", identityKernel)
}

// constantAttrs are the attributes of Constant, exactly one of which is set.
var constantAttrs = []string{"value", "sparse_value", "value_float", "value_floats", "value_int", "value_ints", "value_string", "value_strings"}

// constantKernel returns the tensor a Constant node holds. The tensor of a
// value (or sparse_value, which the importer densifies) attribute is
// returned as is, not copied: kernels never modify their inputs.
func constantKernel(_ *kern.Context, n *graph.Node, _ []*graph.Tensor) ([]*graph.Tensor, error) {
	var found *graph.Attr
	for _, name := range constantAttrs {
		if a := n.Attr(name); a != nil {
			if found != nil {
				return nil, n.Errorf("has both %q and %q: exactly one value attribute is allowed", found.Name, name)
			}
			found = a
		}
	}
	if found == nil {
		return nil, n.Errorf("has no value attribute (one of %v)", constantAttrs)
	}
	var t *graph.Tensor
	switch found.Name {
	case "value", "sparse_value":
		if found.T == nil {
			return nil, n.Errorf("attribute %q holds no tensor", found.Name)
		}
		if err := found.T.Validate(); err != nil {
			return nil, n.Errorf("attribute %q: %v", found.Name, err)
		}
		t = found.T
	case "value_float":
		t = &graph.Tensor{DType: graph.Float32, Shape: []int{}, Data: []float32{found.F}}
	case "value_floats":
		t = &graph.Tensor{DType: graph.Float32, Shape: []int{len(found.Floats)}, Data: append([]float32{}, found.Floats...)}
	case "value_int":
		t = &graph.Tensor{DType: graph.Int64, Shape: []int{}, Data: []int64{found.I}}
	case "value_ints":
		t = &graph.Tensor{DType: graph.Int64, Shape: []int{len(found.Ints)}, Data: append([]int64{}, found.Ints...)}
	case "value_string":
		t = &graph.Tensor{DType: graph.String, Shape: []int{}, Data: []string{found.S}}
	case "value_strings":
		t = &graph.Tensor{DType: graph.String, Shape: []int{len(found.Strings)}, Data: append([]string{}, found.Strings...)}
	}
	return []*graph.Tensor{t}, nil
}

// identityKernel returns its input. The result shares the input's data,
// which is safe because kernels never modify their inputs.
func identityKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0]
	// A header of the node's own (reused on its next run), not x itself:
	// the executor tells values apart by their tensors.
	return kern.Results(n, kern.View(n, x, x.Shape)), nil
}
