package train_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

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
