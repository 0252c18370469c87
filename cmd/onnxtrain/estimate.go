package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/onnxtrain/onnxtrain/bench/benchlib"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/tensorio"
	"github.com/onnxtrain/onnxtrain/train"
	"github.com/onnxtrain/onnxtrain/train/optim"
)

// MemoryEstimate is what `onnxtrain estimate-memory` reports, in bytes.
type MemoryEstimate struct {
	Model          string `json:"model"`
	BatchSize      int    `json:"batch_size"`
	Optimizer      string `json:"optimizer"`
	Recompute      bool   `json:"recompute,omitempty"`
	MixedPrecision string `json:"mixed_precision,omitempty"`
	Parameters     int64  `json:"parameters"`
	Gradients      int64  `json:"gradients"`
	OptimizerState int64  `json:"optimizer_state"`
	// Activations is the memory plan's peak of one training step of the
	// program train runs, the gradients it holds at that moment included
	// (with the update inside the step each dies once its parameter is
	// updated; under --clip-grad-norm all live until the clip).
	Activations int64 `json:"activations"`
	// Inputs is one batch; Prefetch the batches the data loader of
	// `onnxtrain train` prepares while one is in use (its prefetch queue
	// and the one its goroutine is gathering; fewer when --data has fewer
	// batches); Dataset the arrays of --data, which the loader keeps in
	// memory (0 without --data). Reading the file before training holds
	// an array's bytes twice while it decodes them; that transient, before
	// the first step, is not counted.
	Inputs   int64 `json:"inputs"`
	Prefetch int64 `json:"prefetch"`
	Dataset  int64 `json:"dataset"`
	// Workspace is what the executor holds besides its memory plan, the
	// parameters and the inputs: the kernels' scratch buffers (the
	// convolutions' padded inputs and column matrices, kept in free lists
	// between steps), replayed from the shapes (backend/cpu
	// memplan_shapes.go). Small fixed costs (GEMM packing buffers, the
	// compiled plans) are not counted.
	Workspace int64 `json:"workspace"`
	// FirstStep is what the first step, which records the memory plan,
	// holds beyond the later ones at its peak: its values come from the
	// heap, a retired value's storage reused only by one of exactly the
	// same size, until the step ends.
	FirstStep int64 `json:"first_step"`
	// Total is the sum: what a training process holds at its peak besides
	// the Go runtime and the program itself.
	Total int64 `json:"total"`
}

// loaderPrefetch is the number of batches `onnxtrain train`'s data loader
// queues ahead (train.Run); the loader's goroutine holds one more while it
// waits for room in the queue.
const loaderPrefetch = 2

