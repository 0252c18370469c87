package reduce

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// Dropout handles half types itself: in inference mode it only passes its
// input on.
func init() { kern.RegisterHalf("Dropout", dropout) }

// dropout is Dropout.
//
// From opset 12 the ratio (default 0.5) and training_mode (default false)
// are optional inputs. In training mode with a non-zero ratio every element
// is kept with probability 1 - ratio, drawn from ctx.Rand, and kept elements
// are scaled by 1 / (1 - ratio); the mask output tells which were kept. The
// seed attribute is ignored: randomness comes from the executor's seeded
// generator, so runs are reproducible from the compile-time seed instead.
//
// Otherwise (inference mode, ratio 0, and every opset before 12, whose
// ratio and is_test attributes only mattered to training frameworks) the
// output is the input and the mask is all true: bool from opset 10, and of
// the input's dtype (all ones) before.
func dropout(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0]
	if !x.DType.IsFloat() {
		return nil, n.Errorf("dtype %v is not supported (want a float type)", x.DType)
	}
	ratio, training := 0.5, false
	if ctx.Opset == 0 || ctx.Opset >= 12 {
		if r := kern.Opt(in, 1); r != nil {
			if r.Size() != 1 || !r.DType.IsFloat() {
				return nil, n.Errorf("ratio must be a float scalar, is %v%v", r.DType, r.Shape)
			}
			ratio = r.Float(0)
		}
		if t := kern.Opt(in, 2); t != nil {
			if t.Size() != 1 || t.DType != graph.Bool {
				return nil, n.Errorf("training_mode must be a bool scalar, is %v%v", t.DType, t.Shape)
			}
			training = t.Bools()[0]
		}
	}
	wantMask := len(n.Outputs) > 1 && n.Outputs[1] != ""
	if !training || ratio == 0 {
		// The pass-through's header and result slice are the node's own,
		// reused on every step.
		out := kern.View(n, x, x.Shape)
		if !wantMask {
			return kern.Results(n, out), nil
		}
		maskType := graph.Bool
		if ctx.Opset != 0 && ctx.Opset < 10 {
			maskType = x.DType
		}
		mask, err := kern.New(n, maskType, x.Shape)
		if err != nil {
			return nil, err
		}
		fillOnes(mask)
		return kern.Results(n, out, mask), nil
	}
	if ratio < 0 || ratio >= 1 {
		return nil, n.Errorf("ratio %g is out of range [0, 1) in training mode", ratio)
	}
	if ctx.Rand == nil {
		return nil, n.Errorf("training mode needs a random generator, and the context has none")
	}
	src, err := toFloat32(n, x)
	if err != nil {
		return nil, err
	}
	mask, err := kern.New(n, graph.Bool, x.Shape)
	if err != nil {
		return nil, err
	}
	keep := mask.Bools()
	for i := range keep {
		keep[i] = ctx.Rand.Float64() >= ratio
	}
	y := &graph.Tensor{DType: src.DType, Shape: append([]int{}, x.Shape...)}
	scale := 1 / (1 - ratio)
	switch xs := src.Data.(type) {
	case []float32:
		y.Data = dropoutApply(xs, keep, float32(scale))
	case []float64:
		y.Data = dropoutApply(xs, keep, scale)
	}
	out, err := castTo(n, y, x.DType)
	if err != nil {
		return nil, err
	}
	return []*graph.Tensor{out, mask}, nil
}

// dropoutApply returns x·scale where keep is true and 0 elsewhere.
func dropoutApply[F float](x []F, keep []bool, scale F) []F {
	y := make([]F, len(x))
	for i, v := range x {
		if keep[i] {
			y[i] = v * scale
		}
	}
	return y
}

// fillOnes sets every element of a bool or float tensor to true / one.
func fillOnes(t *graph.Tensor) {
	switch s := t.Data.(type) {
	case []bool:
		for i := range s {
			s[i] = true
		}
	case []float32:
		for i := range s {
			s[i] = 1
		}
	case []float64:
		for i := range s {
			s[i] = 1
		}
	default:
		for i := 0; i < t.Size(); i++ {
			t.SetFloat(i, 1)
		}
	}
}
