package optim

import (
	"fmt"
	"math"

	"github.com/onnxtrain/onnxtrain/graph"
)

// ClipGradNorm scales all gradients together so that their total L2 norm
// is at most maxNorm, as torch.nn.utils.clip_grad_norm_ does: the total is
// the norm of the per-tensor norms (each rounded to float32), the scale is
// maxNorm/(total+1e-6) in float32 and is applied only when below 1.
// It returns the total norm before clipping; params with a nil Grad are
// skipped.
func ClipGradNorm(params []*Param, maxNorm float64) (float64, error) {
	grads, err := gradsOf(params)
	if err != nil {
		return 0, err
	}
	var sum float64
	for _, g := range grads {
		var s float64
		for _, x := range g {
			s += float64(x) * float64(x)
		}
		n := float64(float32(math.Sqrt(s))) // torch.norm(p.grad) is a float32 tensor
		sum += n * n
	}
	total := float32(math.Sqrt(sum))
	// clip_coef = max_norm / (total_norm + 1e-6): a float32 tensor, and
	// scalar/tensor is tensor.reciprocal() * scalar.
	coef := (1 / (total + float32(1e-6))) * float32(maxNorm)
	if coef < 1 {
		for _, g := range grads {
			for i := range g {
				g[i] *= coef
			}
		}
	}
	return float64(total), nil
}

// ClipGradValue clamps every gradient element to [-v, v]
// (torch.nn.utils.clip_grad_value_); NaNs stay NaN.
func ClipGradValue(params []*Param, v float64) error {
	if v < 0 || math.IsNaN(v) {
		return fmt.Errorf("optim: ClipGradValue: invalid clip value %v", v)
	}
	grads, err := gradsOf(params)
	if err != nil {
		return err
	}
	hi := float32(v)
	for _, g := range grads {
		for i, x := range g {
			if x > hi {
				g[i] = hi
			} else if x < -hi {
				g[i] = -hi
			}
		}
	}
	return nil
}

func gradsOf(params []*Param) ([][]float32, error) {
	var out [][]float32
	for i, p := range params {
		if p == nil || p.Grad == nil {
			continue
		}
		g := p.Grad.Float32s()
		if p.Grad.DType != graph.Float32 || len(g) != p.Grad.Size() {
			return nil, fmt.Errorf("optim: param %d (%q): gradient must be float32, got %v", i, p.Name, p.Grad.DType)
		}
		out = append(out, g)
	}
	return out, nil
}
