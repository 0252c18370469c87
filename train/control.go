package train

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"
)

// Training control of `onnxtrain train`: evaluation every N steps, the
// best checkpoint, early stopping, the text log interval, and the run
// settings a checkpoint remembers (to tell a resume that changes the data
// order). docs/training-control.md describes what a user sees.

// bestMetric is a metric --save-best and --early-stopping-patience follow.
type bestMetric struct {
	name           string // as logged: val_loss, val_accuracy
	higherIsBetter bool
}

// parseBestMetric reads a --save-best value. The names of the JSON log
// are accepted, and the short and Hugging Face forms (loss, eval_loss).
func parseBestMetric(s string) (bestMetric, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "val_loss", "loss", "eval_loss", "val-loss":
		return bestMetric{"val_loss", false}, nil
	case "val_accuracy", "accuracy", "eval_accuracy", "val-accuracy", "acc":
		return bestMetric{"val_accuracy", true}, nil
	}
	return bestMetric{}, fmt.Errorf("--save-best must be val_loss or val_accuracy, got %q", s)
}

func (m bestMetric) value(e EvalRecord) float64 {
	if m.name == "val_accuracy" {
		return e.Accuracy
	}
	return e.Loss
}

// better reports whether v improves on best (NaN never does).
func (m bestMetric) better(v, best float64, have bool) bool {
	switch {
	case math.IsNaN(v):
		return false
	case !have:
		return true
	case m.higherIsBetter:
		return v > best
	default:
		return v < best
	}
}

// runControl is the state of the training control that a checkpoint
// carries (registered for checkpointing as "run"): the best evaluation so
// far, the evaluations since it, and the settings that fix the data order.
type runControl struct {
	Best      *BestRecord `json:"best,omitempty"`
	BadEvals  int         `json:"bad_evals"`
	BatchSize int         `json:"batch_size"`
	GradAccum int         `json:"grad_accum"`
	World     int         `json:"world_size"`
	Seed      int64       `json:"seed"`
	Shuffle   bool        `json:"shuffle"`

	// saved is what the loaded checkpoint recorded (nil: nothing loaded,
	// or a checkpoint written before these were recorded).
	saved *runControl
}

// BestRecord is the best evaluation: its metric, value, step and
// checkpoint folder (empty when it was not saved).
type BestRecord struct {
	Metric     string  `json:"metric"`
	Value      float64 `json:"value"`
	Step       int     `json:"step"`
	Checkpoint string  `json:"checkpoint,omitempty"`
}

func (c *runControl) StateDict() ([]byte, error) { return json.Marshal(c) }

func (c *runControl) LoadStateDict(b []byte) error {
	var s runControl
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("run settings: %w", err)
	}
	c.saved = &s
	c.Best, c.BadEvals = s.Best, s.BadEvals
	return nil
}

// dataOrderChange says how a resumed run's data order differs from the
// run that wrote the checkpoint, or "" when it does not. The order is
// the same when the global micro-batch (batch size × processes), the
// accumulation, the seed and shuffling are: the shards of a global batch
// are the same examples whatever the number of processes.
func (c *runControl) dataOrderChange() string {
	s := c.saved
	if s == nil || s.BatchSize == 0 {
		return ""
	}
	var diffs []string
	if s.BatchSize*s.World != c.BatchSize*c.World {
		diffs = append(diffs, fmt.Sprintf("global batch %d (--batch-size %d × %d processes), now %d (%d × %d)",
			s.BatchSize*s.World, s.BatchSize, s.World, c.BatchSize*c.World, c.BatchSize, c.World))
	}
	if s.GradAccum != c.GradAccum {
		diffs = append(diffs, fmt.Sprintf("--grad-accum %d, now %d", s.GradAccum, c.GradAccum))
	}
	if s.Seed != c.Seed {
		diffs = append(diffs, fmt.Sprintf("--seed %d, now %d", s.Seed, c.Seed))
	}
	if s.Shuffle != c.Shuffle {
		diffs = append(diffs, fmt.Sprintf("--shuffle %t, now %t", s.Shuffle, c.Shuffle))
	}
	if len(diffs) == 0 {
		return ""
	}
	return strings.Join(diffs, "; ")
}

// errEarlyStop ends training normally: the metric stopped improving.
var errEarlyStop = errors.New("early stopping")

// logEvery is the interval of text step lines: --log-every, or about
// twenty lines per run.
func logEvery(cfg Config, total int) int {
	if cfg.LogEvery > 0 {
		return cfg.LogEvery
	}
	return max(1, total/20)
}

