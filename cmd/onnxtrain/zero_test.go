//go:build unix

package main

import (
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/internal/testutil"
	"github.com/onnxtrain/onnxtrain/train"
)

const mlpModel, mlpData = "../../models/mlp/mlp_train.onnx", "../../models/mlp/train_case.npz"

// TestZeroEqualsLargerBatch: 2 and 4 processes with --zero 1 and --zero 2
// and per-process batch b give the losses (and clipped gradient norms) of 1
// process with batch N·b, step for step, with accumulation, for SGD with
// momentum and AdamW; and one ViT case with small buckets (several
// collective rounds per step).
func TestZeroEqualsLargerBatch(t *testing.T) {
	testutil.SkipShort(t, "starts worker processes")
	t.Setenv("ONNXTRAIN_TEST_AS_CLI", "1")
	const steps, global, accum = 4, 8, 2
	type tc struct {
		model, data string
		opt, lr     string
		procs, zero int
		extra       []string
	}
	var cases []tc
	for _, opt := range []string{"sgd", "adamw"} {
		lr := map[string]string{"sgd": "0.05", "adamw": "0.001"}[opt]
		for _, procs := range []int{2, 4} {
			for _, zero := range []int{1, 2} {
				cases = append(cases, tc{mlpModel, mlpData, opt, lr, procs, zero, []string{"--clip-grad-norm", "0.5"}})
			}
		}
	}
	cases = append(cases, tc{vitModel, vitData, "adamw", "0.001", 2, 2, []string{"--bucket-mb", "0.01"}})
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/%s/%dprocs/zero%d", filepath.Base(c.model), c.opt, c.procs, c.zero), func(t *testing.T) {
			common := append([]string{"train", "--model", c.model, "--data", c.data, "--optimizer", c.opt, "--lr", c.lr, "--momentum", "0.9",
				"--weight-decay", "0.01", "--steps", fmt.Sprint(steps), "--shuffle=false", "--log-format", "json", "--grad-accum", fmt.Sprint(accum)}, c.extra...)
			single := stepRecords(t, runCLI(t, append(common, "--batch-size", fmt.Sprint(global/accum))...))
			multi := stepRecords(t, runCLI(t, launched(t, c.procs, nil, append(common, "--batch-size", fmt.Sprint(global/accum/c.procs),
				"--zero", fmt.Sprint(c.zero), "--dist-timeout", "1m")...)...))
			require.Len(t, single, steps)
			require.Len(t, multi, steps)
			if c.model == mlpModel {
				assert.Greater(t, single[0].GradNorm, 0.5, "--clip-grad-norm acts on the first step")
			}
			for i := range single {
				want, got := single[i], multi[i]
				assert.LessOrEqual(t, math.Abs(got.Loss-want.Loss), 1e-5*math.Abs(want.Loss), "step %d loss: %d processes %.8f, one process %.8f", i+1, c.procs, got.Loss, want.Loss)
				assert.LessOrEqual(t, math.Abs(got.GradNorm-want.GradNorm), 1e-5*math.Abs(want.GradNorm), "step %d gradient norm: %d processes %.8f, one process %.8f", i+1, c.procs, got.GradNorm, want.GradNorm)
			}
		})
	}
}

// TestZeroCheckpointResumes: a checkpoint written by 2 processes under
// --zero 2 holds one optimizer shard per rank, and resumes on 1 process
// (without ZeRO) and on 4 processes (--zero 2) with the same global batch;
// the continued losses are those of an uninterrupted 1-process run.
func TestZeroCheckpointResumes(t *testing.T) {
	testutil.SkipShort(t, "starts worker processes")
	t.Setenv("ONNXTRAIN_TEST_AS_CLI", "1")
	// 8 examples, global batch 4: the checkpoint after step 3 sits in the
	// middle of the second epoch.
	const saveAt, total, global = 3, 6, 4
	common := []string{"train", "--model", mlpModel, "--data", mlpData, "--optimizer", "adamw", "--lr", "0.001",
		"--shuffle=false", "--log-format", "json"}
	batch := func(procs int) []string { return []string{"--batch-size", fmt.Sprint(global / procs)} }
	ref := stepLosses(t, runCLI(t, append(append(common, batch(1)...), "--steps", fmt.Sprint(total))...))
	require.Len(t, ref, total)

	out := t.TempDir()
	first := stepLosses(t, runCLI(t, launched(t, 2, nil, append(append(common, batch(2)...), "--zero", "2",
		"--steps", fmt.Sprint(saveAt), "--checkpoint-every", fmt.Sprint(saveAt), "--output", out)...)...))
	assertLossesEqual(t, ref[:saveAt], first, "2 processes under ZeRO-2 before the checkpoint")
	latest, err := train.Latest(out)
	require.NoError(t, err)
	man, err := train.ReadManifest(latest)
	require.NoError(t, err)
	for r := 0; r < 2; r++ {
		assert.Contains(t, man.Files, train.ZeroShardFile(r, 2), "rank %d's optimizer shard", r)
	}
	st, err := train.LoadState(latest)
	require.NoError(t, err)
	require.Equal(t, saveAt, st.Step)
	assert.Equal(t, 2, st.OptimizerShards)

	for _, procs := range []int{1, 4} {
		t.Run(fmt.Sprintf("on%d", procs), func(t *testing.T) {
			args := append(append(common, batch(procs)...), "--steps", fmt.Sprint(total), "--output", out, "--resume", latest)
			if procs > 1 {
				args = launched(t, procs, nil, append(args, "--zero", "2")...)
			}
			recs := stepRecords(t, runCLI(t, args...))
			require.NotEmpty(t, recs)
			assert.Equal(t, saveAt+1, recs[0].Step, "the resumed run continues after the checkpoint's step")
			var got []float64
			for _, r := range recs {
				got = append(got, r.Loss)
			}
			assertLossesEqual(t, ref[saveAt:], got, fmt.Sprintf("resumed on %d processes", procs))
		})
	}
}

// TestZeroFlagErrors: a ZeRO stage out of range is refused, naming the flag.
func TestZeroFlagErrors(t *testing.T) {
	_, _, err := runCLIResult("train", "--model", mlpModel, "--data", mlpData, "--zero", "3", "--steps", "1")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--zero must be 0, 1 or 2, got 3")
	_, _, err = runCLIResult("train", "--model", mlpModel, "--data", mlpData, "--bucket-mb", "-1", "--steps", "1")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--bucket-mb must not be negative")
}
