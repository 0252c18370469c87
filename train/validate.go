package train

import (
	"context"
	"fmt"
	"math"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/train/data"
)

// rangeRule is one numeric flag's allowed range.
type rangeRule struct {
	flag string
	ok   bool
	want string
	got  any
}

// validateRanges checks every numeric setting of a Config: NaN and
// infinities are refused everywhere, and each value must lie in the range
// that means something for it. The error names the flag, what it must be
// and what it got.
func (c *Config) validateRanges() error {
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	nonNeg := func(v float64) bool { return finite(v) && v >= 0 }
	positive := func(v float64) bool { return finite(v) && v > 0 }
	unit := func(v float64) bool { return finite(v) && v >= 0 && v < 1 }
	rules := []rangeRule{
		{"--batch-size", c.BatchSize > 0, "must be positive", c.BatchSize},
		{"--epochs", c.Epochs >= 0, "must be zero or more", c.Epochs},
		{"--steps", c.Steps >= 0, "must be zero (use --epochs) or more", c.Steps},
		{"--grad-accum", c.GradAccum > 0, "must be positive", c.GradAccum},
		{"--lr", nonNeg(c.LR), "must not be negative, infinite or NaN", c.LR},
		{"--momentum", nonNeg(c.Momentum), "must not be negative, infinite or NaN", c.Momentum},
		{"--dampening", nonNeg(c.Dampening), "must not be negative, infinite or NaN", c.Dampening},
		{"--weight-decay", nonNeg(c.WeightDecay), "must not be negative, infinite or NaN", c.WeightDecay},
		{"--beta1", unit(c.Beta1), "must be in [0, 1)", c.Beta1},
		{"--beta2", unit(c.Beta2), "must be in [0, 1)", c.Beta2},
		{"--eps", positive(c.Eps), "must be a finite positive number", c.Eps},
		{"--label-smoothing", unit(c.LabelSmoothing), "must be in [0, 1)", c.LabelSmoothing},
		{"--clip-grad-norm", nonNeg(c.ClipGradNorm), "must not be negative, infinite or NaN (0: off)", c.ClipGradNorm},
		{"--clip-grad-value", nonNeg(c.ClipGradValue), "must not be negative, infinite or NaN (0: off)", c.ClipGradValue},
		{"--warmup-steps", c.WarmupSteps >= 0, "must be zero or more", c.WarmupSteps},
		{"--step-size", c.StepSize >= 0, "must be zero or more", c.StepSize},
		{"--gamma", positive(c.Gamma), "must be a finite positive number", c.Gamma},
		{"--image-size", c.ImageSize >= 0, "must be zero (keep the size) or more", c.ImageSize},
		{"--random-crop", c.RandomCrop >= 0, "must be zero (off) or more", c.RandomCrop},
		{"--checkpoint-every", c.CheckpointEvery >= 0, "must be zero (off) or more", c.CheckpointEvery},
		{"--keep-last", c.KeepLast >= 0, "must be zero (keep all) or more", c.KeepLast},
		{"--eval-every", c.EvalEvery >= 0, "must be zero (every epoch) or more", c.EvalEvery},
		{"--early-stopping-patience", c.EarlyStoppingPatience >= 0, "must be zero (off) or more", c.EarlyStoppingPatience},
		{"--log-every", c.LogEvery >= 0, "must be zero (about twenty lines) or more", c.LogEvery},
		{"--bucket-mb", nonNeg(c.BucketMB), "must not be negative, infinite or NaN (0: the default)", c.BucketMB},
	}
	for _, r := range rules {
		if !r.ok {
			return fmt.Errorf("%s %s, got %v", r.flag, r.want, r.got)
		}
	}
	for i, v := range c.Mean {
		if !finite(v) {
			return fmt.Errorf("--mean must hold finite numbers, got %v at position %d", v, i+1)
		}
	}
	for i, v := range c.Std {
		if !positive(v) {
			return fmt.Errorf("--std must hold finite positive numbers, got %v at position %d", v, i+1)
		}
	}
	if c.Epochs == 0 && c.Steps == 0 {
		return fmt.Errorf("--epochs or --steps must be positive")
	}
	if c.SaveBest != "" {
		if _, err := parseBestMetric(c.SaveBest); err != nil {
			return err
		}
	}
	if c.EarlyStoppingPatience > 0 && c.ValData == "" {
		return fmt.Errorf("--early-stopping-patience needs --val-data (it counts evaluations without improvement)")
	}
	if c.SaveBest != "" && (c.ValData == "" || c.Output == "") {
		return fmt.Errorf("--save-best needs --val-data (the metric) and --output (where the checkpoint goes)")
	}
	if c.EvalEvery > 0 && c.ValData == "" {
		return fmt.Errorf("--eval-every needs --val-data")
	}
	return nil
}

