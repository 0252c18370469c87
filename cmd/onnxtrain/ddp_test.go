//go:build unix

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/internal/testutil"
	"github.com/onnxtrain/onnxtrain/train"
)

// TestMain lets the test binary act as the onnxtrain CLI for the worker
// processes the data-parallel tests launch.
func TestMain(m *testing.M) {
	if os.Getenv("ONNXTRAIN_TEST_AS_CLI") == "1" {
		args := os.Args[1:]
		if os.Getenv(envResumeOnRestart) == "1" && os.Getenv("ONNXTRAIN_RESTART_COUNT") != "0" {
			args = append(args, "--resume", "latest")
		}
		doomed := dieOnCue()
		cmd := newRootCmd()
		cmd.SetArgs(args)
		if err := cmd.Execute(); err != nil {
			report(os.Stderr, err)
			os.Exit(exitCode(err))
		}
		if doomed {
			die()
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The fault tests' hooks, read by workers that run the test binary as the
// CLI. A worker whose RANK equals envExitRank exits with status 7 as soon as
// the file envExitWhen exists (a checkpoint's manifest: so the worker dies
// mid-training, after a checkpoint), or at the latest when its command
// ends; unless the file envExitMarker exists, which the dying worker
// creates, so that a restarted worker trains to the end. With
// envResumeOnRestart=1, restarted workers (ONNXTRAIN_RESTART_COUNT > 0) get
// --resume latest. With envExitMode=stop the worker does not exit but
// stops itself (SIGSTOP): it hangs with its connections open, as a wedged
// process does.
const (
	envExitRank        = "ONNXTRAIN_TEST_EXIT_RANK"
	envExitWhen        = "ONNXTRAIN_TEST_EXIT_WHEN"
	envExitMarker      = "ONNXTRAIN_TEST_EXIT_MARKER"
	envResumeOnRestart = "ONNXTRAIN_TEST_RESUME_ON_RESTART"
	envExitMode        = "ONNXTRAIN_TEST_EXIT_MODE"
	dieStatus          = 7
)

// dieOnCue starts the watch for envExitWhen when this worker is the one to
// die; it reports whether it is.
func dieOnCue() bool {
	rank := os.Getenv(envExitRank)
	if rank == "" || rank != os.Getenv("RANK") {
		return false
	}
	if _, err := os.Stat(os.Getenv(envExitMarker)); err == nil {
		return false // died once already
	}
	when := os.Getenv(envExitWhen)
	go func() {
		for {
			if _, err := os.Stat(when); err == nil {
				die()
			}
			time.Sleep(time.Millisecond)
		}
	}()
	return true
}

func die() {
	if err := os.WriteFile(os.Getenv(envExitMarker), nil, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "test hook:", err)
	}
	if os.Getenv(envExitMode) == "stop" {
		if err := syscall.Kill(os.Getpid(), syscall.SIGSTOP); err != nil {
			fmt.Fprintln(os.Stderr, "test hook:", err)
		}
		select {} // after SIGCONT, keep hanging until killed
	}
	os.Exit(dieStatus)
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
	testutil.SkipShort(t, "starts worker processes")
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

const vitModel, vitData = "../../models/vit_tiny/vit_tiny_train.onnx", "../../models/vit_tiny/train_case.npz"

// runCLIResult runs the CLI in process and returns its stdout, its stderr
// and its error.
func runCLIResult(args ...string) (stdout, stderr string, err error) {
	var out, errOut syncBuffer
	cmd := newRootCmd()
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	err = cmd.Execute()
	return out.String(), errOut.String(), err
}

// stepRecords decodes the JSON step records of a run.
func stepRecords(t *testing.T, out string) []train.StepRecord {
	t.Helper()
	var recs []train.StepRecord
	dec := json.NewDecoder(bytes.NewBufferString(out))
	for dec.More() {
		var r train.StepRecord
		require.NoError(t, dec.Decode(&r), out)
		recs = append(recs, r)
	}
	return recs
}

// launched is the launch command line that runs args on procs workers of
// this test binary.
func launched(t *testing.T, procs int, launchFlags []string, args ...string) []string {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	l := append([]string{"launch", "--nproc-per-node", fmt.Sprint(procs)}, launchFlags...)
	return append(append(l, "--", self), args...)
}

func assertLossesEqual(t *testing.T, want, got []float64, what string) {
	t.Helper()
	require.Len(t, got, len(want), what)
	for i := range want {
		assert.LessOrEqual(t, math.Abs(got[i]-want[i]), 1e-5*math.Abs(want[i]), "%s, loss %d: got %.8f, want %.8f", what, i+1, got[i], want[i])
	}
}

// TestDataParallelViTEqualsLargerBatch: the ViT fixture (training export,
// no dropout) on 2 processes with per-process batch b gives the losses of 1
// process with batch 2b, step for step, for SGD and AdamW, with and without
// accumulation (and with --debug's cross-rank checks on).
func TestDataParallelViTEqualsLargerBatch(t *testing.T) {
	testutil.SkipShort(t, "starts worker processes")
	t.Setenv("ONNXTRAIN_TEST_AS_CLI", "1")
	const steps = 4
	for _, tc := range []struct {
		opt        string
		lr         string
		accum      int
		perProcess int
		debug      bool
	}{
		{"sgd", "0.05", 1, 4, false},
		{"adamw", "0.001", 1, 4, false},
		{"sgd", "0.05", 2, 2, true},
		{"adamw", "0.001", 2, 2, true},
	} {
		t.Run(fmt.Sprintf("%s/2x%d/accum%d", tc.opt, tc.perProcess, tc.accum), func(t *testing.T) {
			common := []string{"train", "--model", vitModel, "--data", vitData, "--optimizer", tc.opt, "--lr", tc.lr, "--momentum", "0.9",
				"--steps", fmt.Sprint(steps), "--shuffle=false", "--log-format", "json", "--grad-accum", fmt.Sprint(tc.accum)}
			single := stepLosses(t, runCLI(t, append(common, "--batch-size", fmt.Sprint(2*tc.perProcess))...))
			require.Len(t, single, steps)
			args := append(common, "--batch-size", fmt.Sprint(tc.perProcess), "--dist-timeout", "1m")
			if tc.debug {
				args = append(args, "--debug")
			}
			multi := stepLosses(t, runCLI(t, launched(t, 2, nil, args...)...))
			assertLossesEqual(t, single, multi, "2 processes against 1")
		})
	}
	// bf16 on the wire rounds each gradient to 8 significant bits: the first
	// loss (before any update) is exact, later ones move a little.
	t.Run("sgd/2x4/compress-bf16", func(t *testing.T) {
		common := []string{"train", "--model", vitModel, "--data", vitData, "--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9",
			"--steps", fmt.Sprint(steps), "--shuffle=false", "--log-format", "json", "--batch-size", "4"}
		exact := stepLosses(t, runCLI(t, launched(t, 2, nil, common...)...))
		bf16 := stepLosses(t, runCLI(t, launched(t, 2, nil, append(common, "--compress-bf16")...)...))
		require.Len(t, exact, steps)
		require.Len(t, bf16, steps)
		assert.Equal(t, exact[0], bf16[0], "the first loss comes before any gradient travels")
		moved := false
		for i := 1; i < steps; i++ {
			rel := math.Abs(bf16[i]-exact[i]) / math.Abs(exact[i])
			assert.Less(t, rel, 1e-2, "step %d: bf16 %.8f, float32 %.8f", i+1, bf16[i], exact[i])
			moved = moved || rel > 1e-7
		}
		assert.True(t, moved, "--compress-bf16 changed no loss: were the gradients sent as bf16? bf16 %v, float32 %v", bf16, exact)
	})
}

// TestCheckpointFromTwoProcessesResumes: a checkpoint written mid-epoch by 2
// processes resumes on 1 and on 4 processes with the same global batch, and
// the continued losses are those of an uninterrupted 1-process run.
func TestCheckpointFromTwoProcessesResumes(t *testing.T) {
	testutil.SkipShort(t, "starts worker processes")
	t.Setenv("ONNXTRAIN_TEST_AS_CLI", "1")
	// 8 examples, global batch 4: two batches per epoch, so the checkpoint
	// after step 3 sits in the middle of the second epoch.
	const saveAt, total, global = 3, 6, 4
	common := []string{"train", "--model", vitModel, "--data", vitData, "--optimizer", "adamw", "--lr", "0.001",
		"--shuffle=false", "--log-format", "json"}
	batch := func(procs int) []string { return []string{"--batch-size", fmt.Sprint(global / procs)} }
	ref := stepLosses(t, runCLI(t, append(append(common, batch(1)...), "--steps", fmt.Sprint(total))...))
	require.Len(t, ref, total)

	out := t.TempDir()
	first := stepLosses(t, runCLI(t, launched(t, 2, nil, append(append(common, batch(2)...),
		"--steps", fmt.Sprint(saveAt), "--checkpoint-every", fmt.Sprint(saveAt), "--output", out)...)...))
	assertLossesEqual(t, ref[:saveAt], first, "2 processes before the checkpoint")
	latest, err := train.Latest(out)
	require.NoError(t, err)
	st, err := train.LoadState(latest)
	require.NoError(t, err)
	require.Equal(t, saveAt, st.Step)

	for _, procs := range []int{1, 4} {
		t.Run(fmt.Sprintf("on%d", procs), func(t *testing.T) {
			args := append(append(common, batch(procs)...), "--steps", fmt.Sprint(total), "--output", out, "--resume", "latest")
			if procs > 1 {
				args = launched(t, procs, nil, args...)
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

// TestFaultWorkerLost: one of 2 workers dies mid-training (after its job's
// second checkpoint). Without restarts the launcher fails naming the rank
// and the newest checkpoint loads; with --max-restarts 1 the job resumes
// from it and ends with the uninterrupted run's loss.
func TestFaultWorkerLost(t *testing.T) {
	testutil.SkipShort(t, "starts worker processes")
	t.Setenv("ONNXTRAIN_TEST_AS_CLI", "1")
	const steps, every = 24, 2
	common := []string{"train", "--model", vitModel, "--data", vitData, "--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9",
		"--shuffle=false", "--log-format", "json", "--steps", fmt.Sprint(steps)}
	ref := stepLosses(t, runCLI(t, append(common, "--batch-size", "8")...))
	require.Len(t, ref, steps)

	// prepare arms the hook: rank 1 dies once the second checkpoint is complete.
	prepare := func(t *testing.T) (out string) {
		tmp := t.TempDir()
		out = filepath.Join(tmp, "run")
		t.Setenv(envExitRank, "1")
		t.Setenv(envExitWhen, filepath.Join(out, train.CheckpointName(2*every), train.CheckpointManifestFile))
		t.Setenv(envExitMarker, filepath.Join(tmp, "died"))
		return out
	}
	worker := func(out string) []string {
		return append(common, "--batch-size", "4", "--checkpoint-every", fmt.Sprint(every), "--output", out, "--dist-timeout", "5s")
	}

	t.Run("fails", func(t *testing.T) {
		out := prepare(t)
		stdout, stderr, err := runCLIResult(launched(t, 2, []string{"--grace-period", "5s"}, worker(out)...)...)
		require.Error(t, err, "the launcher must fail when a worker dies; stdout: %s", stdout)
		assert.NotEqual(t, 0, exitCode(err))
		msg := err.Error() + "\n" + stderr
		t.Logf("launcher: %v", err)
		assert.Regexp(t, `worker rank 1 \(local rank 1, pid \d+\) failed: exit status 7|rank 1 .*(lost|did not answer|closed)`, msg,
			"the failure names the lost rank")
		_, statErr := os.Stat(os.Getenv(envExitMarker))
		require.NoError(t, statErr, "rank 1 did not die: %s", msg)

		recs := stepRecords(t, stdout)
		require.NotEmpty(t, recs)
		assert.Less(t, recs[len(recs)-1].Step, steps, "the job stopped before its end")
		latest, err := train.Latest(out)
		require.NoError(t, err, "a complete checkpoint survives the failure")
		st, err := train.LoadState(latest)
		require.NoError(t, err, "the newest checkpoint %s loads", latest)
		assert.GreaterOrEqual(t, st.Step, 2*every)
		assert.Less(t, st.Step, steps)
		assert.Zero(t, st.Step%every)
	})

	// A wedged worker (stopped, connections open): the other one gives up
	// after --dist-timeout on its own, naming the rank that did not answer.
	t.Run("hangs", func(t *testing.T) {
		out := prepare(t)
		t.Setenv(envExitMode, "stop")
		args := append(worker(out), "--dist-timeout", "2s") // the last one wins
		_, stderr, err := runCLIResult(launched(t, 2, []string{"--grace-period", "1s"}, args...)...)
		require.Error(t, err, "the launcher must fail when a worker hangs")
		t.Logf("launcher: %v", err)
		assert.Regexp(t, `worker rank 0 \(local rank 0, pid \d+\) failed: exit status 1`, err.Error(), "the survivor fails by itself")
		assert.Regexp(t, `\[rank 0\] .*rank 1 did not answer within 2s`, stderr, "the survivor names the silent rank")
		latest, err := train.Latest(out)
		require.NoError(t, err)
		_, err = train.LoadState(latest)
		require.NoError(t, err, "the newest checkpoint %s loads", latest)
	})

	// resumed checks a job that restarted once: it trained to the end, every
	// step logged with the uninterrupted run's loss.
	resumed := func(t *testing.T, stdout, stderr string, err error) {
		t.Helper()
		require.NoError(t, err, "stderr: %s", stderr)
		_, statErr := os.Stat(os.Getenv(envExitMarker))
		require.NoError(t, statErr, "rank 1 did not die, nothing was restarted: %s", stderr)
		assert.Contains(t, stderr, "restarting all 2 local workers")

		recs := stepRecords(t, stdout)
		require.NotEmpty(t, recs)
		last := recs[len(recs)-1]
		require.Equal(t, steps, last.Step, stdout)
		assert.LessOrEqual(t, math.Abs(last.Loss-ref[steps-1]), 1e-5*math.Abs(ref[steps-1]),
			"final loss after a restart %.8f, uninterrupted %.8f", last.Loss, ref[steps-1])
		// Every step logged, before or after the restart, is the
		// uninterrupted run's.
		for _, r := range recs {
			want := ref[r.Step-1]
			assert.LessOrEqual(t, math.Abs(r.Loss-want), 1e-5*math.Abs(want), "step %d: %.8f, uninterrupted %.8f", r.Step, r.Loss, want)
		}
	}

	t.Run("restarts", func(t *testing.T) {
		out := prepare(t)
		// Restarted workers get --resume latest (a first start has no
		// checkpoint to resume from).
		t.Setenv(envResumeOnRestart, "1")
		stdout, stderr, err := runCLIResult(launched(t, 2, []string{"--max-restarts", "1", "--monitor-interval", "10ms"}, worker(out)...)...)
		resumed(t, stdout, stderr, err)
	})

	// Without --resume, the restarted workers resume their job's own
	// --output by themselves: the first attempt's checkpoints are not
	// "another run".
	t.Run("restarts-without-resume", func(t *testing.T) {
		out := prepare(t)
		stdout, stderr, err := runCLIResult(launched(t, 2, []string{"--max-restarts", "1", "--monitor-interval", "10ms"}, worker(out)...)...)
		resumed(t, stdout, stderr, err)
		assert.NotContains(t, stderr, "holds another run")
	})
}
