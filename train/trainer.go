package train

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"time"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/train/optim"
)

// StepRecord is what one optimizer step reports (the JSON log line).
type StepRecord struct {
	Step        int     `json:"step"`
	Epoch       int     `json:"epoch"`
	Loss        float64 `json:"loss"`
	LR          float64 `json:"lr"`
	GradNorm    float64 `json:"grad_norm"`
	SamplesPerS float64 `json:"samples_per_s"`
	Samples     int     `json:"samples"`
}

// EvalRecord is the result of one validation pass.
type EvalRecord struct {
	Epoch    int     `json:"epoch"`
	Step     int     `json:"step"`
	Loss     float64 `json:"val_loss"`
	Accuracy float64 `json:"val_accuracy"`
	Samples  int     `json:"val_samples"`
}

// Batch is one micro-batch: arrays named like graph inputs, and labels.
type Batch struct {
	Inputs map[string]*graph.Tensor
	Labels *graph.Tensor
	Size   int
}

// BatchSource yields the micro-batches of an epoch in order.
type BatchSource interface {
	// Batches returns the epoch's batches; the iteration stops early when
	// yield returns false.
	Batches(ctx context.Context, epoch int) func(yield func(*Batch, error) bool)
	// NumBatches is the number of batches per epoch.
	NumBatches() int
}

// ErrNaNLoss is returned when a step's loss is not finite.
var ErrNaNLoss = errors.New("loss is not finite")

// Trainer runs the training loop of a Program with an optimizer and a
// schedule: accumulation over micro-batches, clipping, logging hooks.
type Trainer struct {
	Prog      *Program
	Opt       optim.Optimizer
	Sched     optim.Schedule
	Params    []*optim.Param
	GradAccum int
	ClipNorm  float64
	ClipValue float64
	// MaxSteps stops after that many optimizer steps (0: run all epochs).
	MaxSteps int
	Epochs   int

	// OnStep and OnEval receive progress; either may be nil.
	OnStep func(StepRecord)
	OnEval func(EvalRecord)
	// Val, when set, is evaluated at the end of each epoch.
	Val BatchSource

	step int
}

// NewOptimizer builds the optimizer a Config asks for over the program's
// parameters, with parameter groups and frozen parameters applied.
func NewOptimizer(cfg Config, prog *Program) (optim.Optimizer, []*optim.Param, error) {
	params := make([]*optim.Param, len(prog.Params))
	for i, p := range prog.Params {
		params[i] = &optim.Param{Name: p.Name, Value: p.Value}
	}
	groups := []optim.Group{{WeightDecay: cfg.WeightDecay}, {WeightDecay: 0}}
	if cfg.NoDecayBiasNorm {
		optim.GroupByDecay(params, nil)
	} else {
		groups[1].WeightDecay = cfg.WeightDecay
	}
	var opt optim.Optimizer
	var err error
	switch cfg.Optimizer {
	case "sgd":
		opt, err = optim.NewSGD(optim.SGDConfig{LR: cfg.LR, Momentum: cfg.Momentum, Dampening: cfg.Dampening,
			Nesterov: cfg.Nesterov, WeightDecay: cfg.WeightDecay, Groups: groups})
	case "adam", "adamw":
		ac := optim.AdamConfig{LR: cfg.LR, Beta1: cfg.Beta1, Beta2: cfg.Beta2, Eps: cfg.Eps, WeightDecay: cfg.WeightDecay, Groups: groups}
		if cfg.Optimizer == "adam" {
			opt, err = optim.NewAdam(ac)
		} else {
			opt, err = optim.NewAdamW(ac)
		}
	default:
		return nil, nil, fmt.Errorf("--optimizer: unknown optimizer %q (want sgd, adam or adamw)", cfg.Optimizer)
	}
	if err != nil {
		return nil, nil, err
	}
	return opt, params, nil
}

