package benchlib

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"

	"github.com/onnxtrain/onnxtrain/graph"
)

// Shapes maps graph values to concrete shapes.
type Shapes map[string][]int

// ResolveInputShapes gives every data input of g (declared inputs that are
// not initializers) a concrete shape. Known dimensions keep their size; a
// symbolic dimension named in dims takes that size; any other symbolic
// first dimension is the batch and takes batch. Every other symbolic or
// unknown dimension is an error naming the input and the dimension. The
// returned symbols map each symbolic name to the size it was given.
func ResolveInputShapes(g *graph.Graph, batch int, dims map[string]int64) (Shapes, map[string]int64, error) {
	if batch <= 0 {
		return nil, nil, fmt.Errorf("benchlib: batch size must be positive, got %d", batch)
	}
	syms := map[string]int64{}
	for k, v := range dims {
		if v <= 0 {
			return nil, nil, fmt.Errorf("benchlib: --dim %s=%d: sizes must be positive", k, v)
		}
		syms[k] = v
	}
	inputs := dataInputs(g)
	if len(inputs) == 0 {
		return nil, nil, fmt.Errorf("benchlib: the model has no data inputs to feed")
	}
	// A symbolic first dimension is the batch, wherever else its name occurs.
	for _, in := range inputs {
		if in.Type == nil || !in.Type.HasShape || len(in.Type.Shape) == 0 {
			continue
		}
		d := in.Type.Shape[0]
		if !d.Known && d.Param != "" {
			if _, given := syms[d.Param]; !given {
				syms[d.Param] = int64(batch)
			}
		}
	}
	shapes := Shapes{}
	batchUsed := false
	for _, in := range inputs {
		if in.Type == nil || in.Type.Kind != graph.KindTensor || !in.Type.HasShape {
			return nil, nil, fmt.Errorf("benchlib: graph input %q has no declared tensor shape; cannot make random data for it", in.Name)
		}
		shape := make([]int, len(in.Type.Shape))
		for i, d := range in.Type.Shape {
			switch {
			case d.Known:
				shape[i] = int(d.Value)
			case d.Param != "" && syms[d.Param] > 0:
				shape[i] = int(syms[d.Param])
				_, given := dims[d.Param]
				batchUsed = batchUsed || !given
			case i == 0:
				shape[i] = batch
				batchUsed = true
			case d.Param != "":
				return nil, nil, fmt.Errorf("benchlib: graph input %q (%v): dimension %d is symbolic (%q); give its size with --dim %s=SIZE", in.Name, in.Type, i, d.Param, d.Param)
			default:
				return nil, nil, fmt.Errorf("benchlib: graph input %q (%v): dimension %d has no size and no name; only the first (batch) dimension may be left open", in.Name, in.Type, i)
			}
		}
		shapes[in.Name] = shape
	}
	if !batchUsed {
		// Every input has a fixed size: the batch must be the first one's.
		if first := shapes[inputs[0].Name]; len(first) == 0 || first[0] != batch {
			return nil, nil, fmt.Errorf("benchlib: the model's inputs have no symbolic batch dimension (input %q is %v); use --batch-size %v, or export with a dynamic batch axis",
				inputs[0].Name, first, firstDim(first))
		}
	}
	return shapes, syms, nil
}

func firstDim(shape []int) any {
	if len(shape) == 0 {
		return "(none: the input is a scalar)"
	}
	return shape[0]
}

// dataInputs lists the declared inputs that are not initializers.
func dataInputs(g *graph.Graph) []*graph.ValueInfo {
	var out []*graph.ValueInfo
	for _, in := range g.Inputs {
		if _, ok := g.Initializers[in.Name]; !ok {
			out = append(out, in)
		}
	}
	return out
}

// RandomTensor fills a tensor of dtype d and the given shape: floats from a
// standard normal distribution, integers uniform in [0, intHigh), booleans
// fair coin flips.
func RandomTensor(rng *rand.Rand, d graph.DType, shape []int, intHigh int64) (*graph.Tensor, error) {
	t, err := graph.NewTensor(d, shape)
	if err != nil {
		return nil, fmt.Errorf("benchlib: %w", err)
	}
	switch {
	case d == graph.Float32:
		x := t.Float32s()
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
	case d.IsFloat():
		for i := 0; i < t.Size(); i++ {
			t.SetFloat(i, rng.NormFloat64())
		}
	case d == graph.Bool:
		b := t.Bools()
		for i := range b {
			b[i] = rng.IntN(2) == 1
		}
	case d.IsInt():
		if intHigh <= 0 {
			return nil, fmt.Errorf("benchlib: integer inputs need a positive upper bound, got %d", intHigh)
		}
		for i := 0; i < t.Size(); i++ {
			t.SetFloat(i, float64(rng.Int64N(intHigh)))
		}
	default:
		return nil, fmt.Errorf("benchlib: cannot make random %v data", d)
	}
	return t, nil
}

