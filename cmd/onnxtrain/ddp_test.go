//go:build unix

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/train"
)

// TestMain lets the test binary act as the onnxtrain CLI for the worker
// processes the data-parallel tests launch.
func TestMain(m *testing.M) {
	if os.Getenv("ONNXTRAIN_TEST_AS_CLI") == "1" {
		cmd := newRootCmd()
		cmd.SetArgs(os.Args[1:])
		if err := cmd.Execute(); err != nil {
			fmt.Fprintln(os.Stderr, "onnxtrain:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func stepLosses(t *testing.T, out string) []float64 {
	t.Helper()
	var losses []float64
	dec := json.NewDecoder(bytes.NewBufferString(out))
	for dec.More() {
		var r train.StepRecord
		require.NoError(t, dec.Decode(&r), out)
		losses = append(losses, r.Loss)
	}
	return losses
}

// runCLI runs the CLI in process and returns its stdout.
func runCLI(t *testing.T, args ...string) string {
	t.Helper()
	var out, errOut syncBuffer
	cmd := newRootCmd()
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	require.NoError(t, cmd.Execute(), "stderr: %s", errOut.String())
	return out.String()
}

// TestDataParallelEqualsLargerBatch: N processes with per-process batch b
// give the losses of 1 process with batch N·b, step for step, with and
// without accumulation, for SGD and AdamW.
func TestDataParallelEqualsLargerBatch(t *testing.T) {
	if testing.Short() {
		t.Skip("starts worker processes")
	}
	t.Setenv("ONNXTRAIN_TEST_AS_CLI", "1")
	self, err := os.Executable()
	require.NoError(t, err)
	const model, data = "../../models/mlp/mlp_train.onnx", "../../models/mlp/train_case.npz"
	for _, tc := range []struct {
		opt        string
		procs      int
		accum      int
		perProcess int
	}{
		{"sgd", 2, 1, 4},
		{"adamw", 2, 1, 4},
		{"sgd", 2, 2, 2},
		{"adamw", 4, 1, 2},
	} {
		t.Run(fmt.Sprintf("%s/%dx%d/accum%d", tc.opt, tc.procs, tc.perProcess, tc.accum), func(t *testing.T) {
			common := []string{"train", "--model", model, "--data", data, "--optimizer", tc.opt, "--lr", "0.05", "--momentum", "0.9",
				"--steps", "4", "--shuffle=false", "--log-format", "json", "--grad-accum", fmt.Sprint(tc.accum)}
			single := runCLI(t, append(common, "--batch-size", fmt.Sprint(tc.procs*tc.perProcess))...)
			multi := runCLI(t, append([]string{"launch", "--nproc-per-node", fmt.Sprint(tc.procs), "--", self},
				append(common, "--batch-size", fmt.Sprint(tc.perProcess))...)...)
			want, got := stepLosses(t, single), stepLosses(t, multi)
			require.Len(t, want, 4)
			require.Len(t, got, 4, multi)
			for i := range want {
				assert.LessOrEqual(t, math.Abs(got[i]-want[i]), 1e-5*math.Abs(want[i]), "step %d: %d processes %.8f, one process %.8f", i+1, tc.procs, got[i], want[i])
			}
		})
	}
}
