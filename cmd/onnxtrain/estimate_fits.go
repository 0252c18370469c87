package main

import (
	"fmt"

	"github.com/onnxtrain/onnxtrain/train"
)

// satAdd adds in saturating arithmetic (a batch of 2^40 must not wrap).
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
