package main

import (
	"fmt"

	"github.com/onnxtrain/onnxtrain/bench/benchlib"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/train"
)

// Benchmarks too large for this machine are refused before anything is
// allocated, naming the flag: a GEMM whose three matrices, or a model
// whose input batch, cannot fit in memory. (The input batch is a lower
// bound of a step's memory: activations come on top; estimate-memory
// gives the whole.)

// checkGemmFits refuses a --gemm M,N,K whose float32 matrices exceed memory.
func checkGemmFits(m, n, k int) error {
	need := satAdd(satAdd(train.SizeProduct(int64(m), int64(k), 4), train.SizeProduct(int64(k), int64(n), 4)), train.SizeProduct(int64(m), int64(n), 4))
	return train.CheckFits("--gemm", fmt.Sprintf("%d,%d,%d", m, n, k), need, "float32 matrices A, B and C")
}

// checkBenchInputsFit refuses a --batch-size (or a --dim) whose random
// input batch exceeds memory.
// It vets the model RunModel loaded (ModelOptions.CheckModel): loading it
// here as well kept a second copy of the weights.
func checkBenchInputsFit(m *graph.Model, batch int, dims map[string]int64) error {
	shapes, _, err := benchlib.ResolveInputShapes(m.Graph, 1, dims)
	if err != nil {
		return nil
	}
	var per int64
	for _, in := range m.Graph.Inputs {
		s, ok := shapes[in.Name]
		if !ok || in.Type == nil {
			continue
		}
		dt := in.Type.DType
		if dt == graph.Undefined {
			dt = graph.Float32
		}
		f := []int64{int64(max(dt.Size(), 1))}
		for _, d := range s {
			f = append(f, int64(d))
		}
		per = satAdd(per, train.SizeProduct(f...))
	}
	if len(dims) > 0 {
		if err := train.CheckFits("--dim", fmt.Sprint(dims), per, "input bytes per example"); err != nil {
			return err
		}
	}
	return train.CheckFits("--batch-size", batch, train.SizeProduct(per, int64(batch)), "random inputs (before any activation)")
}