// NewSchedule builds the LR schedule a Config asks for; totalSteps is the
// number of optimizer steps the run will take.
func NewSchedule(cfg Config, totalSteps int) (optim.Schedule, error) {
	switch cfg.LRSchedule {
	case "", "constant":
		if cfg.WarmupSteps > 0 {
			return optim.ConstantWarmup{Base: cfg.LR, WarmupSteps: cfg.WarmupSteps}, nil
		}
		return optim.Constant{Base: cfg.LR}, nil
	case "linear":
		return optim.LinearWarmupDecay{Base: cfg.LR, WarmupSteps: cfg.WarmupSteps, TotalSteps: totalSteps}, nil
	case "cosine":
		return optim.CosineWarmup{Base: cfg.LR, WarmupSteps: cfg.WarmupSteps, TotalSteps: totalSteps}, nil
	case "step":
		if cfg.StepSize <= 0 {
			return nil, fmt.Errorf("--lr-schedule step needs --step-size > 0")
		}
		return optim.NewStepLR(cfg.LR, cfg.StepSize, cfg.Gamma)
	}
	return nil, fmt.Errorf("--lr-schedule: unknown schedule %q (want constant, linear, cosine or step)", cfg.LRSchedule)
}

// TotalSteps is the number of optimizer steps a run takes: MaxSteps, or
// epochs × ceil(batches per epoch / accumulation) (the last partial window
// of an epoch is still a step).
func TotalSteps(maxSteps, epochs, batchesPerEpoch, accum int) int {
	if maxSteps > 0 {
		return maxSteps
	}
	return epochs * ((batchesPerEpoch + accum - 1) / accum)
}

// TrainOnlyRegexp compiles --train-only.
func TrainOnlyRegexp(s string) (*regexp.Regexp, error) {
	if s == "" {
		return nil, nil
	}
	re, err := regexp.Compile(s)
	if err != nil {
		return nil, fmt.Errorf("--train-only: %w", err)
	}
	return re, nil
}

// Step is the number of optimizer steps taken.
func (t *Trainer) Step() int { return t.step }

// Run trains over src until Epochs are done or MaxSteps is reached.
func (t *Trainer) Run(ctx context.Context, src BatchSource) error {
	if t.GradAccum <= 0 {
		t.GradAccum = 1
	}
	epochs := t.Epochs
	if t.MaxSteps > 0 {
		epochs = math.MaxInt32 // --steps decides
	}
	acc := make([]*graph.Tensor, len(t.Params))
	for epoch := 0; epoch < epochs; epoch++ {
		if t.MaxSteps > 0 && t.step >= t.MaxSteps {
			return nil
		}
		inWindow, samples := 0, 0
		var lossSum float64
		windowStart := time.Now()
		flush := func() error {
			if inWindow == 0 {
				return nil
			}
			rec, err := t.apply(acc, epoch)
			if err != nil {
				return err
			}
			rec.Loss = lossSum / float64(inWindow)
			rec.Samples = samples
			rec.SamplesPerS = float64(samples) / time.Since(windowStart).Seconds()
			if math.IsNaN(rec.Loss) || math.IsInf(rec.Loss, 0) {
				return fmt.Errorf("train: step %d (epoch %d): %w (%v); try a lower --lr, --clip-grad-norm, or check the data for NaNs", rec.Step, epoch, ErrNaNLoss, rec.Loss)
			}
			if t.OnStep != nil {
				t.OnStep(rec)
			}
			inWindow, samples, lossSum = 0, 0, 0
			windowStart = time.Now()
			return nil
		}
		var runErr error
		for b, err := range src.Batches(ctx, epoch) {
			if err != nil {
				runErr = err
				break
			}
			res, err := t.Prog.ForwardBackward(ctx, b.Inputs, b.Labels, float32(1/float64(t.GradAccum)))
			if err != nil {
				runErr = fmt.Errorf("step %d, epoch %d: %w", t.step+1, epoch, err)
				break
			}
			if math.IsNaN(res.Loss) || math.IsInf(res.Loss, 0) {
				runErr = fmt.Errorf("train: step %d (epoch %d): %w (%v); try a lower --lr, --clip-grad-norm, or check the data for NaNs", t.step+1, epoch, ErrNaNLoss, res.Loss)
				break
			}
			accumulate(acc, res.Grads, inWindow == 0)
			inWindow++
			samples += b.Size
			lossSum += res.Loss
			if inWindow == t.GradAccum {
				if runErr = flush(); runErr != nil {
					break
				}
				if t.MaxSteps > 0 && t.step >= t.MaxSteps {
					break
				}
			}
		}
		if runErr != nil {
			return runErr
		}
		if !(t.MaxSteps > 0 && t.step >= t.MaxSteps) {
			// The last partial window of the epoch is still applied.
			if err := flush(); err != nil {
				return err
			}
		}
		if t.Val != nil {
			ev, err := t.Evaluate(ctx, t.Val, epoch)
			if err != nil {
				return err
			}
			if t.OnEval != nil {
				t.OnEval(ev)
			}
		}
	}
	return nil
}

