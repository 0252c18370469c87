package train

import (
	"context"
	"fmt"
	"math"

	"github.com/onnxtrain/onnxtrain/train/data"
)

// The Accelerator's FusedStep path (AcceleratorConfig.FusedStep): Forward
// runs the whole optimizer step (Program.Step); Backward, ClipGradNorm,
// ClipGradValue and the prepared optimizer's Step only keep the loop's
// bookkeeping, as the recipe was fixed when the model was prepared.

// fusedStepConflict says why a configuration cannot run FusedStep.
func fusedStepConflict(cfg AcceleratorConfig) error {
	switch {
	case cfg.GradAccum > 1:
		return fmt.Errorf("accelerator: FusedStep updates after every micro-batch; --grad-accum %d needs the gradients summed over the window first", cfg.GradAccum)
	case cfg.Group != nil && cfg.Group.WorldSize() > 1:
		return fmt.Errorf("accelerator: FusedStep runs one process; data parallel averages the gradients across processes first")
	case cfg.Zero > 0:
		return fmt.Errorf("accelerator: FusedStep does not shard the optimizer (--zero %d)", cfg.Zero)
	case cfg.ClipGradValue < 0 || math.IsNaN(cfg.ClipGradValue):
		return fmt.Errorf("accelerator: invalid clip value %v", cfg.ClipGradValue)
	case cfg.ClipGradNorm < 0 || math.IsNaN(cfg.ClipGradNorm):
		return fmt.Errorf("accelerator: invalid max norm %v", cfg.ClipGradNorm)
	}
	return nil
}

// fusedForward runs one optimizer step of a FusedStep model.
func (m *Model) fusedForward(ctx context.Context, b *data.Batch) (*Output, error) {
	if m.bindErr != nil {
		return nil, m.bindErr
	}
	if !m.Prog.UpdateBound() {
		return nil, fmt.Errorf("accelerator: FusedStep: Forward before PrepareOptimizer (the optimizer's update is part of the step)")
	}
	out, err := m.Prog.Step(ctx, b.Inputs, b.Labels, float32(m.acc.LossScale()))
	if err != nil {
		return nil, err
	}
	m.fusedNorm = out.GradNorm
	if s := m.acc.amp.scaler; s != nil {
		// The step unscaled and checked the gradients, and skipped its
		// updates on inf/NaN; the optimizer's Step updates the scaler.
		s.unscaled, s.foundInf = true, out.FoundInf
	}
	return &Output{Loss: out.Loss, Size: b.Size}, nil
}

// fusedClipGradNorm reports the latest step's gradient norm (before
// clipping); the clip itself was declared up front
// (AcceleratorConfig.ClipGradNorm) and ran inside the step.
func (a *Accelerator) fusedClipGradNorm(m *Model, maxNorm float64) (float64, error) {
	declared := a.cfg.ClipGradNorm
	if declared <= 0 {
		declared = math.Inf(1)
	}
	if maxNorm != declared {
		return 0, fmt.Errorf("accelerator: FusedStep clipped to a norm of %v inside the step (AcceleratorConfig.ClipGradNorm); ClipGradNorm(%v) cannot change that after the fact", declared, maxNorm)
	}
	return m.fusedNorm, nil
}

// fusedClipGradValue checks that v is the clip the step applied.
func (a *Accelerator) fusedClipGradValue(v float64) error {
	if v != a.cfg.ClipGradValue {
		return fmt.Errorf("accelerator: FusedStep clipped by value at %v inside the step; ClipGradValue(%v) cannot change that after the fact", a.cfg.ClipGradValue, v)
	}
	return nil
}
