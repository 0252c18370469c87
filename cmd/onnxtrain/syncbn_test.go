//go:build unix

package main

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/internal/testutil"
	"github.com/onnxtrain/onnxtrain/tensorio"
)

// runningStats reads the BatchNorm running statistics of a trained model
// that `train --output DIR` wrote.
func runningStats(t *testing.T, dir string) map[string]*graph.Tensor {
	t.Helper()
	all, _, err := tensorio.ReadSafetensors(filepath.Join(dir, "model.safetensors"))
	require.NoError(t, err)
	out := map[string]*graph.Tensor{}
	for name, v := range all {
		if strings.Contains(name, "running_mean") || strings.Contains(name, "running_var") {
			out[name] = v
		}
	}
	require.NotEmpty(t, out, "no running statistics in %s", dir)
	return out
}

// maxRelDiff is max |a - b| / max |a| over two tensors of the same size.
func maxRelDiff(a, b *graph.Tensor) float64 {
	scale, worst := 0.0, 0.0
	for i := 0; i < a.Size(); i++ {
		scale = math.Max(scale, math.Abs(a.Float(i)))
		worst = math.Max(worst, math.Abs(a.Float(i)-b.Float(i)))
	}
	return worst / math.Max(scale, 1e-12)
}

// TestSyncBatchNormEqualsLargerBatch: the BatchNorm fixture (cifar_resnet,
// 9 BatchNorm layers, 8 examples) on N processes with per-process batch b
// and --sync-batchnorm gives the losses and the running statistics of 1
// process with batch N·b, step for step (2x4, 4x2 with --debug's cross-rank
// checks, and 2x2 with accumulation over 2 micro-batches, against 1x4 with
// the same accumulation); without the flag each process normalises with its
// own examples and both differ.
func TestSyncBatchNormEqualsLargerBatch(t *testing.T) {
	testutil.SkipShort(t, "starts worker processes")
	t.Setenv("ONNXTRAIN_TEST_AS_CLI", "1")
	const steps = 3
	const model, data = "../../models/cifar_resnet/cifar_resnet_train.onnx", "../../models/cifar_resnet/train_case.npz"
	common := []string{"train", "--model", model, "--data", data, "--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9",
		"--steps", fmt.Sprint(steps), "--shuffle=false", "--log-format", "json"}
	// single runs one process with the global batch.
	single := func(t *testing.T, batch, accum int) ([]float64, map[string]*graph.Tensor) {
		dir := t.TempDir()
		losses := stepLosses(t, runCLI(t, append(common, "--batch-size", fmt.Sprint(batch), "--grad-accum", fmt.Sprint(accum), "--output", dir)...))
		require.Len(t, losses, steps)
		return losses, runningStats(t, dir)
	}
	multi := func(t *testing.T, procs, batch, accum int, flags ...string) ([]float64, map[string]*graph.Tensor) {
		dir := t.TempDir()
		args := append(append(common, "--batch-size", fmt.Sprint(batch), "--grad-accum", fmt.Sprint(accum), "--dist-timeout", "1m", "--output", dir), flags...)
		losses := stepLosses(t, runCLI(t, launched(t, procs, nil, args...)...))
		require.Len(t, losses, steps)
		return losses, runningStats(t, dir)
	}

	for _, tc := range []struct {
		procs, perProcess, accum int
		flags                    []string
	}{
		{2, 4, 1, nil},
		{4, 2, 1, []string{"--debug"}},
		{2, 2, 2, nil},
	} {
		t.Run(fmt.Sprintf("sync/%dx%d/accum%d", tc.procs, tc.perProcess, tc.accum), func(t *testing.T) {
			wantLosses, wantStats := single(t, tc.procs*tc.perProcess, tc.accum)
			losses, stats := multi(t, tc.procs, tc.perProcess, tc.accum, append([]string{"--sync-batchnorm"}, tc.flags...)...)
			assertLossesEqual(t, wantLosses, losses, fmt.Sprintf("%d processes with --sync-batchnorm against 1", tc.procs))
			require.Len(t, stats, len(wantStats))
			for name, w := range wantStats {
				require.Contains(t, stats, name)
				assert.LessOrEqual(t, maxRelDiff(w, stats[name]), 1e-5, "running statistic %s", name)
			}
		})
	}
	t.Run("without/2x4", func(t *testing.T) {
		wantLosses, wantStats := single(t, 8, 1)
		losses, stats := multi(t, 2, 4, 1)
		assert.Greater(t, math.Abs(losses[0]-wantLosses[0]), 1e-4*math.Abs(wantLosses[0]),
			"without --sync-batchnorm each process normalises with its own batch: the first loss should differ (2 processes %.8f, 1 process %.8f)", losses[0], wantLosses[0])
		moved := 0.0
		for name, w := range wantStats {
			moved = math.Max(moved, maxRelDiff(w, stats[name]))
		}
		assert.Greater(t, moved, 1e-3, "without --sync-batchnorm rank 0's running statistics are its own batch's")
	})
}
