package train

import (
	"context"
	"fmt"
	"math"
	"sort"

	"github.com/onnxtrain/onnxtrain/graph"
)

// Mixed precision (--mixed-precision no|bf16|fp16).
//
// The training program runs its forward pass and loss under graph.AutoCast:
// MatMul/Gemm/Conv in the low type, softmax, normalisations, losses and
// reductions in float32, parameters kept as float32 master weights (the
// casts are inside the graph, so their gradients come back as float32).
// fp16 adds dynamic loss scaling (GradScaler) so that small gradients do not
// flush to zero in float16.

// ParseMixedPrecision reads a --mixed-precision value: the low-precision
// type, or graph.Undefined for "no" (and "").
func ParseMixedPrecision(s string) (graph.DType, error) {
	switch s {
	case "", "no":
		return graph.Undefined, nil
	case "bf16":
		return graph.BFloat16, nil
	case "fp16":
		return graph.Float16, nil
	}
	return graph.Undefined, fmt.Errorf("--mixed-precision %q: want no, bf16 or fp16", s)
}

// autoCast applies graph.AutoCast for a --mixed-precision mode ("no" does
// nothing).
func autoCast(g *graph.Graph, opset int64, mode string) error {
	low, err := ParseMixedPrecision(mode)
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	if low == graph.Undefined {
		return nil
	}
	if err := graph.AutoCast(g, opset, low); err != nil {
		return fmt.Errorf("train: --mixed-precision %s: %w", mode, err)
	}
	return nil
}

// GradScalerConfig holds the constants of dynamic loss scaling, with
// torch.cuda.amp.GradScaler's meaning and defaults.
type GradScalerConfig struct {
	// InitScale is the first scale (65536).
	InitScale float64
	// GrowthFactor multiplies the scale after GrowthInterval consecutive
	// steps without inf/NaN gradients (2).
	GrowthFactor float64
	// BackoffFactor multiplies the scale after a step whose gradients held
	// an inf or NaN, which is skipped (0.5).
	BackoffFactor float64
	// GrowthInterval is the number of clean steps between growths (2000).
	GrowthInterval int
}

// DefaultGradScalerConfig is PyTorch's default: 65536, ×2 every 2000 clean
// steps, ×0.5 on overflow.
func DefaultGradScalerConfig() GradScalerConfig {
	return GradScalerConfig{InitScale: 65536, GrowthFactor: 2, BackoffFactor: 0.5, GrowthInterval: 2000}
}

// GradScaler is dynamic loss scaling for float16 training, as PyTorch's
// GradScaler: the loss (the backward seed) is multiplied by Scale; before
// clipping or stepping, the gradients are divided by it again (Unscale,
// once per optimizer step) and checked for inf/NaN; a step with inf/NaN
// gradients is skipped and the scale backs off, and after GrowthInterval
// clean steps in a row the scale grows (Update).
type GradScaler struct {
	cfg   GradScalerConfig
	scale float64
	// growthTracker counts clean steps since the last growth or backoff.
	growthTracker int
	// unscaled and foundInf describe the current optimizer step.
	unscaled, foundInf bool
}

// NewGradScaler checks cfg and starts at cfg.InitScale.
func NewGradScaler(cfg GradScalerConfig) (*GradScaler, error) {
	switch {
	case !(cfg.InitScale > 0) || math.IsInf(cfg.InitScale, 0):
		return nil, fmt.Errorf("grad scaler: initial scale %v must be positive and finite", cfg.InitScale)
	case !(cfg.GrowthFactor > 1) || math.IsInf(cfg.GrowthFactor, 0):
		return nil, fmt.Errorf("grad scaler: growth factor %v must be above 1", cfg.GrowthFactor)
	case !(cfg.BackoffFactor > 0 && cfg.BackoffFactor < 1):
		return nil, fmt.Errorf("grad scaler: backoff factor %v must be in (0, 1)", cfg.BackoffFactor)
	case cfg.GrowthInterval <= 0:
		return nil, fmt.Errorf("grad scaler: growth interval %d must be positive", cfg.GrowthInterval)
	}
	return &GradScaler{cfg: cfg, scale: cfg.InitScale}, nil
}

