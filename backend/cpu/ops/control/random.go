package control

import (
	"math"
	"math/rand/v2"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// The random ops draw from kern.Context.Rand, the executable's seeded
// generator, so a run is reproducible from the executable's seed. A node's
// own seed attribute is not used: reseeding per node would make every call
// of a node (every iteration of a loop, every training step) draw the same
// numbers.
func init() {
	kern.RegisterHalf("RandomNormal", randomNormalKernel)
	kern.RegisterHalf("RandomUniform", randomUniformKernel)
	kern.RegisterHalf("RandomNormalLike", randomNormalLikeKernel)
	kern.RegisterHalf("RandomUniformLike", randomUniformLikeKernel)
	kern.RegisterHalf("Bernoulli", bernoulliKernel)
	kern.RegisterHalf("Multinomial", multinomialKernel)
}

// rng returns the context's generator or an error naming the node.
func rng(ctx *kern.Context, n *graph.Node) (*rand.Rand, error) {
	if ctx == nil || ctx.Rand == nil {
		return nil, n.Errorf("no random generator in the kernel context")
	}
	return ctx.Rand, nil
}

// fillRandom allocates a float tensor of dtype d and fills it with gen().
func fillRandom(n *graph.Node, d graph.DType, shape []int, gen func() float64) (*graph.Tensor, error) {
	if !d.IsFloat() {
		return nil, n.Errorf("dtype %v is not a float type", d)
	}
	t, err := kern.New(n, d, shape)
	if err != nil {
		return nil, err
	}
	switch s := t.Data.(type) {
	case []float32:
		for i := range s {
			s[i] = float32(gen())
		}
	case []float64:
		for i := range s {
			s[i] = gen()
		}
	case []uint16:
		for i := range s {
			t.SetFloat(i, gen())
		}
	}
	return t, nil
}

// randomShape reads the required shape attribute.
func randomShape(n *graph.Node) ([]int, error) {
	a := n.Attr("shape")
	if a == nil {
		return nil, n.Errorf("attribute shape is required")
	}
	return graph.IntsToInt(a.Ints), nil
}

// likeDType is the output dtype of a *Like op: the dtype attribute, else
// the input's dtype, which must then be a float type.
func likeDType(n *graph.Node, x *graph.Tensor) (graph.DType, error) {
	if n.HasAttr("dtype") {
		return graph.DType(n.AttrInt("dtype", 1)), nil
	}
	if !x.DType.IsFloat() {
		return 0, n.Errorf("input has dtype %v: without a dtype attribute the output would not be a float type", x.DType)
	}
	return x.DType, nil
}

func normalGen(r *rand.Rand, n *graph.Node) func() float64 {
	mean, scale := float64(n.AttrFloat("mean", 0)), float64(n.AttrFloat("scale", 1))
	return func() float64 { return mean + scale*r.NormFloat64() }
}

func uniformGen(r *rand.Rand, n *graph.Node) func() float64 {
	low, high := float64(n.AttrFloat("low", 0)), float64(n.AttrFloat("high", 1))
	return func() float64 { return low + (high-low)*r.Float64() }
}

// randomNormalKernel implements RandomNormal (shape and dtype attributes).
func randomNormalKernel(ctx *kern.Context, n *graph.Node, _ []*graph.Tensor) ([]*graph.Tensor, error) {
	r, err := rng(ctx, n)
	if err != nil {
		return nil, err
	}
	shape, err := randomShape(n)
	if err != nil {
		return nil, err
	}
	t, err := fillRandom(n, graph.DType(n.AttrInt("dtype", 1)), shape, normalGen(r, n))
	return []*graph.Tensor{t}, err
}

// randomUniformKernel implements RandomUniform (shape and dtype attributes).
func randomUniformKernel(ctx *kern.Context, n *graph.Node, _ []*graph.Tensor) ([]*graph.Tensor, error) {
	r, err := rng(ctx, n)
	if err != nil {
		return nil, err
	}
	shape, err := randomShape(n)
	if err != nil {
		return nil, err
	}
	t, err := fillRandom(n, graph.DType(n.AttrInt("dtype", 1)), shape, uniformGen(r, n))
	return []*graph.Tensor{t}, err
}

// randomNormalLikeKernel implements RandomNormalLike: the input's shape.
func randomNormalLikeKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 1); err != nil {
		return nil, err
	}
	r, err := rng(ctx, n)
	if err != nil {
		return nil, err
	}
	d, err := likeDType(n, in[0])
	if err != nil {
		return nil, err
	}
	t, err := fillRandom(n, d, in[0].Shape, normalGen(r, n))
	return []*graph.Tensor{t}, err
}

