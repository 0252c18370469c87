package train

import (
	"errors"
	"fmt"
	"math"
	"regexp"

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
	// LossScale is the fp16 loss scale after the step (0 without one);
	// Skipped is true for a step skipped because its gradients held an
	// inf or NaN (its GradNorm is then reported as 0).
	LossScale float64 `json:"loss_scale,omitempty"`
	Skipped   bool    `json:"skipped,omitempty"`
	// Stopped is true for the step after which a stop request (SIGINT,
	// SIGTERM) ended the run (signal.go).
	Stopped bool `json:"stopped,omitempty"`
}

// EvalRecord is the result of one validation pass.
type EvalRecord struct {
	Epoch    int     `json:"epoch"`
	Step     int     `json:"step"`
	Loss     float64 `json:"val_loss"`
	Accuracy float64 `json:"val_accuracy"`
	Samples  int     `json:"val_samples"`
	// HasAccuracy says Accuracy means something (a cross_entropy loss);
	// for other losses logs leave val_accuracy out.
	HasAccuracy bool `json:"-"`
}

// lossOnlyEval is what the JSON log writes for a validation pass of a
// loss that is not a classification: no val_accuracy.
type lossOnlyEval struct {
	Epoch   int     `json:"epoch"`
	Step    int     `json:"step"`
	Loss    float64 `json:"val_loss"`
	Samples int     `json:"val_samples"`
}

// ErrNaNLoss is returned when a step's loss is not finite.
var ErrNaNLoss = errors.New("loss is not finite")

// NewOptimizer builds the optimizer a Config asks for over params, with
// the parameter groups it asks for.
func NewOptimizer(cfg Config, params []*optim.Param) (optim.Optimizer, error) {
	groups := []optim.Group{{WeightDecay: cfg.WeightDecay}, {WeightDecay: 0}}
	if cfg.NoDecayBiasNorm {
		optim.GroupByDecay(params, nil)
	} else {
		groups[1].WeightDecay = cfg.WeightDecay
	}
	groups, err := lrGroups(cfg, params, groups) // lrgroup.go: --lr-group
	if err != nil {
		return nil, err
	}
	var opt optim.Optimizer
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
		return nil, fmt.Errorf("--optimizer: unknown optimizer %q (want sgd, adam or adamw)", cfg.Optimizer)
	}
	return opt, err
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