// accumulate adds grads into acc (copying on the first micro-batch of a window).
func accumulate(acc, grads []*graph.Tensor, first bool) {
	for i, g := range grads {
		if first || acc[i] == nil {
			if acc[i] == nil {
				acc[i] = g.Clone()
			} else {
				copy(acc[i].Float32s(), g.Float32s())
			}
			continue
		}
		a, s := acc[i].Float32s(), g.Float32s()
		for j := range a {
			a[j] += s[j]
		}
	}
}

// apply clips and applies the accumulated gradients: one optimizer step.
func (t *Trainer) apply(acc []*graph.Tensor, epoch int) (StepRecord, error) {
	lr := t.Sched.LR(t.step)
	t.Opt.SetLR(lr)
	for i, p := range t.Params {
		p.Grad = acc[i]
	}
	maxNorm := t.ClipNorm
	if maxNorm <= 0 {
		maxNorm = math.Inf(1) // report the norm, clip nothing
	}
	norm, err := optim.ClipGradNorm(t.Params, maxNorm)
	if err != nil {
		return StepRecord{}, err
	}
	if t.ClipValue > 0 {
		if err := optim.ClipGradValue(t.Params, t.ClipValue); err != nil {
			return StepRecord{}, err
		}
	}
	if err := t.Opt.Step(t.Params); err != nil {
		return StepRecord{}, err
	}
	t.step++
	return StepRecord{Step: t.step, Epoch: epoch, LR: lr, GradNorm: norm}, nil
}

// Evaluate runs the program in inference mode over src: mean loss
// (weighted by batch size) and, for classification losses, accuracy.
func (t *Trainer) Evaluate(ctx context.Context, src BatchSource, epoch int) (EvalRecord, error) {
	rec := EvalRecord{Epoch: epoch, Step: t.step}
	var lossSum float64
	correct := 0
	for b, err := range src.Batches(ctx, 0) {
		if err != nil {
			return rec, err
		}
		loss, logits, err := t.Prog.Evaluate(ctx, b.Inputs, b.Labels)
		if err != nil {
			return rec, err
		}
		lossSum += loss * float64(b.Size)
		rec.Samples += b.Size
		if logits != nil && b.Labels != nil && t.Prog.cfg.Loss.Kind == "cross_entropy" {
			correct += countCorrect(logits, b.Labels)
		}
	}
	if rec.Samples > 0 {
		rec.Loss = lossSum / float64(rec.Samples)
		rec.Accuracy = float64(correct) / float64(rec.Samples)
	}
	return rec, nil
}

// countCorrect counts rows of logits [N, C, ...] whose argmax over C equals
// the label (labels [N, ...]).
func countCorrect(logits, labels *graph.Tensor) int {
	if logits.Rank() < 2 {
		return 0
	}
	n, c := logits.Shape[0], logits.Shape[1]
	inner := logits.Size() / (n * c)
	correct := 0
	for i := 0; i < n; i++ {
		for s := 0; s < inner; s++ {
			best, arg := math.Inf(-1), 0
			for k := 0; k < c; k++ {
				v := logits.Float((i*c+k)*inner + s)
				if v > best {
					best, arg = v, k
				}
			}
			if int64(arg) == labels.Int(i*inner+s) {
				correct++
			}
		}
	}
	return correct
}
