package train_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/train"
)

// A launcher's restart (ONNXTRAIN_RESTART_COUNT > 0) without --resume
// resumes its own job's --output; another job's output stays refused,
// even on a restart, and --overwrite-output does not wipe the job's own
// checkpoints on a restart.
func TestRestartResumesOwnOutput(t *testing.T) {
	cfg := controlConfig(t)
	cfg.Output, cfg.Steps, cfg.CheckpointEvery = t.TempDir(), 3, 3
	t.Setenv("ONNXTRAIN_JOB_ID", "job-a")
	t.Setenv("ONNXTRAIN_RESTART_COUNT", "0")
	_, _, err := run(t, cfg)
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(cfg.Output, train.RunOwnerFileName))
	require.NoError(t, err, "the job names itself in its --output")
	var owner map[string]any
	require.NoError(t, json.Unmarshal(b, &owner))
	assert.Equal(t, "ONNXTRAIN_JOB_ID=job-a", owner["job"])

	// The same job restarted: it resumes checkpoint-3 by itself.
	t.Setenv("ONNXTRAIN_RESTART_COUNT", "1")
	resumed := cfg
	resumed.Steps = 4
	out, _, err := run(t, resumed)
	require.NoError(t, err)
	steps, _, _ := records(t, out)
	require.Len(t, steps, 1, "only step 4 runs: steps 1-3 come from the checkpoint")
	assert.Equal(t, 4.0, steps[0]["step"])

	// With --overwrite-output too, the restart keeps its own checkpoints.
	resumed.Steps, resumed.OverwriteOutput = 5, true
	out, msg, err := run(t, resumed)
	require.NoError(t, err)
	assert.NotContains(t, msg, "--overwrite-output: removed")
	steps, _, _ = records(t, out)
	require.NotEmpty(t, steps)
	assert.Greater(t, steps[0]["step"].(float64), 1.0, "resumed, not started again")

	// Another job's restart does not take this output as its own.
	t.Setenv("ONNXTRAIN_JOB_ID", "job-b")
	foreign := resumed
	foreign.OverwriteOutput = false
	_, _, err = run(t, foreign)
	require.ErrorIs(t, err, train.ErrOutputHoldsRun)
	assert.Contains(t, err.Error(), "does not name this job")
	assert.Contains(t, err.Error(), "job-b")

	// Nor does a first attempt refused for another run make its restart
	// accept that run: the refused attempt never named itself there.
	other := controlConfig(t)
	other.Output, other.Steps, other.CheckpointEvery = t.TempDir(), 2, 2
	t.Setenv("ONNXTRAIN_RESTART_COUNT", "0")
	t.Setenv("ONNXTRAIN_JOB_ID", "")
	_, _, err = run(t, other)
	require.NoError(t, err)
	t.Setenv("ONNXTRAIN_JOB_ID", "job-c")
	_, _, err = run(t, other)
	require.ErrorIs(t, err, train.ErrOutputHoldsRun, "attempt 0 of job-c")
	t.Setenv("ONNXTRAIN_RESTART_COUNT", "1")
	_, _, err = run(t, other)
	require.ErrorIs(t, err, train.ErrOutputHoldsRun, "restart 1 of job-c")
}

// A lock from another host (whose processes this one cannot see) is
// refused while its job refreshes it, and taken over once it has not been
// refreshed for train.LockStaleAfter, or at once with --force-unlock or
// --overwrite-output. On this host, a process id that now belongs to a
// later process does not keep a lock alive.
func TestOutputLockOfAnotherHost(t *testing.T) {
	cfg := controlConfig(t)
	var lock string
	// writeLock gives cfg a new --output holding a lock of host's pid,
	// last refreshed age ago.
	writeLock := func(host string, pid int, procStart uint64, age time.Duration) {
		cfg.Output = t.TempDir()
		lock = filepath.Join(cfg.Output, train.LockFileName)
		b, _ := json.Marshal(map[string]any{"pid": pid, "host": host, "started": "2026-01-01T00:00:00Z", "proc_start": procStart})
		require.NoError(t, os.WriteFile(lock, b, 0o644))
		at := time.Now().Add(-age)
		require.NoError(t, os.Chtimes(lock, at, at))
	}

	writeLock("node-elsewhere", 4242, 0, time.Minute)
	_, _, err := run(t, cfg)
	require.ErrorIs(t, err, train.ErrOutputInUse)
	assert.Contains(t, err.Error(), "locked by process 4242 on node-elsewhere")
	assert.Contains(t, err.Error(), "refreshed 1m0s ago")
	assert.Contains(t, err.Error(), "--force-unlock")
	assert.Contains(t, err.Error(), train.LockStaleAfter.String())
	assert.FileExists(t, lock, "another host's live lock stays")
	assert.NoFileExists(t, filepath.Join(cfg.Output, "model.onnx"))

	writeLock("node-elsewhere", 4242, 0, train.LockStaleAfter+time.Minute)
	_, msg, err := run(t, cfg)
	require.NoError(t, err)
	assert.Contains(t, msg, "not refreshed for 11m0s")
	assert.NoFileExists(t, lock, "the run removes the lock it took over")

	for _, force := range []func(*train.Config){
		func(c *train.Config) { c.ForceUnlock = true },
		func(c *train.Config) { c.OverwriteOutput = true },
	} {
		writeLock("node-elsewhere", 4242, 0, time.Minute)
		forced := cfg
		force(&forced)
		_, msg, err := run(t, forced)
		require.NoError(t, err)
		assert.Contains(t, msg, "taken from another host")
	}

	if runtime.GOOS != "linux" {
		return // process start times come from /proc
	}
	host, _ := os.Hostname()
	writeLock(host, os.Getppid(), 1, time.Minute) // alive, but started at another time
	_, msg, err = run(t, cfg)
	require.NoError(t, err)
	assert.Contains(t, msg, "now belongs to a process started later")
	// The live parent with its true start time keeps the lock, even
	// against --force-unlock.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", os.Getppid()))
	require.NoError(t, err)
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	start, err := strconv.ParseUint(fields[19], 10, 64)
	require.NoError(t, err)
	writeLock(host, os.Getppid(), start, time.Hour)
	forced := cfg
	forced.ForceUnlock = true
	_, _, err = run(t, forced)
	require.ErrorIs(t, err, train.ErrOutputInUse)
}