// afterStep runs at the end of every optimizer step, once it is logged:
// evaluation (--eval-every), the best metric and early stopping, a
// checkpoint when one is due (--checkpoint-every, a new best with
// --save-best, or a stop request), and the stop itself.
func (t *trainLoop) afterStep(ctx context.Context, rec StepRecord) error {
	improved, stopEarly := false, false
	if every := t.cfg.EvalEvery; every > 0 && t.val != nil && rec.Step%every == 0 {
		var err error
		if improved, stopEarly, err = t.evaluate(ctx, rec.Epoch); err != nil {
			return err
		}
	}
	save := t.cfg.Output != "" && (rec.Stopped ||
		(t.cfg.CheckpointEvery > 0 && rec.Step%t.cfg.CheckpointEvery == 0) ||
		(improved && t.cfg.SaveBest != ""))
	if save {
		if err := t.checkpoint(); err != nil {
			return err
		}
	}
	if rec.Stopped {
		e := &StoppedError{Step: rec.Step}
		if t.cfg.Output != "" {
			e.Checkpoint = filepath.Join(t.cfg.Output, CheckpointName(rec.Step))
		}
		return e
	}
	if stopEarly {
		return errEarlyStop
	}
	return nil
}

// evaluate runs the validation pass, logs it, and tracks the best metric:
// it reports whether the metric improved and whether early stopping ends
// the run. The accelerator's data position is kept: a validation pass in
// the middle of an epoch must not move where a checkpoint resumes.
func (t *trainLoop) evaluate(ctx context.Context, epoch int) (improved, stop bool, err error) {
	a := t.acc
	ep, bie, eod := a.epoch, a.batchInEpoch, a.endOfData
	ev, err := Evaluate(ctx, a, t.model, t.val, epoch)
	a.epoch, a.batchInEpoch, a.endOfData = ep, bie, eod
	if err != nil {
		return false, false, err
	}
	t.onEval(ev)
	return t.control.observe(t.cfg, ev, t.msg)
}

// observe tracks the best metric over an evaluation: it reports whether
// the metric improved (with --save-best, the caller saves the checkpoint
// named in Best) and whether early stopping ends the run (said on msg).
// The pipelined run (pipeline_run.go) shares it.
func (c *runControl) observe(cfg Config, ev EvalRecord, msg io.Writer) (improved, stop bool, err error) {
	metricName := cfg.SaveBest
	if metricName == "" {
		metricName = "val_loss"
	}
	metric, err := parseBestMetric(metricName)
	if err != nil {
		return false, false, err
	}
	if c.Best != nil && c.Best.Metric != metric.name {
		// Resumed with another metric: the saved best does not compare.
		c.Best, c.BadEvals = nil, 0
	}
	v := metric.value(ev)
	var best float64
	if c.Best != nil {
		best = c.Best.Value
	}
	if metric.better(v, best, c.Best != nil) {
		c.Best = &BestRecord{Metric: metric.name, Value: v, Step: ev.Step}
		if cfg.SaveBest != "" {
			c.Best.Checkpoint = CheckpointName(ev.Step)
		}
		c.BadEvals = 0
		return true, false, nil
	}
	c.BadEvals++
	if p := cfg.EarlyStoppingPatience; p > 0 && c.BadEvals >= p {
		fmt.Fprintf(msg, "early stopping at step %d: %s has not improved on %.6g (step %d) for %d evaluations (--early-stopping-patience %d)\n",
			ev.Step, metric.name, c.Best.Value, c.Best.Step, c.BadEvals, p)
		return false, true, nil
	}
	return false, false, nil
}

// bestToKeep is the name of the best checkpoint folder that pruning
// spares, or "".
func (t *trainLoop) bestToKeep() string {
	if t.cfg.SaveBest == "" || t.control == nil || t.control.Best == nil {
		return ""
	}
	return t.control.Best.Checkpoint
}

// newRunControl starts the control state of a run with its data-order
// settings.
func newRunControl(cfg Config, acc *Accelerator) *runControl {
	return &runControl{BatchSize: cfg.BatchSize, GradAccum: cfg.GradAccum, World: acc.NumProcesses(), Seed: cfg.Seed, Shuffle: cfg.Shuffle}
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// epochEnd is the validation pass after an epoch (without --eval-every),
// with the checkpoint of a new best (--save-best) and early stopping.
func (t *trainLoop) epochEnd(ctx context.Context, epoch int) error {
	improved, stop, err := t.evaluate(ctx, epoch)
	if err != nil {
		return err
	}
	if improved && t.cfg.SaveBest != "" && t.cfg.Output != "" {
		if err := t.checkpoint(); err != nil {
			return err
		}
	}
	if stop {
		return errEarlyStop
	}
	return nil
}

// reportStop tells where a stopped run saved and how to continue it.
func reportStop(msg io.Writer, cfg Config, e *StoppedError) {
	if e.Checkpoint == "" {
		fmt.Fprintf(msg, "stopped after step %d on request; nothing was saved (no --output)\n", e.Step)
		return
	}
	fmt.Fprintf(msg, "stopped after step %d on request; checkpoint written to %s\nto continue, run the same command with --resume latest (or --resume %s)\n", e.Step, e.Checkpoint, e.Checkpoint)
}
