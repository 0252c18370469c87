//go:build mpi && cgo

package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestMPITrainMatchesTCP: with the CLI built by `go build -tags mpi`,
// `mpirun -np 2 onnxtrain train --comm mpi` logs the losses of
// `onnxtrain launch --nproc-per-node 2 -- onnxtrain train --comm tcp`, step
// for step, for SGD with momentum and for AdamW with accumulation.
func TestMPITrainMatchesTCP(t *testing.T) {
	mpirun, err := exec.LookPath("mpirun")
	require.NoError(t, err, "mpirun is not installed (Debian: apt-get install openmpi-bin libopenmpi-dev)")
	bin := filepath.Join(t.TempDir(), "onnxtrain")
	build := exec.Command("go", "build", "-tags", "mpi", "-o", bin, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build -tags mpi: %s", out)
	const model, data, steps = "../../models/mlp/mlp_train.onnx", "../../models/mlp/train_case.npz", 4
	run := func(t *testing.T, name string, args ...string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, name, args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		require.NoError(t, cmd.Run(), "%s %v\nstderr: %s\nstdout: %s", name, args, stderr.String(), stdout.String())
		return stdout.String()
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"sgd", []string{"--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9"}},
		{"adamw-accum2", []string{"--optimizer", "adamw", "--lr", "0.01", "--grad-accum", "2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			common := append([]string{"train", "--model", model, "--data", data, "--steps", "4", "--shuffle=false",
				"--log-format", "json", "--batch-size", "2", "--dist-timeout", "1m"}, tc.args...)
			tcp := stepLosses(t, run(t, bin, append([]string{"launch", "--nproc-per-node", "2", "--", bin}, append(common, "--comm", "tcp")...)...))
			require.Len(t, tcp, steps)
			mpi := stepLosses(t, run(t, mpirun, append([]string{"--allow-run-as-root", "--oversubscribe", "-np", "2", bin},
				append(common, "--comm", "mpi")...)...))
			assertLossesEqual(t, tcp, mpi, "MPI against TCP")
			t.Logf("losses: tcp %v, mpi %v", tcp, mpi)
		})
	}
}

// TestMPIOutsideMpirunIsRefused: --comm mpi under `onnxtrain launch` (each
// worker alone in its own MPI world) fails, saying to use mpirun, instead
// of training two unconnected copies.
func TestMPIOutsideMpirunIsRefused(t *testing.T) {
	t.Setenv("ONNXTRAIN_TEST_AS_CLI", "1")
	args := []string{"train", "--model", "../../models/mlp/mlp_train.onnx", "--data", "../../models/mlp/train_case.npz",
		"--steps", "1", "--batch-size", "2", "--comm", "mpi"}
	_, stderr, err := runCLIResult(launched(t, 2, nil, args...)...)
	require.Error(t, err)
	require.Contains(t, stderr, "--comm mpi: MPI sees a world of 1 but the torchrun launcher's environment says 2 processes: start the workers with mpirun")
}