func newEstimateMemoryCmd() *cobra.Command {
	var o EstimateOptions
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "estimate-memory MODEL.onnx --batch-size N [--optimizer adamw]",
		Short: "Estimate the memory of a training run: parameters, gradients, optimizer state, activations (from the memory plan), data and workspace",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) (retErr error) {
			est, err := EstimateMemory(cmd.Context(), args[0], o)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			// A run that cannot fit is an error naming the flag, after the
			// estimate is shown (estimate_extrapolate.go).
			defer func() {
				if fitErr := estimateFits(est); fitErr != nil && retErr == nil {
					retErr = fitErr
				}
			}()
			if asJSON {
				return json.NewEncoder(w).Encode(est)
			}
			rc := ""
			if est.Recompute {
				rc = ", recompute"
			}
			if est.MixedPrecision != "" {
				rc += ", mixed precision " + est.MixedPrecision
			}
			fmt.Fprintf(w, "model:           %s (batch %d, %s%s)\n", est.Model, est.BatchSize, est.Optimizer, rc)
			fmt.Fprintf(w, "parameters:      %s\n", humanBytes(est.Parameters))
			if o.GradAccum > 1 || o.SeparateUpdate {
				fmt.Fprintf(w, "gradients:       %s (accumulation buffers)\n", humanBytes(est.Gradients))
			} else {
				fmt.Fprintf(w, "gradients:       %s (no sums kept: the update runs inside the step, right after each gradient; --grad-accum > 1 or --separate-update keep them)\n", humanBytes(est.Gradients))
			}
			fmt.Fprintf(w, "optimizer state: %s\n", humanBytes(est.OptimizerState))
			fmt.Fprintf(w, "activations:     %s (planned peak of the step, with the gradients live at that moment)\n", humanBytes(est.Activations))
			fmt.Fprintf(w, "inputs:          %s (one batch) + %s (batches the loader prepares ahead)\n", humanBytes(est.Inputs), humanBytes(est.Prefetch))
			if o.Data != "" {
				fmt.Fprintf(w, "dataset:         %s (%s, in memory)\n", humanBytes(est.Dataset), o.Data)
			}
			fmt.Fprintf(w, "workspace:       %s (the kernels' scratch buffers)\n", humanBytes(est.Workspace))
			fmt.Fprintf(w, "first step:      %s (what recording the memory plan holds beyond later steps)\n", humanBytes(est.FirstStep))
			fmt.Fprintf(w, "total:           %s\n", humanBytes(est.Total))
			fmt.Fprintf(w, "(planned from the shapes of a batch of %d: nothing was run or allocated at that size)\n", est.BatchSize)
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.BatchSize, "batch-size", 32, "micro-batch size")
	f.StringVar(&o.Optimizer, "optimizer", "adamw", "sgd, adam or adamw")
	f.Float64Var(&o.Momentum, "momentum", 0.9, "SGD momentum (0: no momentum buffer)")
	f.StringVar(&o.Loss, "loss", "cross_entropy", "loss, as for train")
	f.StringVar(&o.Data, "data", "", "the .npz/.npy training data, to count the arrays the data loader keeps in memory")
	f.StringVar(&o.MixedPrecision, "mixed-precision", "no", "no, bf16 or fp16 (as train --mixed-precision: float32 master weights, gradients and optimizer state; low-precision activations where autocast puts them)")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	f.BoolVar(&o.Recompute, "recompute", false, "estimate for a step that recomputes cheap activations (as train --recompute)")
	f.IntVar(&o.GradAccum, "grad-accum", 1, "micro-batches per optimizer step (as train --grad-accum; above 1 the gradient sums are kept)")
	f.Float64Var(&o.ClipGradNorm, "clip-grad-norm", 0, "as train --clip-grad-norm: every gradient lives until the clip at the end of the backward pass")
	f.BoolVar(&o.SeparateUpdate, "separate-update", false, "as train --separate-update: the optimizer step after the micro-batch, over gradient sums")
	return cmd
}

// EstimateOptions says what training run EstimateMemory estimates.
type EstimateOptions struct {
	// BatchSize is the micro-batch size.
	BatchSize int
	// Optimizer is sgd, adam or adamw; Momentum is SGD's (0: no buffer).
	Optimizer string
	Momentum  float64
	// Loss is a --loss value (cross_entropy, mse, ..., output:NAME).
	Loss string
	// Recompute estimates a step with activation recomputation.
	Recompute bool
	// MixedPrecision is no, bf16 or fp16, as train's --mixed-precision.
	MixedPrecision string
	// Data is an optional .npz or .npy training set, counted in full.
	Data string
	// GradAccum is the micro-batches per optimizer step (0 or 1: one) and
	// SeparateUpdate train's --separate-update: with one micro-batch per
	// step and no --separate-update, train runs the update inside the step
	// and keeps no gradient sums (each gradient is a value of the step's
	// memory plan, counted in Activations).
	GradAccum      int
	SeparateUpdate bool
	// ClipGradNorm is train's --clip-grad-norm: with the update inside
	// the step, every gradient then lives until the clip at the end of
	// backward.
	ClipGradNorm float64
}