// checkValData runs before the first step, so that a validation set that
// cannot work fails now rather than after training: its examples must
// have the training data's inputs (names, dtypes, shapes), its first
// batch must run through the model, and for cross-entropy every label
// must be a class of the model's output (or --ignore-index).
func checkValData(ctx context.Context, cfg Config, m *Model, train, val data.Dataset) error {
	n := min(cfg.BatchSize, val.Len())
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	vin, vlab, err := val.Gather(0, idx)
	if err != nil {
		return fmt.Errorf("--val-data %s: %w", cfg.ValData, err)
	}
	tin, tlab, err := train.Gather(0, []int{0})
	if err != nil {
		return fmt.Errorf("--data %s: %w", cfg.Data, err)
	}
	for name, t := range tin {
		v, ok := vin[name]
		switch {
		case !ok:
			return fmt.Errorf("--val-data %s has no input %q, which --data %s has", cfg.ValData, name, cfg.Data)
		case v.DType != t.DType || !graph.SameShape(v.Shape[1:], t.Shape[1:]):
			return fmt.Errorf("--val-data %s: input %q is %v%v per example, but %v%v in --data %s",
				cfg.ValData, name, v.DType, v.Shape[1:], t.DType, t.Shape[1:], cfg.Data)
		}
	}
	if (tlab == nil) != (vlab == nil) {
		return fmt.Errorf("--val-data %s: labels present in one of --data and --val-data only", cfg.ValData)
	}
	_, logits, err := m.Prog.Evaluate(ctx, vin, vlab)
	if err != nil {
		return fmt.Errorf("--val-data %s: its first batch does not run through the model: %w", cfg.ValData, err)
	}
	if m.Prog.cfg.Loss.Kind != "cross_entropy" || logits == nil || logits.Rank() < 2 {
		return nil
	}
	classes := int64(logits.Shape[1])
	bad := func(i int, l int64) error {
		return fmt.Errorf("--val-data %s: example %d has label %d, outside the model's %d classes [0, %d) (and not --ignore-index %d)",
			cfg.ValData, i, l, classes, classes, cfg.IgnoreIndex)
	}
	ok := func(l int64) bool { return (l >= 0 && l < classes) || l == cfg.IgnoreIndex }
	switch d := val.(type) {
	case interface{ Label(i int) int }:
		for i := 0; i < val.Len(); i++ {
			if l := int64(d.Label(i)); !ok(l) {
				return bad(i, l)
			}
		}
	case interface{ Labels() *graph.Tensor }:
		t := d.Labels()
		if t == nil {
			return nil
		}
		per := 1
		if t.Rank() > 1 {
			per = t.Size() / t.Shape[0]
		}
		for i := 0; i < t.Size(); i++ {
			if l, isInt := labelAt(t, i); isInt && !ok(l) {
				return bad(i/per, l)
			}
		}
	}
	return nil
}

// labelAt is element i of an integer label tensor, and whether it is one.
func labelAt(t *graph.Tensor, i int) (int64, bool) {
	switch d := t.Data.(type) {
	case []int64:
		return d[i], true
	case []int32:
		return int64(d[i]), true
	case []uint8:
		return int64(d[i]), true
	case []int8:
		return int64(d[i]), true
	case []int16:
		return int64(d[i]), true
	}
	return 0, false
}

// dashKeys rewrites the top-level keys of a YAML mapping with dashes for
// underscores (batch_size: is batch-size:, as accelerate's config files
// write keys); values are untouched. Two spellings of one key are an
// error naming it.
func dashKeys(b []byte) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return b, nil // empty, or not a mapping: the decoder says what is wrong
	}
	m := doc.Content[0]
	seen := map[string]int{}
	changed := false
	for i := 0; i+1 < len(m.Content); i += 2 {
		k := m.Content[i]
		name := strings.ReplaceAll(k.Value, "_", "-")
		if line, dup := seen[name]; dup {
			return nil, fmt.Errorf("line %d: key %q repeats %q of line %d", k.Line, k.Value, name, line)
		}
		seen[name] = k.Line
		if name != k.Value {
			k.Value, changed = name, true
		}
	}
	if !changed {
		return b, nil
	}
	return yaml.Marshal(&doc)
}
