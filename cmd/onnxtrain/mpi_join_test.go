//go:build mpi && cgo

package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMPISettingsMismatch: under mpirun (MPMD, one rank with --lr 0.01 and
// one with --lr 0.02) both ranks stop at once, naming the field and the
// ranks, as over TCP.
func TestMPISettingsMismatch(t *testing.T) {
	mpirun, err := exec.LookPath("mpirun")
	require.NoError(t, err, "mpirun is not installed (Debian: apt-get install openmpi-bin libopenmpi-dev)")
	bin := filepath.Join(t.TempDir(), "onnxtrain")
	out, err := exec.Command("go", "build", "-tags", "mpi", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build -tags mpi: %s", out)
	common := []string{"train", "--model", "../../models/mlp/mlp_train.onnx", "--data", "../../models/mlp/train_case.npz",
		"--steps", "2", "--batch-size", "2", "--comm", "mpi", "--log-format", "json", "--lr"}
	args := []string{"--allow-run-as-root", "--oversubscribe", "-np", "1", bin}
	args = append(append(args, common...), "0.01", ":", "-np", "1", bin)
	args = append(append(args, common...), "0.02")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a bound on a hang
	defer cancel()
	cmd := exec.CommandContext(ctx, mpirun, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	require.Error(t, err, "mpirun exited 0: %s", stdout.String())
	require.NoError(t, ctx.Err())
	assert.Contains(t, stderr.String(), "--lr: rank 0 = 0.01, rank 1 = 0.02")
	assert.Empty(t, stdout.String(), "no rank trained")
}