// EstimateMemory estimates a training run of the model at o.BatchSize
// from shapes alone: the training step is built and compiled (nothing is
// run), its memory planned from the shapes of a batch of that size by the
// CPU backend's planner (train.Program.PlanFromShapes), and the
// parameters, gradients, optimizer state and batches follow from their
// shapes. No batch is allocated, so a batch far larger than the machine is
// answered at once; the model's tensors are the importer's (a large model
// file is mapped, not read).
func EstimateMemory(ctx context.Context, path string, o EstimateOptions) (*MemoryEstimate, error) {
	if o.BatchSize <= 0 {
		return nil, fmt.Errorf("estimate-memory: --batch-size must be positive, got %d", o.BatchSize)
	}
	if o.GradAccum < 0 {
		return nil, fmt.Errorf("estimate-memory: --grad-accum must be positive, got %d", o.GradAccum)
	}
	switch o.Optimizer {
	case "sgd", "adam", "adamw":
	default:
		return nil, fmt.Errorf("estimate-memory: unknown optimizer %q (want sgd, adam or adamw)", o.Optimizer)
	}
	switch o.MixedPrecision {
	case "", "no":
		o.MixedPrecision = ""
	case "bf16", "fp16":
	default:
		return nil, fmt.Errorf("estimate-memory: --mixed-precision %q: want no, bf16 or fp16", o.MixedPrecision)
	}
	est := &MemoryEstimate{Model: path, BatchSize: o.BatchSize, Optimizer: o.Optimizer, Recompute: o.Recompute, MixedPrecision: o.MixedPrecision}
	ahead := int64(loaderPrefetch + 1)
	if o.Data != "" {
		n, examples, err := datasetBytes(o.Data)
		if err != nil {
			return nil, err
		}
		est.Dataset = n
		batches := (examples + o.BatchSize - 1) / o.BatchSize
		ahead = min(ahead, int64(max(batches-1, 0)))
	}
	lc, err := train.ParseLoss(o.Loss)
	if err != nil {
		return nil, err
	}
	m, err := importer.Load(path)
	if err != nil {
		return nil, err
	}
	// The program train runs: with one micro-batch per step and no
	// --separate-update the optimizer's update inside the step, each
	// gradient freed once its parameter is updated (train.fusedStepFits);
	// otherwise the gradients summed into buffers kept between steps.
	fused := o.GradAccum <= 1 && !o.SeparateUpdate
	prog, err := train.Build(m, train.ProgramConfig{Loss: lc, Recompute: o.Recompute, MixedPrecision: o.MixedPrecision,
		GradSums: !fused, FusedUpdate: fused})
	if err != nil {
		return nil, err
	}
	if fused {
		if err := bindEstimateUpdate(prog, o); err != nil {
			return nil, err
		}
	}
	shapes, syms, err := benchlib.ResolveInputShapes(m.Graph, o.BatchSize, nil)
	if err != nil {
		return nil, err
	}
	data := map[string][]int{}
	for _, in := range m.Graph.Inputs {
		s, ok := shapes[in.Name]
		if !ok {
			continue
		}
		data[in.Name] = s
		dt := graph.Float32
		if in.Type != nil && in.Type.DType != graph.Undefined {
			dt = in.Type.DType
		}
		est.Inputs = satAdd(est.Inputs, shapeBytes(s, dt))
	}
	var labels []int
	if prog.NeedsLabels {
		out, err := benchlib.OutputShape(m, m.Graph.Outputs[0].Name, shapes, syms)
		if err != nil {
			return nil, err
		}
		labels, err = labelShape(lc.Kind, out)
		if err != nil {
			return nil, err
		}
		dt := graph.Float32
		if lc.Kind == "cross_entropy" {
			dt = graph.Int64
		}
		est.Inputs = satAdd(est.Inputs, shapeBytes(labels, dt))
	}
	est.Prefetch = train.SizeProduct(ahead, est.Inputs)
	plan, err := prog.PlanFromShapes(data, labels)
	if err != nil {
		return nil, fmt.Errorf("estimate-memory: %w", err)
	}
	if len(plan.Unsized) > 0 {
		return nil, fmt.Errorf("estimate-memory: shape inference could not size %d values of the training step (%s), so its memory cannot be planned from shapes",
			len(plan.Unsized), strings.Join(plan.Unsized[:min(len(plan.Unsized), 5)], ", "))
	}
	for _, p := range prog.Params {
		est.Parameters = satAdd(est.Parameters, shapeBytes(p.Value.Shape, p.Value.DType))
	}
	for _, t := range prog.Buffers {
		est.Parameters = satAdd(est.Parameters, shapeBytes(t.Shape, t.DType))
	}
	trainable := int64(0)
	for _, p := range prog.Params {
		trainable = satAdd(trainable, shapeBytes(p.Value.Shape, graph.Float32))
	}
	if o.GradAccum > 1 || o.SeparateUpdate {
		est.Gradients = trainable // the gradient sums
	}
	switch o.Optimizer {
	case "sgd":
		if o.Momentum != 0 {
			est.OptimizerState = trainable
		}
	case "adam", "adamw":
		est.OptimizerState = train.SizeProduct(2, trainable)
	}
	est.Activations = plan.PeakBytes
	est.Workspace = plan.ScratchBytes
	// The first step records the plan: its values come from the heap,
	// reused only at exactly the same size, until it ends.
	est.FirstStep = max(0, plan.RecordingBytes-plan.PeakBytes)
	for _, v := range []int64{est.Parameters, est.Gradients, est.OptimizerState, est.Activations, est.Inputs, est.Prefetch, est.Dataset, est.Workspace, est.FirstStep} {
		est.Total = satAdd(est.Total, v)
	}
	return est, nil
}