// randomUniformLikeKernel implements RandomUniformLike: the input's shape.
func randomUniformLikeKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 1); err != nil {
		return nil, err
	}
	r, err := rng(ctx, n)
	if err != nil {
		return nil, err
	}
	d, err := likeDType(n, in[0])
	if err != nil {
		return nil, err
	}
	t, err := fillRandom(n, d, in[0].Shape, uniformGen(r, n))
	return []*graph.Tensor{t}, err
}

// bernoulliKernel implements Bernoulli: 1 with the probability the input
// gives for each element, else 0, in the dtype attribute's type (default
// the input's).
func bernoulliKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 1); err != nil {
		return nil, err
	}
	r, err := rng(ctx, n)
	if err != nil {
		return nil, err
	}
	x := in[0]
	if !x.DType.IsFloat() {
		return nil, n.Errorf("input has dtype %v, want a float type", x.DType)
	}
	d := x.DType
	if n.HasAttr("dtype") {
		d = graph.DType(n.AttrInt("dtype", 1))
	}
	if d == graph.String {
		return nil, n.Errorf("dtype string is not a valid output type")
	}
	p, err := asFloat32(n, "input", x)
	if err != nil {
		return nil, err
	}
	out, err := kern.New(n, d, x.Shape)
	if err != nil {
		return nil, err
	}
	switch s := out.Data.(type) {
	case []float32:
		for i, pi := range p {
			if r.Float32() < pi {
				s[i] = 1
			}
		}
	case []float64:
		pd := x.Float64s()
		for i := range s {
			pi := float64(p[i])
			if pd != nil {
				pi = pd[i]
			}
			if r.Float64() < pi {
				s[i] = 1
			}
		}
	case []bool:
		for i, pi := range p {
			s[i] = r.Float32() < pi
		}
	default:
		for i, pi := range p {
			if r.Float32() < pi {
				out.SetFloat(i, 1)
			}
		}
	}
	return []*graph.Tensor{out}, nil
}

// multinomialKernel implements Multinomial: for each row of unnormalised
// log-probabilities [batch, classes], sample_size class indices.
func multinomialKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 1); err != nil {
		return nil, err
	}
	r, err := rng(ctx, n)
	if err != nil {
		return nil, err
	}
	x := in[0]
	if x.Rank() != 2 {
		return nil, n.Errorf("input has shape %v, want [batch_size, class_size]", x.Shape)
	}
	d := graph.DType(n.AttrInt("dtype", int64(graph.Int32)))
	if d != graph.Int32 && d != graph.Int64 {
		return nil, n.Errorf("dtype %v is not int32 or int64", d)
	}
	samples := int(n.AttrInt("sample_size", 1))
	if samples < 0 {
		return nil, n.Errorf("sample_size %d is negative", samples)
	}
	logits, err := asFloat32(n, "input", x)
	if err != nil {
		return nil, err
	}
	batch, classes := x.Shape[0], x.Shape[1]
	if classes == 0 && samples > 0 && batch > 0 {
		return nil, n.Errorf("cannot sample from zero classes")
	}
	out, err := kern.New(n, d, []int{batch, samples})
	if err != nil {
		return nil, err
	}
	cdf := make([]float64, classes)
	for b := 0; b < batch; b++ {
		row := logits[b*classes : (b+1)*classes]
		hi := math.Inf(-1)
		for _, v := range row {
			hi = math.Max(hi, float64(v))
		}
		total := 0.0
		for c, v := range row {
			total += math.Exp(float64(v) - hi)
			cdf[c] = total
		}
		for s := 0; s < samples; s++ {
			u := r.Float64() * total
			c := 0
			for c < classes-1 && cdf[c] <= u {
				c++
			}
			kern.SetInt(out, b*samples+s, int64(c))
		}
	}
	return []*graph.Tensor{out}, nil
}
