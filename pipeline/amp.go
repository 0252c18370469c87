package pipeline

import (
	"context"
	"fmt"
	"math"

	"github.com/onnxtrain/onnxtrain/distrib"
	"github.com/onnxtrain/onnxtrain/graph"
)

// Loss scaling across stages (--mixed-precision fp16). The backward seed of
// every micro-batch carries the loss scale (SetLossScale), so every stage's
// gradients come out scaled; UnscaleGrads divides them back and finds
// whether any stage's (in any process) held an inf or NaN: one flag for
// the whole pipeline, so that every stage skips the same optimizer step
// and the loss scale stays one number.

// SetLossScale sets the factor the backward seeds carry (the loss scale of
// fp16 training; 0 or 1: none).
func (r *Runner) SetLossScale(scale float64) { r.lossScale = scale }

// seedScale is the loss scale the seeds carry.
func (r *Runner) seedScale() float64 {
	if r.lossScale > 0 {
		return r.lossScale
	}
	return 1
}

// UnscaleGrads multiplies the step's gradients of this process's stages by
// inv (the loss scale's float32 inverse) and reports whether any element
// was inf or NaN before, in any stage of the pipeline: with a process
// group the flag is summed over every process (all stages, all replicas).
// Call it after the step's last ForwardBackward, before clipping.
func (r *Runner) UnscaleGrads(ctx context.Context, inv float32) (bool, error) {
	found := false
	seen := map[*graph.Tensor]bool{}
	for s := range r.grads {
		for _, g := range r.grads[s] {
			if g == nil || seen[g] {
				continue
			}
			seen[g] = true
			d := g.Float32s()
			if d == nil {
				return false, fmt.Errorf("pipeline: stage %d: a gradient is %v; loss scaling wants float32", s, g.DType)
			}
			for j, v := range d {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					found = true
				}
				d[j] = v * inv
			}
		}
	}
	for j, v := range r.full { // the replicas' averaged copy (clipReplicated reads it)
		r.full[j] = v * inv
	}
	if g := r.cfg.Group; g != nil && r.cfg.Transport != nil {
		flag := []float32{0}
		if found {
			flag[0] = 1
		}
		if err := g.AllReduce(ctx, flag, distrib.Sum); err != nil {
			return false, fmt.Errorf("pipeline: rank %d: agreeing on inf/NaN gradients: %w", r.cfg.Rank, err)
		}
		found = flag[0] > 0
	}
	return found, nil
}
