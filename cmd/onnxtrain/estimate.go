package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/onnxtrain/onnxtrain/bench/benchlib"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/tensorio"
	"github.com/onnxtrain/onnxtrain/train"
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
	// Activations is the memory plan's peak of one training step (its
	// gradient outputs included).
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
	// parameters and the inputs: kernel scratch buffers (GEMM packing,
	// convolution columns), the compiled plans, the imported model's
	// leftovers. Measured (live Go heap after two steps, less the rest),
	// not planned.
	Workspace int64 `json:"workspace"`
	// FirstStep is what the first step, which records the memory plan,
	// holds beyond the later ones at its peak. Measured (the live Go heap
	// while it runs), not planned.
	FirstStep int64 `json:"first_step"`
	// Total is the sum: what a training process holds at its peak besides
	// the Go runtime and the program itself.
	Total int64 `json:"total"`
	// Extrapolated says the batch-dependent parts were extrapolated from
	// steps at batches 2 and 4 (estimate_extrapolate.go) rather than
	// measured at the batch asked for, which would not fit in memory.
	Extrapolated bool `json:"extrapolated,omitempty"`
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
			fmt.Fprintf(w, "gradients:       %s (accumulation buffers)\n", humanBytes(est.Gradients))
			fmt.Fprintf(w, "optimizer state: %s\n", humanBytes(est.OptimizerState))
			fmt.Fprintf(w, "activations:     %s (planned peak of the step, its gradient outputs included)\n", humanBytes(est.Activations))
			fmt.Fprintf(w, "inputs:          %s (one batch) + %s (batches the loader prepares ahead)\n", humanBytes(est.Inputs), humanBytes(est.Prefetch))
			if o.Data != "" {
				fmt.Fprintf(w, "dataset:         %s (%s, in memory)\n", humanBytes(est.Dataset), o.Data)
			}
			fmt.Fprintf(w, "workspace:       %s (kernel scratch and compiled plans, measured)\n", humanBytes(est.Workspace))
			fmt.Fprintf(w, "first step:      %s (what recording the memory plan holds beyond later steps, measured)\n", humanBytes(est.FirstStep))
			fmt.Fprintf(w, "total:           %s\n", humanBytes(est.Total))
			if est.Extrapolated {
				fmt.Fprintf(w, "(activations, inputs, workspace and first step extrapolated from steps at batches %d and %d: batch %d is too large to run here)\n",
					extrapolateFrom[0], extrapolateFrom[1], est.BatchSize)
			}
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

	// forceExtrapolate makes EstimateMemory extrapolate whatever the
	// size (tests compare it with the direct measurement).
	forceExtrapolate bool
}

// estimateDirect builds the training step of a model, runs it twice on
// random data (the memory plan is recorded on the first run) and adds up
// what a training run holds: the planned parts from the model and the plan,
// the workspace and the first step's extra from the live Go heap of this
// process while it runs the steps.
func estimateDirect(ctx context.Context, path string, o EstimateOptions) (*MemoryEstimate, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	if o.BatchSize <= 0 {
		return nil, fmt.Errorf("estimate-memory: --batch-size must be positive, got %d", o.BatchSize)
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
	heapBefore := liveHeap()
	m, err := importer.Load(path)
	if err != nil {
		return nil, err
	}
	prog, err := train.Build(m, train.ProgramConfig{Loss: lc, Recompute: o.Recompute, MixedPrecision: o.MixedPrecision})
	if err != nil {
		return nil, err
	}
	shapes, syms, err := benchlib.ResolveInputShapes(m.Graph, o.BatchSize, nil)
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(1, 2))
	inputs, err := benchlib.RandomInputs(rng, m.Graph, shapes, 10)
	if err != nil {
		return nil, err
	}
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
	est.Prefetch = ahead * est.Inputs

	// The first run records the plan. Its peak is measured as `onnxtrain
	// train` runs that step: with frequent collections (train.Run sets
	// GOGC=10 for it), sampling the live heap each collection marks.
	var firstPeak int64
	{
		old := debug.SetGCPercent(10)
		stop := sampleLiveHeap(&firstPeak)
		_, err := prog.ForwardBackward(ctx, inputs, labels, 1)
		stop()
		debug.SetGCPercent(old)
		if err != nil {
			return nil, err
		}
	}
	if _, err := prog.ForwardBackward(ctx, inputs, labels, 1); err != nil {
		return nil, err
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
	switch o.Optimizer {
	case "sgd":
		if o.Momentum != 0 {
			est.OptimizerState = trainable
		}
	case "adam", "adamw":
		est.OptimizerState = 2 * trainable
	}
	est.Activations = prog.PlannedBytes()
	// Everything the process holds now that is neither a parameter, an
	// input nor the step's planned storage is workspace. The plan's peak
	// includes transient heap values that are gone by now, so this errs
	// low by at most those.
	steady := est.Parameters + est.Inputs + est.Activations
	held := liveHeap() - heapBefore
	est.Workspace = max(0, held-steady)
	est.FirstStep = max(0, firstPeak-heapBefore-steady-est.Workspace)
	runtime.KeepAlive(prog)
	runtime.KeepAlive(inputs)
	runtime.KeepAlive(labels)
	est.Total = est.Parameters + est.Gradients + est.OptimizerState + est.Activations + est.Inputs +
		est.Prefetch + est.Dataset + est.Workspace + est.FirstStep
	return est, nil
}

// liveHeap is the bytes of live Go heap objects, after a collection.
func liveHeap() int64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(s[0].Value.Uint64())
}

// sampleLiveHeap polls the live heap the latest collection marked (the Go
// runtime's /gc/heap/live:bytes) until stop is called, keeping the largest
// value in *peak.
func sampleLiveHeap(peak *int64) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		tick := time.NewTicker(200 * time.Microsecond)
		defer tick.Stop()
		for {
			metrics.Read(s)
			if s[0].Value.Kind() == metrics.KindUint64 {
				*peak = max(*peak, int64(s[0].Value.Uint64()))
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() {
		runtime.GC() // marks the live heap at the end of the run too
		close(done)
		wg.Wait()
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
