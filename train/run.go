package train

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/tensorio"
)

// Summary is what a finished run reports.
type Summary struct {
	Steps     int          `json:"steps"`
	FinalLoss float64      `json:"final_loss"`
	LastEval  *EvalRecord  `json:"last_eval,omitempty"`
	Records   []StepRecord `json:"-"`
	Seconds   float64      `json:"seconds"`
	Outputs   []string     `json:"outputs,omitempty"`
}

// Run is `onnxtrain train`: it loads the model and data the config names,
// trains, evaluates, and writes the trained model. Step records go to out
// (JSON lines with LogFormat "json", text otherwise); messages for people
// go to msg.
func Run(ctx context.Context, cfg Config, out, msg io.Writer) (*Summary, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	start := time.Now()
	m, err := importer.Load(cfg.Model)
	if err != nil {
		return nil, err
	}
	loss, err := ParseLoss(cfg.Loss)
	if err != nil {
		return nil, err
	}
	loss.LabelSmoothing = cfg.LabelSmoothing
	loss.IgnoreIndex = cfg.IgnoreIndex
	trainOnly, err := TrainOnlyRegexp(cfg.TrainOnly)
	if err != nil {
		return nil, err
	}
	prog, err := Build(m, ProgramConfig{Loss: loss, TrainOnly: trainOnly, Backend: cfg.Backend, Seed: cfg.Seed})
	if err != nil {
		return nil, err
	}
	src, err := OpenData(cfg, cfg.Data, true, prog)
	if err != nil {
		return nil, err
	}
	var val BatchSource
	if cfg.ValData != "" {
		if val, err = OpenData(cfg, cfg.ValData, false, prog); err != nil {
			return nil, err
		}
	}
	opt, params, err := NewOptimizer(cfg, prog)
	if err != nil {
		return nil, err
	}
	total := TotalSteps(cfg.Steps, cfg.Epochs, src.NumBatches(), cfg.GradAccum)
	sched, err := NewSchedule(cfg, total)
	if err != nil {
		return nil, err
	}
	sum := &Summary{}
	enc := json.NewEncoder(out)
	tr := &Trainer{
		Prog: prog, Opt: opt, Sched: sched, Params: params,
		GradAccum: cfg.GradAccum, ClipNorm: cfg.ClipGradNorm, ClipValue: cfg.ClipGradValue,
		MaxSteps: cfg.Steps, Epochs: cfg.Epochs, Val: val,
		OnStep: func(r StepRecord) {
			sum.Records = append(sum.Records, r)
			if cfg.LogFormat == "json" {
				enc.Encode(r)
				return
			}
			// Text is for people: about twenty lines per run.
			every := max(1, total/20)
			if r.Step != 1 && r.Step%every != 0 && r.Step != total {
				return
			}
			fmt.Fprintf(out, "step %d/%d  epoch %d  loss %.5f  lr %.3g  grad_norm %.4g  %.0f samples/s\n",
				r.Step, total, r.Epoch, r.Loss, r.LR, r.GradNorm, r.SamplesPerS)
		},
		OnEval: func(e EvalRecord) {
			ev := e
			sum.LastEval = &ev
			if cfg.LogFormat == "json" {
				enc.Encode(e)
				return
			}
			fmt.Fprintf(out, "epoch %d  val_loss %.5f  val_accuracy %.2f%%  (%d samples)\n", e.Epoch, e.Loss, 100*e.Accuracy, e.Samples)
		},
	}
	if cfg.LogFormat != "json" {
		fmt.Fprintf(msg, "training %s: %d parameters in %d tensors (%d frozen), %d batches of %d per epoch, %d optimizer steps\n",
			cfg.Model, countElements(prog.Params), len(prog.Params), len(prog.Frozen), src.NumBatches(), cfg.BatchSize, total)
	}
	if err := tr.Run(ctx, src); err != nil {
		return sum, err
	}
	sum.Steps = tr.Step()
	if n := len(sum.Records); n > 0 {
		sum.FinalLoss = sum.Records[n-1].Loss
	}
	if cfg.Output != "" {
		paths, err := SaveModel(cfg.Output, prog)
		if err != nil {
			return sum, err
		}
		sum.Outputs = paths
		if cfg.LogFormat != "json" {
			fmt.Fprintf(msg, "wrote %v\n", paths)
		}
	}
	sum.Seconds = time.Since(start).Seconds()
	return sum, nil
}

func countElements(ps []*Parameter) int {
	n := 0
	for _, p := range ps {
		n += p.Value.Size()
	}
	return n
}

// SaveModel writes the trained model into dir as model.onnx (the original
// graph with its initializers holding the trained values) and
// model.safetensors (the parameters and buffers by initializer name).
func SaveModel(dir string, prog *Program) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("train: --output: %w", err)
	}
	// Parameters and buffers are the model's own initializer tensors,
	// updated in place, so the model as loaded now holds the trained values.
	onnxPath := filepath.Join(dir, "model.onnx")
	if err := importer.Save(onnxPath, prog.Model); err != nil {
		return nil, err
	}
	weights := map[string]*graph.Tensor{}
	for _, p := range prog.Params {
		weights[p.Name] = p.Value
	}
	for name, t := range prog.Buffers {
		weights[name] = t
	}
	stPath := filepath.Join(dir, "model.safetensors")
	if err := tensorio.WriteSafetensors(stPath, weights, map[string]string{"format": "pt", "producer": "onnxtrain"}); err != nil {
		return nil, err
	}
	return []string{onnxPath, stPath}, nil
}
