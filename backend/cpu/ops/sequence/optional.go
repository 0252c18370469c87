package sequence

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.RegisterHalf("Optional", optionalKernel)
	kern.RegisterHalf("OptionalHasElement", optionalHasElementKernel)
	kern.RegisterHalf("OptionalGetElement", optionalGetElementKernel)
}

// optionalKernel wraps its input in an optional value, or, without an
// input, makes an empty optional of the type the type attribute names.
func optionalKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	x := kern.Opt(in, 0)
	if x == nil {
		if a := n.Attr("type"); a == nil || a.TP == nil {
			return nil, n.Errorf("without an input, the type attribute is required")
		}
		return []*graph.Tensor{graph.NewOptional(nil)}, nil
	}
	if x.DType == graph.OptionalOf {
		return nil, n.Errorf("the input is already an optional value")
	}
	return []*graph.Tensor{graph.NewOptional(x)}, nil
}

// optionalHasElementKernel tells whether an optional holds a value. A plain
// tensor or sequence counts as a present value: opset 18 allows it
// explicitly, and before that it is how a value declared optional arrives
// from a producer that yields the bare value (a Loop body whose carried
// optional becomes a sequence after the first iteration, for example). From
// opset 18 the input may also be omitted, which gives false.
func optionalHasElementKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	x := kern.Opt(in, 0)
	has := false
	switch {
	case x == nil && ctx != nil && ctx.Opset < 18:
		return nil, n.Errorf("input is required before opset 18")
	case x == nil:
	case x.DType == graph.OptionalOf:
		has = len(x.Items()) > 0
	default:
		has = true
	}
	return []*graph.Tensor{{DType: graph.Bool, Shape: []int{}, Data: []bool{has}}}, nil
}

// optionalGetElementKernel unwraps an optional value; it is an error when
// the optional is empty. A plain tensor or sequence is returned as it is
// (opset 18 says so; earlier opsets get the same reading, as in
// optionalHasElementKernel).
func optionalGetElementKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0]
	if x.DType != graph.OptionalOf {
		return []*graph.Tensor{seqView(x)}, nil
	}
	items := x.Items()
	if len(items) == 0 {
		return nil, n.Errorf("the optional input is empty")
	}
	return []*graph.Tensor{seqView(items[0])}, nil
}
