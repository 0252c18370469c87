package elementwise

import (
	"math"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// floatLoops is a float-only unary op as a loop per float type.
type floatLoops struct {
	f32 func(dst, src []float32)
	f64 func(dst, src []float64)
}

// mapFloat builds floatLoops from a float64 function; each element costs an
// indirect call, which the transcendental functions dwarf anyway. Float32
// values are computed in float64 and rounded once.
func mapFloat(f func(float64) float64) floatLoops {
	return floatLoops{
		f32: func(dst, src []float32) {
			dst = dst[:len(src)]
			for i, v := range src {
				dst[i] = float32(f(float64(v)))
			}
		},
		f64: func(dst, src []float64) {
			dst = dst[:len(src)]
			for i, v := range src {
				dst[i] = f(v)
			}
		},
	}
}

// floatUnary registers a float-only unary op whose loops may depend on the
// node's attributes.
func floatUnary(op string, build func(n *graph.Node) (floatLoops, error)) {
	kern.Register(op, func(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
		if err := kern.Need(n, in, 1); err != nil {
			return nil, err
		}
		x := in[0]
		k, err := build(n)
		if err != nil {
			return nil, err
		}
		switch src := x.Data.(type) {
		case []float32:
			if len(src) != x.Size() {
				return nil, n.Errorf("input of shape %v holds %d elements", x.Shape, len(src))
			}
			out, err := newFull(n, x.DType, x.Shape)
			if err != nil {
				return nil, err
			}
			dst := out.Data.([]float32)
			parallelRange(len(src), parallelGrain, func(lo, hi int) { k.f32(dst[lo:hi], src[lo:hi]) })
			return one(out), nil
		case []float64:
			if len(src) != x.Size() {
				return nil, n.Errorf("input of shape %v holds %d elements", x.Shape, len(src))
			}
			out, err := newFull(n, x.DType, x.Shape)
			if err != nil {
				return nil, err
			}
			dst := out.Data.([]float64)
			parallelRange(len(src), parallelGrain, func(lo, hi int) { k.f64(dst[lo:hi], src[lo:hi]) })
			return one(out), nil
		}
		return nil, errDType(n, x)
	})
}

// fixed wraps attribute-free loops for floatUnary.
func fixed(k floatLoops) func(*graph.Node) (floatLoops, error) {
	return func(*graph.Node) (floatLoops, error) { return k, nil }
}

func init() {
	for op, f := range map[string]func(float64) float64{
		"Acos": math.Acos, "Acosh": math.Acosh, "Asin": math.Asin, "Asinh": math.Asinh,
		"Atan": math.Atan, "Atanh": math.Atanh, "Cos": math.Cos, "Cosh": math.Cosh,
		"Sin": math.Sin, "Sinh": math.Sinh, "Tan": math.Tan, "Log": math.Log,
		"Ceil": math.Ceil, "Floor": math.Floor, "Round": math.RoundToEven,
		"Softplus": softplus, "Softsign": softsign, "Mish": mish,
	} {
		floatUnary(op, fixed(mapFloat(f)))
	}
	floatUnary("Exp", fixed(floatLoops{expLoop32, expLoop64}))
	floatUnary("Erf", fixed(floatLoops{erfLoop32, erfLoop64}))
	floatUnary("Sqrt", fixed(floatLoops{sqrtLoop[float32], sqrtLoop[float64]}))
	floatUnary("Tanh", fixed(floatLoops{tanhLoop[float32], tanhLoop[float64]}))
	floatUnary("Sigmoid", fixed(floatLoops{sigmoidLoop[float32], sigmoidLoop[float64]}))
	floatUnary("Reciprocal", fixed(floatLoops{reciprocalLoop[float32], reciprocalLoop[float64]}))
	floatUnary("Gelu", geluBuild)
	floatUnary("Elu", func(n *graph.Node) (floatLoops, error) {
		alpha := float64(n.AttrFloat("alpha", 1))
		return mapFloat(func(x float64) float64 {
			if x < 0 {
				return alpha * math.Expm1(x)
			}
			return x
		}), nil
	})
	floatUnary("Selu", func(n *graph.Node) (floatLoops, error) {
		alpha := float64(n.AttrFloat("alpha", 1.67326319217681884765625))
		gamma := float64(n.AttrFloat("gamma", 1.05070102214813232421875))
		return mapFloat(func(x float64) float64 {
			if x <= 0 {
				return gamma * alpha * math.Expm1(x)
			}
			return gamma * x
		}), nil
	})
	floatUnary("Celu", func(n *graph.Node) (floatLoops, error) {
		alpha := float64(n.AttrFloat("alpha", 1))
		if alpha == 0 {
			return floatLoops{}, n.Errorf("attribute alpha must not be 0")
		}
		return mapFloat(func(x float64) float64 {
			if x > 0 {
				return x
			}
			return alpha * math.Expm1(x/alpha)
		}), nil
	})
	floatUnary("HardSigmoid", func(n *graph.Node) (floatLoops, error) {
		alpha := float64(n.AttrFloat("alpha", 0.2))
		beta := float64(n.AttrFloat("beta", 0.5))
		return mapFloat(func(x float64) float64 { return math.Max(0, math.Min(1, alpha*x+beta)) }), nil
	})
	floatUnary("HardSwish", fixed(mapFloat(func(x float64) float64 {
		return x * math.Max(0, math.Min(1, x/6+0.5))
	})))
	floatUnary("LeakyRelu", func(n *graph.Node) (floatLoops, error) {
		alpha := n.AttrFloat("alpha", 0.01)
		return floatLoops{leakyReluLoop(alpha), leakyReluLoop(float64(alpha))}, nil
	})
	floatUnary("ThresholdedRelu", func(n *graph.Node) (floatLoops, error) {
		alpha := float64(n.AttrFloat("alpha", 1))
		return mapFloat(func(x float64) float64 {
			if x > alpha {
				return x
			}
			return 0
		}), nil
	})
}

func softplus(x float64) float64 {
	// log(1+e^x) without overflow for large x.
	if x > 0 {
		return x + math.Log1p(math.Exp(-x))
	}
	return math.Log1p(math.Exp(x))
}

func softsign(x float64) float64 { return x / (1 + math.Abs(x)) }

func mish(x float64) float64 { return x * math.Tanh(softplus(x)) }

// geluBuild reads Gelu's approximate attribute: "none" (the exact erf form)
// or "tanh".
func geluBuild(n *graph.Node) (floatLoops, error) {
	switch a := n.AttrString("approximate", "none"); a {
	case "none":
		return floatLoops{geluErfLoop32, geluErfLoop[float64]}, nil
	case "tanh":
		return floatLoops{geluTanhLoop[float32], geluTanhLoop[float64]}, nil
	default:
		return floatLoops{}, n.Errorf("attribute approximate is %q, want \"none\" or \"tanh\"", a)
	}
}

// Hot activations get typed loops (no indirect call per element).

func sqrtLoop[T float](dst, src []T) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = T(math.Sqrt(float64(v)))
	}
}

