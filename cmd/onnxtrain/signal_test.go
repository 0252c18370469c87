//go:build unix

package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/internal/testutil"
	"github.com/onnxtrain/onnxtrain/train"
)

// The first signal requests a stop; the second exits at once, with the
// shell's status for that signal.
func TestSignalStopperSecondSignalExits(t *testing.T) {
	sigs := make(chan os.Signal, 1)
	exited := make(chan int, 1)
	s := newSignalStopper(sigs, func(code int) { exited <- code })
	defer s.close()
	assert.Nil(t, s.Received())
	sigs <- syscall.SIGTERM
	select {
	case <-s.stop:
	case <-time.After(10 * time.Second):
		t.Fatal("the first signal did not request a stop")
	}
	assert.Equal(t, syscall.SIGTERM, s.Received())
	select {
	case code := <-exited:
		t.Fatalf("the first signal exited (%d)", code)
	default:
	}
	sigs <- syscall.SIGINT
	select {
	case code := <-exited:
		assert.Equal(t, 128+int(syscall.SIGINT), code)
	case <-time.After(10 * time.Second):
		t.Fatal("the second signal did not exit")
	}
}

// A training process sent SIGTERM mid-run finishes its step, logs it,
// writes checkpoint-<step>, says how to resume and exits 143; resumed with
// --resume latest, it logs the uninterrupted run's losses exactly.
func TestSIGTERMCheckpointsAndResumesExactly(t *testing.T) {
	testutil.SkipShort(t, "starts a training process")
	// The stopped run asks for far more steps than it can run before the
	// signal lands; the learning rate is constant, so --steps changes
	// nothing but the end, and the comparison runs to 10 steps after the
	// stop.
	const never = 1000000
	common := func(steps int) []string {
		return []string{"train", "--model", "../../models/mlp/mlp_train.onnx", "--data", "../../models/mlp/train_case.npz",
			"--optimizer", "sgd", "--lr", "0.01", "--momentum", "0.9", "--batch_size", "4", "--grad-accum", "2", "--seed", "5",
			"--log-format", "json", "--steps", fmt.Sprint(steps)}
	}
	out := filepath.Join(t.TempDir(), "run")
	self, err := os.Executable()
	require.NoError(t, err)
	child := exec.Command(self, append(common(never), "--output", out)...)
	child.Env = append(os.Environ(), "ONNXTRAIN_TEST_AS_CLI=1")
	var stderr bytes.Buffer
	child.Stderr = &stderr
	stdout, err := child.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, child.Start())
	t.Cleanup(func() { child.Process.Kill() }) // a failed test leaves no run behind
	sc := bufio.NewScanner(stdout)
	var lines []string
	signalled := false
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if !signalled {
			require.NoError(t, child.Process.Signal(syscall.SIGTERM))
			signalled = true
		}
	}
	err = child.Wait()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "the child must fail after a stop: %v\n%s", err, stderr.String())
	assert.Equal(t, 143, exit.ExitCode(), stderr.String())

	got := stepRecords(t, strings.Join(lines, "\n"))
	require.NotEmpty(t, got)
	last := got[len(got)-1]
	assert.True(t, last.Stopped, "the last record is the stopped step")
	ckpt := filepath.Join(out, train.CheckpointName(last.Step))
	assert.Contains(t, stderr.String(), "checkpoint written to "+ckpt)
	assert.Contains(t, stderr.String(), "--resume latest")
	st, err := train.LoadState(ckpt)
	require.NoError(t, err)
	assert.Equal(t, last.Step, st.Step)
	entries, err := os.ReadDir(out)
	require.NoError(t, err)
	for _, e := range entries {
		assert.NotContains(t, e.Name(), ".tmp-", "no temporary folder is left")
	}
	assert.NoFileExists(t, filepath.Join(out, train.LockFileName))

	steps := last.Step + 10
	ref := stepRecords(t, runCLI(t, common(steps)...))
	require.Len(t, ref, steps)
	resumed := stepRecords(t, runCLI(t, append(common(steps), "--output", out, "--resume", "latest")...))
	require.Len(t, resumed, 10)
	all := append(got, resumed...)
	require.Len(t, all, steps)
	for i, r := range all {
		require.Equal(t, i+1, r.Step)
		require.Equal(t, ref[i].Loss, r.Loss, "step %d: interrupted and resumed differs from the uninterrupted run", r.Step)
	}
	t.Logf("stopped after step %d", last.Step)
}

// Flags answer to underscores too (--batch_size, --grad_accum).
func TestUnderscoreFlags(t *testing.T) {
	base := []string{"train", "--model", "../../models/mlp/mlp_train.onnx", "--data", "../../models/mlp/train_case.npz",
		"--optimizer", "sgd", "--steps", "2", "--shuffle=false", "--log-format", "json"}
	dashed := stepRecords(t, runCLI(t, append(base, "--batch-size", "3", "--grad-accum", "2")...))
	under := stepRecords(t, runCLI(t, append(base, "--batch_size", "3", "--grad_accum", "2")...))
	require.Len(t, under, 2)
	require.Len(t, dashed, 2)
	for i := range under {
		assert.Equal(t, dashed[i].Loss, under[i].Loss)
		assert.Equal(t, dashed[i].Samples, under[i].Samples)
	}
	assert.Equal(t, 6, under[0].Samples, "3 × 2 samples per step")
}

