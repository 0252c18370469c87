package optim

import (
	"fmt"
	"math"
	"sync"
)

// Schedule gives the learning rate to use for the next optimizer step;
// step is the number of optimizer steps taken so far (0 for the first).
// Use it as opt.SetLR(s.LR(step)) before each Step.
type Schedule interface {
	LR(step int) float64
}

// warmupFactor is transformers' warmup ramp: step/max(1, warmup).
func warmupFactor(step, warmup int) float64 {
	return float64(step) / float64(max(1, warmup))
}

// Constant keeps the learning rate at Base.
type Constant struct{ Base float64 }

// LR returns Base.
func (c Constant) LR(int) float64 { return c.Base }

// ConstantWarmup rises linearly from 0 to Base over WarmupSteps, then
// stays at Base (transformers.get_constant_schedule_with_warmup).
type ConstantWarmup struct {
	Base        float64
	WarmupSteps int
}

// LR returns the rate for the step.
func (c ConstantWarmup) LR(step int) float64 {
	if step < c.WarmupSteps {
		return c.Base * warmupFactor(step, c.WarmupSteps)
	}
	return c.Base * 1.0
}

// LinearWarmupDecay rises linearly from 0 to Base over WarmupSteps, then
// falls linearly to 0 at TotalSteps and stays there
// (transformers.get_linear_schedule_with_warmup).
type LinearWarmupDecay struct {
	Base        float64
	WarmupSteps int
	TotalSteps  int
}

// LR returns the rate for the step.
func (l LinearWarmupDecay) LR(step int) float64 {
	if step < l.WarmupSteps {
		return l.Base * warmupFactor(step, l.WarmupSteps)
	}
	f := float64(l.TotalSteps-step) / float64(max(1, l.TotalSteps-l.WarmupSteps))
	return l.Base * math.Max(0, f)
}

// CosineWarmup rises linearly from 0 to Base over WarmupSteps, then
// follows a cosine of Cycles periods over the remaining steps to
// TotalSteps (transformers.get_cosine_schedule_with_warmup); Cycles 0
// means 0.5, a half cosine from Base down to 0.
type CosineWarmup struct {
	Base        float64
	WarmupSteps int
	TotalSteps  int
	Cycles      float64
}

// LR returns the rate for the step.
func (c CosineWarmup) LR(step int) float64 {
	if step < c.WarmupSteps {
		return c.Base * warmupFactor(step, c.WarmupSteps)
	}
	cycles := c.Cycles
	if cycles == 0 {
		cycles = 0.5
	}
	progress := float64(step-c.WarmupSteps) / float64(max(1, c.TotalSteps-c.WarmupSteps))
	return c.Base * math.Max(0, 0.5*(1.0+math.Cos(math.Pi*cycles*2.0*progress)))
}

// StepLR multiplies the rate by Gamma every StepSize steps, as
// torch.optim.lr_scheduler.StepLR does when stepped once per optimizer
// step: by repeated multiplication (its chainable form), not by
// Base*Gamma**k, so the rates agree with PyTorch's bit for bit.
type StepLR struct {
	base     float64
	stepSize int
	gamma    float64

	mu    sync.Mutex
	lastK int     // the decay count last computed
	last  float64 // its rate
}

// NewStepLR validates the arguments as torch does (step size > 0).
func NewStepLR(base float64, stepSize int, gamma float64) (*StepLR, error) {
	if stepSize <= 0 {
		return nil, fmt.Errorf("optim: StepLR: step size must be positive, got %d", stepSize)
	}
	return &StepLR{base: base, stepSize: stepSize, gamma: gamma, last: base}, nil
}

// LR returns the rate for the step. Calls with increasing steps cost O(1)
// each; going back recomputes from the start.
func (s *StepLR) LR(step int) float64 {
	k := max(step, 0) / s.stepSize
	s.mu.Lock()
	defer s.mu.Unlock()
	if k < s.lastK {
		s.lastK, s.last = 0, s.base
	}
	for ; s.lastK < k; s.lastK++ {
		s.last *= s.gamma
	}
	return s.last
}