// bindEstimateUpdate compiles prog's step with o's optimizer update
// inside, as train does with one micro-batch per step: the optimizer
// train.NewOptimizer builds for train's defaults with o's optimizer and
// momentum (the learning rate and decay do not change the plan). Its slots are allocated, not written: the
// pages of a large zeroed allocation stay unmapped until touched.
func bindEstimateUpdate(prog *train.Program, o EstimateOptions) error {
	params := make([]*optim.Param, len(prog.Params))
	for i, p := range prog.Params {
		params[i] = &optim.Param{Name: p.Name, Value: p.Value}
	}
	cfg := train.DefaultConfig()
	cfg.Optimizer, cfg.Momentum = o.Optimizer, o.Momentum
	opt, err := train.NewOptimizer(cfg, params)
	if err != nil {
		return fmt.Errorf("estimate-memory: %w", err)
	}
	r := train.UpdateRecipe{ClipGradNorm: o.ClipGradNorm, LossScaled: o.MixedPrecision == "fp16"}
	if err := prog.BindUpdate(opt, params, r); err != nil {
		return fmt.Errorf("estimate-memory: %w", err)
	}
	return nil
}

// shapeBytes is the bytes of a tensor of shape s and dtype dt, saturating.
func shapeBytes(s []int, dt graph.DType) int64 {
	n := int64(dt.Size())
	for _, d := range s {
		n = train.SizeProduct(n, int64(d))
	}
	return n
}

// labelShape is the shape of the labels a loss takes for model output out
// (benchlib.RandomLabels' shapes, without making them).
func labelShape(kind string, out []int) ([]int, error) {
	switch kind {
	case "cross_entropy":
		if len(out) < 2 {
			return nil, fmt.Errorf("estimate-memory: cross_entropy needs an output of rank ≥ 2 ([batch, classes, ...]), got shape %v", out)
		}
		return append([]int{out[0]}, out[2:]...), nil
	default:
		return out, nil
	}
}

// datasetBytes is the in-memory size of the arrays of an .npz or .npy
// training set, and its number of examples (the leading dimension).
func datasetBytes(path string) (bytes int64, examples int, err error) {
	var arrays []*graph.Tensor
	switch strings.ToLower(filepath.Ext(path)) {
	case ".npz":
		m, err := tensorio.ReadNPZ(path)
		if err != nil {
			return 0, 0, fmt.Errorf("estimate-memory: --data: %w", err)
		}
		for _, t := range m {
			arrays = append(arrays, t)
		}
	case ".npy":
		f, err := os.Open(path)
		if err != nil {
			return 0, 0, fmt.Errorf("estimate-memory: --data: %w", err)
		}
		defer f.Close()
		t, err := tensorio.ReadNPY(f)
		if err != nil {
			return 0, 0, fmt.Errorf("estimate-memory: --data %s: %w", path, err)
		}
		arrays = append(arrays, t)
	default:
		return 0, 0, fmt.Errorf("estimate-memory: --data %s: only .npz and .npy data are counted (other formats are read lazily)", path)
	}
	for _, t := range arrays {
		bytes += int64(t.Size() * t.DType.Size())
		if len(t.Shape) > 0 {
			examples = max(examples, t.Shape[0])
		}
	}
	return bytes, examples, nil
}
