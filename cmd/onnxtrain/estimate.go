package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"

	"github.com/spf13/cobra"

	"github.com/onnxtrain/onnxtrain/bench/benchlib"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/train"
)

// MemoryEstimate is what `onnxtrain estimate-memory` reports, in bytes.
type MemoryEstimate struct {
	Model          string `json:"model"`
	BatchSize      int    `json:"batch_size"`
	Optimizer      string `json:"optimizer"`
	Parameters     int64  `json:"parameters"`
	Gradients      int64  `json:"gradients"`
	OptimizerState int64  `json:"optimizer_state"`
	Activations    int64  `json:"activations"`
	Inputs         int64  `json:"inputs"`
	Total          int64  `json:"total"`
}

func newEstimateMemoryCmd() *cobra.Command {
	var batch int
	var opt, loss, mixed string
	var momentum float64
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "estimate-memory MODEL.onnx --batch-size N [--optimizer adamw]",
		Short: "Estimate the memory of a training step: parameters, gradients, optimizer state, activations (from the memory plan)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if mixed != "" && mixed != "no" {
				return fmt.Errorf("estimate-memory: --mixed-precision %q is not supported yet", mixed)
			}
			est, err := EstimateMemory(cmd.Context(), args[0], batch, opt, momentum, loss)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if asJSON {
				return json.NewEncoder(w).Encode(est)
			}
			fmt.Fprintf(w, "model:           %s (batch %d, %s)\n", est.Model, est.BatchSize, est.Optimizer)
			fmt.Fprintf(w, "parameters:      %s\n", humanBytes(est.Parameters))
			fmt.Fprintf(w, "gradients:       %s (accumulation buffers)\n", humanBytes(est.Gradients))
			fmt.Fprintf(w, "optimizer state: %s\n", humanBytes(est.OptimizerState))
			fmt.Fprintf(w, "activations:     %s (planned peak of the step, its gradient outputs included)\n", humanBytes(est.Activations))
			fmt.Fprintf(w, "inputs:          %s\n", humanBytes(est.Inputs))
			fmt.Fprintf(w, "total:           %s\n", humanBytes(est.Total))
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&batch, "batch-size", 32, "micro-batch size")
	f.StringVar(&opt, "optimizer", "adamw", "sgd, adam or adamw")
	f.Float64Var(&momentum, "momentum", 0.9, "SGD momentum (0: no momentum buffer)")
	f.StringVar(&loss, "loss", "cross_entropy", "loss, as for train")
	f.StringVar(&mixed, "mixed-precision", "no", "no (bf16 and fp16 are not supported yet)")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// EstimateMemory builds the training step of a model, runs it twice on
// random data (the memory plan is recorded on the first run) and adds up
// what a training run holds.
func EstimateMemory(ctx context.Context, path string, batch int, opt string, momentum float64, lossName string) (*MemoryEstimate, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	m, err := importer.Load(path)
	if err != nil {
		return nil, err
	}
	lc, err := train.ParseLoss(lossName)
	if err != nil {
		return nil, err
	}
	prog, err := train.Build(m, train.ProgramConfig{Loss: lc})
	if err != nil {
		return nil, err
	}
	shapes, syms, err := benchlib.ResolveInputShapes(m.Graph, batch, nil)
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(1, 2))
	inputs, err := benchlib.RandomInputs(rng, m.Graph, shapes, 10)
	if err != nil {
		return nil, err
	}
	est := &MemoryEstimate{Model: path, BatchSize: batch, Optimizer: opt}
	for _, t := range inputs {
		est.Inputs += int64(t.Size() * t.DType.Size())
	}
	var labels = inputs["labels"]
	if prog.NeedsLabels {
		out, err := benchlib.OutputShape(m, m.Graph.Outputs[0].Name, shapes, syms)
		if err != nil {
			return nil, err
		}
		if labels, err = benchlib.RandomLabels(rng, lc.Kind, out); err != nil {
			return nil, err
		}
		est.Inputs += int64(labels.Size() * labels.DType.Size())
	}
	for i := 0; i < 2; i++ {
		if _, err := prog.ForwardBackward(ctx, inputs, labels, 1); err != nil {
			return nil, err
		}
	}
	for _, p := range prog.Params {
		est.Parameters += int64(p.Value.Size() * p.Value.DType.Size())
	}
	for _, t := range prog.Buffers {
		est.Parameters += int64(t.Size() * t.DType.Size())
	}
	trainable := int64(0)
	for _, p := range prog.Params {
		trainable += int64(p.Value.Size() * 4)
	}
	est.Gradients = trainable
	switch opt {
	case "sgd":
		if momentum != 0 {
			est.OptimizerState = trainable
		}
	case "adam", "adamw":
		est.OptimizerState = 2 * trainable
	default:
		return nil, fmt.Errorf("estimate-memory: unknown optimizer %q", opt)
	}
	est.Activations = prog.PlannedBytes()
	est.Total = est.Parameters + est.Gradients + est.OptimizerState + est.Activations + est.Inputs
	return est, nil
}