// Scale is the current loss scale.
func (s *GradScaler) Scale() float64 { return s.scale }

// GrowthTracker is the number of clean steps since the scale last changed.
func (s *GradScaler) GrowthTracker() int { return s.growthTracker }

// Unscale divides the gradients by the scale, in place, and records
// whether any element was inf or NaN (before dividing, as PyTorch checks).
// It acts once per optimizer step: later calls before Update do nothing
// and report the first call's finding. Nil gradients are skipped.
func (s *GradScaler) Unscale(grads []*graph.Tensor) (foundInf bool, err error) {
	if s.unscaled {
		return s.foundInf, nil
	}
	// PyTorch: inv_scale = scale.double().reciprocal().float().
	inv := float32(1 / s.scale)
	found := false
	for i, g := range grads {
		if g == nil {
			continue
		}
		d, ok := g.Data.([]float32)
		if !ok {
			return false, fmt.Errorf("grad scaler: gradient %d is %v; want float32", i, g.DType)
		}
		for j, v := range d {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				found = true
			}
			d[j] = v * inv
		}
	}
	s.unscaled, s.foundInf = true, found
	return found, nil
}

// Update ends an optimizer step: on inf/NaN the scale backs off and the
// count of clean steps restarts; otherwise the count grows and, when it
// reaches the growth interval, the scale grows (if the grown scale is
// finite) and the count restarts. It reports whether the step was skipped.
// A step whose gradients were never unscaled counts as clean.
func (s *GradScaler) Update() (skipped bool) {
	skipped = s.foundInf
	if skipped {
		s.scale *= s.cfg.BackoffFactor
		s.growthTracker = 0
	} else {
		s.growthTracker++
		if s.growthTracker == s.cfg.GrowthInterval {
			if grown := s.scale * s.cfg.GrowthFactor; !math.IsInf(grown, 0) && grown <= math.MaxFloat32 {
				s.scale = grown
			}
			s.growthTracker = 0
		}
	}
	s.unscaled, s.foundInf = false, false
	return skipped
}

// State is the scaler's checkpoint entry (State.LossScaler).
func (s *GradScaler) State() map[string]float64 {
	return map[string]float64{"scale": s.scale, "growth_tracker": float64(s.growthTracker)}
}

// LoadState restores what State returned.
func (s *GradScaler) LoadState(st map[string]float64) error {
	scale, ok1 := st["scale"]
	tracker, ok2 := st["growth_tracker"]
	if !ok1 || !ok2 {
		return fmt.Errorf("grad scaler: checkpoint has no loss scaler state (want scale and growth_tracker, got %v); was it saved without --mixed-precision fp16?", scalerKeys(st))
	}
	if !(scale > 0) || math.IsInf(scale, 0) {
		return fmt.Errorf("grad scaler: checkpoint scale %v is not a positive finite number", scale)
	}
	if tracker < 0 || tracker != math.Trunc(tracker) || tracker >= float64(s.cfg.GrowthInterval) {
		return fmt.Errorf("grad scaler: checkpoint growth_tracker %v is not a count below the growth interval %d", tracker, s.cfg.GrowthInterval)
	}
	s.scale, s.growthTracker = scale, int(tracker)
	s.unscaled, s.foundInf = false, false
	return nil
}

