package main

import (
	"context"
	"fmt"

	"github.com/onnxtrain/onnxtrain/train"
)

// estimate-memory never allocates a batch it was asked about that may not
// fit: it first runs the step at two small batches (extrapolateFrom) and
// extrapolates the batch-dependent parts (inputs, planned activations,
// workspace, the first step's extra) linearly to the requested batch. Only
// when that estimate is under half of this machine's memory does it
// measure the requested batch itself, as before (a measurement is closer
// than an extrapolation: workspace is not exactly linear in the batch).

// extrapolateFrom are the batches the extrapolation measures (2, not 1:
// BatchNormalization in training mode needs more than one value).
var extrapolateFrom = [2]int{2, 4}

// EstimateMemory estimates a training run of the model at o.BatchSize
// (see MemoryEstimate), extrapolating when the batch asked for is too large
// to measure here.
func EstimateMemory(ctx context.Context, path string, o EstimateOptions) (*MemoryEstimate, error) {
	if o.BatchSize <= extrapolateFrom[1] && !o.forceExtrapolate {
		return estimateDirect(ctx, path, o)
	}
	if o.BatchSize <= 0 {
		return estimateDirect(ctx, path, o) // its error
	}
	small := [2]*MemoryEstimate{}
	for i, b := range extrapolateFrom {
		so := o
		so.BatchSize, so.Data = b, ""
		est, err := estimateDirect(ctx, path, so)
		if err != nil {
			return nil, err
		}
		small[i] = est
	}
	est := extrapolate(small, o.BatchSize)
	if have := train.MachineMemory(); !o.forceExtrapolate && (have <= 0 || est.Total <= have/2) {
		return estimateDirect(ctx, path, o)
	}
	if o.Data != "" {
		n, examples, err := datasetBytes(o.Data)
		if err != nil {
			return nil, err
		}
		est.Dataset = n
		batches := (examples + o.BatchSize - 1) / o.BatchSize
		est.Prefetch = min(int64(loaderPrefetch+1), int64(max(batches-1, 0))) * est.Inputs
	}
	est.Model = path
	est.Total = 0
	for _, v := range []int64{est.Parameters, est.Gradients, est.OptimizerState, est.Activations, est.Inputs, est.Prefetch, est.Dataset, est.Workspace, est.FirstStep} {
		est.Total = satAdd(est.Total, v)
	}
	return est, nil
}

// extrapolate extends the estimates at extrapolateFrom's batches linearly
// to batch, in saturating arithmetic (a batch of 2^40 must not wrap).
func extrapolate(small [2]*MemoryEstimate, batch int) *MemoryEstimate {
	a, b := small[0], small[1]
	est := *b
	est.BatchSize, est.Extrapolated = batch, true
	db := int64(extrapolateFrom[1] - extrapolateFrom[0])
	grow := func(x, y int64) int64 {
		slope := max(0, (y-x)/db)
		extra := train.SizeProduct(slope, int64(batch-extrapolateFrom[1]))
		if slope == 0 || batch <= extrapolateFrom[1] {
			extra = 0
		}
		return satAdd(max(y, 0), extra)
	}
	est.Inputs = grow(a.Inputs, b.Inputs)
	est.Activations = grow(a.Activations, b.Activations)
	est.Workspace = grow(a.Workspace, b.Workspace)
	est.FirstStep = grow(a.FirstStep, b.FirstStep)
	est.Prefetch = train.SizeProduct(int64(loaderPrefetch+1), est.Inputs)
	est.Dataset = 0
	est.Total = 0
	for _, v := range []int64{est.Parameters, est.Gradients, est.OptimizerState, est.Activations, est.Inputs, est.Prefetch, est.Workspace, est.FirstStep} {
		est.Total = satAdd(est.Total, v)
	}
	return &est
}

func satAdd(x, y int64) int64 {
	if s := x + y; s >= x {
		return s
	}
	return 1<<63 - 1
}

// estimateFits is the error for an estimate larger than this machine's
// memory, naming --batch-size.
func estimateFits(est *MemoryEstimate) error {
	if est == nil {
		return nil
	}
	return train.CheckFits("--batch-size", est.BatchSize, est.Total, fmt.Sprintf("memory for training %s (the estimate above)", est.Model))
}