func tanhLoop[T float](dst, src []T) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = T(math.Tanh(float64(v)))
	}
}

func sigmoidLoop[T float](dst, src []T) {
	dst = dst[:len(src)]
	for i, v := range src {
		x := float64(v)
		if x >= 0 {
			dst[i] = T(1 / (1 + math.Exp(-x)))
		} else {
			e := math.Exp(x)
			dst[i] = T(e / (1 + e))
		}
	}
}

func reciprocalLoop[T float](dst, src []T) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = 1 / v
	}
}

func leakyReluLoop[T float](alpha T) func(dst, src []T) {
	return func(dst, src []T) {
		dst = dst[:len(src)]
		for i, v := range src {
			if v < 0 {
				v *= alpha
			}
			dst[i] = v
		}
	}
}

func geluErfLoop[T float](dst, src []T) {
	dst = dst[:len(src)]
	for i, v := range src {
		x := float64(v)
		dst[i] = T(0.5 * x * (1 + math.Erf(x*(1/math.Sqrt2))))
	}
}

// geluErfLoop32 is geluErfLoop's float32 form with the float32-accurate erf
// where 1 + erf keeps its relative precision (erf ≥ -0.85); below, 1 + erf
// cancels and math.Erf's float64 accuracy keeps the small result exact.
func geluErfLoop32(dst, src []float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		x := float64(v)
		z := x * (1 / math.Sqrt2)
		var e float64
		if z > -1 {
			e = fastErf64For32(z)
		} else {
			e = math.Erf(z)
		}
		dst[i] = float32(0.5 * x * (1 + e))
	}
}

// geluTanhC is sqrt(2/pi).
var geluTanhC = math.Sqrt(2 / math.Pi)

func geluTanhLoop[T float](dst, src []T) {
	dst = dst[:len(src)]
	for i, v := range src {
		x := float64(v)
		dst[i] = T(0.5 * x * (1 + math.Tanh(geluTanhC*(x+0.044715*x*x*x))))
	}
}