// Under `onnxtrain launch`, a SIGTERM that reaches one worker only still
// stops every rank after the same step (the stop flag travels with the
// step's loss average), the checkpoint of that step is written as a
// collective one is, and the job resumes from it exactly.
func TestSIGTERMOneRankStopsAllAtSameStep(t *testing.T) {
	testutil.SkipShort(t, "starts worker processes")
	const never = 1000000 // as in TestSIGTERMCheckpointsAndResumesExactly
	common := func(steps int) []string {
		return []string{"train", "--model", "../../models/mlp/mlp_train.onnx", "--data", "../../models/mlp/train_case.npz",
			"--optimizer", "adamw", "--lr", "0.01", "--shuffle=false", "--log-format", "json", "--steps", fmt.Sprint(steps)}
	}
	out := filepath.Join(t.TempDir(), "run")
	self, err := os.Executable()
	require.NoError(t, err)
	launcher := exec.Command(self, launched(t, 2, []string{"--grace-period", "20s"}, append(common(never), "--batch-size", "2", "--output", out)...)...)
	launcher.Env = append(os.Environ(), "ONNXTRAIN_TEST_AS_CLI=1")
	var stderr bytes.Buffer
	launcher.Stderr = &stderr
	stdout, err := launcher.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, launcher.Start())
	t.Cleanup(func() { launcher.Process.Kill() }) // its workers get SIGTERM (parent-death signal) and stop
	sc := bufio.NewScanner(stdout)
	var lines []string
	signalled := false
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if !signalled {
			pid := childWithEnv(t, launcher.Process.Pid, "RANK=1")
			require.NotZero(t, pid, "rank 1's process")
			require.NoError(t, syscall.Kill(pid, syscall.SIGTERM))
			signalled = true
		}
	}
	require.Error(t, launcher.Wait(), "a stopped job fails: %s", stderr.String())
	got := stepRecords(t, strings.Join(lines, "\n"))
	require.NotEmpty(t, got)
	last := got[len(got)-1]
	assert.True(t, last.Stopped, "rank 0 stopped after the step rank 1 stopped at, though it got no signal: %s", stderr.String())
	st, err := train.LoadState(filepath.Join(out, train.CheckpointName(last.Step)))
	require.NoError(t, err, stderr.String())
	assert.Equal(t, last.Step, st.Step)

	steps := last.Step + 10
	ref := stepRecords(t, runCLI(t, append(common(steps), "--batch-size", "4")...))
	require.Len(t, ref, steps)
	resumed := stepRecords(t, runCLI(t, append(common(steps), "--batch-size", "4", "--output", out, "--resume", "latest")...))
	all := append(got, resumed...)
	require.Len(t, all, steps)
	for i, r := range all {
		require.Equal(t, i+1, r.Step)
		require.InDelta(t, ref[i].Loss, r.Loss, 1e-5*max(1, ref[i].Loss), "step %d", r.Step)
	}
	t.Logf("stopped after step %d", last.Step)
}

// childWithEnv finds a child of parent whose environment holds kv (Linux
// /proc); 0 when none does.
func childWithEnv(t *testing.T, parent int, kv string) int {
	t.Helper()
	for try := 0; try < 200; try++ {
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			var pid int
			if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
				continue
			}
			stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
			if err != nil {
				continue
			}
			// pid (comm) state ppid ...: comm may hold spaces; parse after ")".
			rest := string(stat[bytes.LastIndexByte(stat, ')')+1:])
			var state string
			var ppid int
			if _, err := fmt.Sscan(rest, &state, &ppid); err != nil || ppid != parent {
				continue
			}
			env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
			if err != nil {
				continue
			}
			for _, v := range bytes.Split(env, []byte{0}) {
				if string(v) == kv {
					return pid
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return 0
}

// A launched job whose --output holds another run fails on every rank at
// once with rank 0's reason, rather than leaving the other ranks waiting
// for rank 0 until --dist-timeout.
func TestLaunchedJobRefusedOutputFailsTogether(t *testing.T) {
	testutil.SkipShort(t, "starts worker processes")
	t.Setenv("ONNXTRAIN_TEST_AS_CLI", "1")
	out := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(out, "model.onnx"), []byte("an earlier run's model"), 0o644))
	args := []string{"train", "--model", "../../models/mlp/mlp_train.onnx", "--data", "../../models/mlp/train_case.npz",
		"--batch-size", "2", "--steps", "2", "--output", out, "--dist-timeout", "5m"}
	start := time.Now()
	_, stderr, err := runCLIResult(launched(t, 2, []string{"--grace-period", "5m"}, args...)...)
	require.Error(t, err)
	assert.Contains(t, stderr, "--output holds another run")
	assert.Contains(t, stderr, "the main process refused it")
	t.Logf("failed after %v: %v\n%s", time.Since(start), err, stderr)
}