func scalerKeys(m map[string]float64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// ampState is the Accelerator's mixed-precision state.
type ampState struct {
	low graph.DType // graph.Undefined for "no"
	// scaler is the loss scaler of fp16 (nil otherwise).
	scaler *GradScaler
	// skipped counts optimizer steps skipped for inf/NaN gradients;
	// lastSkipped tells whether the latest one was.
	skipped     int
	lastSkipped bool
}

// newAMP reads AcceleratorConfig.MixedPrecision.
func newAMP(mode string) (ampState, error) {
	low, err := ParseMixedPrecision(mode)
	if err != nil {
		return ampState{}, fmt.Errorf("accelerator: %w", err)
	}
	st := ampState{low: low}
	if low == graph.Float16 {
		if st.scaler, err = NewGradScaler(DefaultGradScalerConfig()); err != nil {
			return ampState{}, err
		}
	}
	return st, nil
}

// GradScaler is the loss scaler of --mixed-precision fp16 (nil otherwise).
func (a *Accelerator) GradScaler() *GradScaler { return a.amp.scaler }

// LossScale is the factor the backward seed carries: the GradScaler's
// scale with fp16, 1 otherwise.
func (a *Accelerator) LossScale() float64 {
	if a.amp.scaler == nil {
		return 1
	}
	return a.amp.scaler.Scale()
}

// StepWasSkipped reports whether the latest optimizer step was skipped
// because its (fp16, scaled) gradients held an inf or NaN, as accelerate's
// optimizer.step_was_skipped.
func (a *Accelerator) StepWasSkipped() bool { return a.amp.lastSkipped }

// SkippedSteps counts the optimizer steps skipped so far for inf/NaN
// gradients (fp16 only).
func (a *Accelerator) SkippedSteps() int { return a.amp.skipped }

// unscaleGrads divides the window's gradients by the loss scale (once per
// optimizer step, and only at the end of a window: accelerate unscales in
// clip_grad_norm_ and before the step). Without a scaler it does nothing.
func (a *Accelerator) unscaleGrads(m *Model) error {
	if a.amp.scaler == nil || !a.sync || m == nil {
		return nil
	}
	if m.zero != nil {
		// zero.go: this rank's gradient slices, the flag over every rank.
		_, err := a.amp.scaler.unscaleWith(func(inv float32) (bool, error) { return a.zeroUnscaleGrads(m, inv) })
		return err
	}
	if m.Prog.cfg.GradSums {
		// The gradient sums are unscaled in the program's state.
		_, err := a.amp.scaler.unscaleWith(func(inv float32) (bool, error) {
			return m.Prog.UnscaleGrads(context.Background(), inv)
		})
		return err
	}
	_, err := a.amp.scaler.Unscale(m.grads)
	return err
}

// unscaleWith is Unscale with the arithmetic done by fn, given the float32
// inverse scale (a program's graph.UnscaleGradsOp).
func (s *GradScaler) unscaleWith(fn func(inv float32) (bool, error)) (bool, error) {
	if s.unscaled {
		return s.foundInf, nil
	}
	found, err := fn(float32(1 / s.scale))
	if err != nil {
		return false, err
	}
	s.unscaled, s.foundInf = true, found
	return found, nil
}

// ampStep runs at the end of a window, before the optimizer would step: it
// unscales (if clipping did not), and reports whether to skip the step. The
// scaler is updated and the skip recorded.
func (a *Accelerator) ampStep(m *Model) (skip bool, err error) {
	a.amp.lastSkipped = false
	if a.amp.scaler == nil {
		return false, nil
	}
	if err := a.unscaleGrads(m); err != nil {
		return false, err
	}
	skip = a.amp.scaler.Update()
	if skip {
		a.amp.skipped++
		a.amp.lastSkipped = true
		a.log.WithField("step", a.step+1).Warnf("gradients hold inf/NaN at loss scale %g: step skipped, scale now %g", a.amp.scaler.Scale()/a.amp.scaler.cfg.BackoffFactor, a.amp.scaler.Scale())
	}
	return skip, nil
}

// ampCheckpoint is the State.LossScaler entry: the scaler's state and the
// count of skipped steps (nil without a scaler).
func (a *Accelerator) ampCheckpoint() map[string]float64 {
	if a.amp.scaler == nil {
		return nil
	}
	st := a.amp.scaler.State()
	st["skipped_steps"] = float64(a.amp.skipped)
	return st
}

// ampRestore loads what ampCheckpoint saved. A checkpoint saved without a
// scaler resumes fp16 training from the initial scale.
func (a *Accelerator) ampRestore(st map[string]float64) error {
	if a.amp.scaler == nil || len(st) == 0 {
		return nil
	}
	if err := a.amp.scaler.LoadState(st); err != nil {
		return err
	}
	a.amp.skipped = int(st["skipped_steps"])
	a.amp.lastSkipped = false
	return nil
}