// RandomInputs makes one random tensor per data input of g, shaped by shapes.
func RandomInputs(rng *rand.Rand, g *graph.Graph, shapes Shapes, intHigh int64) (map[string]*graph.Tensor, error) {
	out := map[string]*graph.Tensor{}
	for _, in := range dataInputs(g) {
		shape, ok := shapes[in.Name]
		if !ok {
			return nil, fmt.Errorf("benchlib: no shape for graph input %q", in.Name)
		}
		t, err := RandomTensor(rng, in.Type.DType, shape, intHigh)
		if err != nil {
			return nil, fmt.Errorf("benchlib: graph input %q: %w", in.Name, err)
		}
		out[in.Name] = t
	}
	return out, nil
}

// OutputShape is the concrete shape of graph output name when the data
// inputs have the given shapes: the declared shape with symbols replaced,
// or, where that leaves a dimension open, the one shape inference finds.
func OutputShape(m *graph.Model, name string, inputs Shapes, syms map[string]int64) ([]int, error) {
	g := m.Graph
	var decl *graph.Type
	found := false
	for _, o := range g.Outputs {
		if o.Name == name {
			decl, found = o.Type, true
		}
	}
	if !found {
		return nil, fmt.Errorf("benchlib: %q is not an output of the model (outputs: %v)", name, g.OutputNames())
	}
	if shape, ok := concrete(decl, syms); ok {
		return shape, nil
	}
	known := map[string]*graph.Type{}
	names := make([]string, 0, len(inputs))
	for n := range inputs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, in := range dataInputs(g) {
		shape, ok := inputs[in.Name]
		if !ok {
			continue
		}
		ty := &graph.Type{Kind: graph.KindTensor, DType: in.Type.DType, HasShape: true}
		for _, d := range shape {
			ty.Shape = append(ty.Shape, graph.Dim{Value: int64(d), Known: true})
		}
		known[in.Name] = ty
	}
	types, err := graph.InferShapes(g, m.Opset(), known)
	if shape, ok := concrete(types[name], syms); ok {
		return shape, nil
	}
	if err != nil {
		return nil, fmt.Errorf("benchlib: the shape of output %q: %w", name, err)
	}
	return nil, fmt.Errorf("benchlib: cannot work out the shape of output %q (declared %v; inputs %s)", name, decl, strings.Join(names, ", "))
}

// concrete returns ty's shape with symbols substituted, if every dimension
// then has a size.
func concrete(ty *graph.Type, syms map[string]int64) ([]int, bool) {
	if ty == nil || !ty.HasShape {
		return nil, false
	}
	shape := make([]int, len(ty.Shape))
	for i, d := range ty.Shape {
		switch {
		case d.Known:
			shape[i] = int(d.Value)
		case d.Param != "" && syms[d.Param] > 0:
			shape[i] = int(syms[d.Param])
		default:
			return nil, false
		}
	}
	return shape, true
}

// RandomLabels makes labels for a loss applied to an output of the given
// shape: for cross_entropy int64 classes in [0, C) shaped like the output
// without its class dimension (dimension 1); for mse and l1 standard normal
// float32 targets, for bce_with_logits uniform [0, 1) targets, both shaped
// like the output. Losses the graph computes itself (kind "output") take no
// labels: the result is nil.
func RandomLabels(rng *rand.Rand, kind string, out []int) (*graph.Tensor, error) {
	switch kind {
	case "output":
		return nil, nil
	case "cross_entropy":
		if len(out) < 2 {
			return nil, fmt.Errorf("benchlib: cross_entropy needs an output of rank ≥ 2 ([batch, classes, ...]), got shape %v", out)
		}
		classes := out[1]
		if classes <= 0 {
			return nil, fmt.Errorf("benchlib: cross_entropy: the output has %d classes (shape %v)", classes, out)
		}
		shape := append([]int{out[0]}, out[2:]...)
		t, err := graph.NewTensor(graph.Int64, shape)
		if err != nil {
			return nil, fmt.Errorf("benchlib: %w", err)
		}
		x := t.Int64s()
		for i := range x {
			x[i] = rng.Int64N(int64(classes))
		}
		return t, nil
	case "mse", "l1":
		return RandomTensor(rng, graph.Float32, out, 0)
	case "bce_with_logits":
		t, err := graph.NewTensor(graph.Float32, out)
		if err != nil {
			return nil, fmt.Errorf("benchlib: %w", err)
		}
		x := t.Float32s()
		for i := range x {
			x[i] = rng.Float32()
		}
		return t, nil
	}
	return nil, fmt.Errorf("benchlib: unknown loss %q", kind)
}
