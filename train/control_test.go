package train_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/internal/testutil"
	"github.com/onnxtrain/onnxtrain/tensorio"
	"github.com/onnxtrain/onnxtrain/train"
)

// controlConfig is a small MLP run with JSON logs.
func controlConfig(t *testing.T) train.Config {
	cfg := mlpConfig(mlpCase(t, 16, nil))
	cfg.Optimizer, cfg.LR, cfg.Momentum = "sgd", 0.05, 0.9
	cfg.Shuffle, cfg.Seed, cfg.LogFormat = true, 3, "json"
	return cfg
}

// records splits a JSON log into step and evaluation records (in order)
// and returns the raw lines too.
func records(t *testing.T, out string) (steps []map[string]any, evals []map[string]any, lines []string) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), "line %q", line)
		lines = append(lines, line)
		if _, ok := m["val_loss"]; ok {
			evals = append(evals, m)
		} else {
			steps = append(steps, m)
		}
	}
	return steps, evals, lines
}

func run(t *testing.T, cfg train.Config) (stdout, msg string, err error) {
	t.Helper()
	var out, m bytes.Buffer
	_, err = train.Run(context.Background(), cfg, &out, &m)
	return out.String(), m.String(), err
}

// Every numeric flag is range-checked, NaN included, and the error names it.
func TestNumericFlagRanges(t *testing.T) {
	nan := math.NaN()
	cases := map[string]func(*train.Config){
		"--steps":                   func(c *train.Config) { c.Steps = -3 },
		"--warmup-steps":            func(c *train.Config) { c.WarmupSteps = -10 },
		"--clip-grad-norm":          func(c *train.Config) { c.ClipGradNorm = nan },
		"--clip-grad-value":         func(c *train.Config) { c.ClipGradValue = math.Inf(1) },
		"--lr":                      func(c *train.Config) { c.LR = nan },
		"--momentum":                func(c *train.Config) { c.Momentum = -0.5 },
		"--weight-decay":            func(c *train.Config) { c.WeightDecay = nan },
		"--beta1":                   func(c *train.Config) { c.Beta1 = 1 },
		"--beta2":                   func(c *train.Config) { c.Beta2 = -0.1 },
		"--eps":                     func(c *train.Config) { c.Eps = 0 },
		"--gamma":                   func(c *train.Config) { c.Gamma = nan },
		"--epochs":                  func(c *train.Config) { c.Epochs = -1 },
		"--image-size":              func(c *train.Config) { c.ImageSize = -224 },
		"--random-crop":             func(c *train.Config) { c.RandomCrop = -4 },
		"--step-size":               func(c *train.Config) { c.StepSize = -1 },
		"--keep-last":               func(c *train.Config) { c.KeepLast = -2 },
		"--eval-every":              func(c *train.Config) { c.EvalEvery = -5 },
		"--log-every":               func(c *train.Config) { c.LogEvery = -1 },
		"--early-stopping-patience": func(c *train.Config) { c.EarlyStoppingPatience = -1 },
		"--bucket-mb":               func(c *train.Config) { c.BucketMB = nan },
		"--std":                     func(c *train.Config) { c.Std = []float64{0.5, 0} },
		"--mean":                    func(c *train.Config) { c.Mean = []float64{nan} },
		"--save-best":               func(c *train.Config) { c.SaveBest = "f1"; c.ValData, c.Output = c.Data, "x" },
	}
	for flag, mutate := range cases {
		t.Run(flag, func(t *testing.T) {
			cfg := train.DefaultConfig()
			cfg.Model, cfg.Data = "m.onnx", "d.npz"
			mutate(&cfg)
			err := cfg.Validate()
			require.Error(t, err)
			assert.True(t, strings.HasPrefix(err.Error(), flag+" "), "error %q does not start with %s", err, flag)
		})
	}
	ok := train.DefaultConfig()
	ok.Model, ok.Data = "m.onnx", "d.npz"
	require.NoError(t, ok.Validate(), "the defaults are valid")
}

// Keys of a YAML config may be written with underscores.
func TestYAMLUnderscoreKeys(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(p, []byte("batch_size: 7\ngrad_accum: 3\nloss: cross_entropy\nmixed-precision: bf16\n"), 0o644))
	cfg := train.DefaultConfig()
	require.NoError(t, train.LoadYAML(p, &cfg))
	assert.Equal(t, 7, cfg.BatchSize)
	assert.Equal(t, 3, cfg.GradAccum)
	assert.Equal(t, "cross_entropy", cfg.Loss, "values keep their underscores")
	assert.Equal(t, "bf16", cfg.MixedPrecision)

	require.NoError(t, os.WriteFile(p, []byte("batch_size: 7\nbatch-size: 8\n"), 0o644))
	err := train.LoadYAML(p, &cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"batch-size"`)

	require.NoError(t, os.WriteFile(p, []byte("batch_sise: 7\n"), 0o644))
	err = train.LoadYAML(p, &cfg)
	require.Error(t, err, "unknown keys are still refused")
	assert.Contains(t, err.Error(), "batch-sise")
}

// A second run into an --output that holds a run is refused, naming what
// it holds; --resume latest continues it; --overwrite-output replaces it
// (the old checkpoints are gone, so --resume latest cannot pick them up).
func TestOutputHoldingAnotherRun(t *testing.T) {
	cfg := controlConfig(t)
	cfg.Output, cfg.Steps, cfg.CheckpointEvery = t.TempDir(), 3, 3
	_, _, err := run(t, cfg)
	require.NoError(t, err)
	require.DirExists(t, filepath.Join(cfg.Output, "checkpoint-3"))

	again := cfg
	again.Steps, again.CheckpointEvery = 2, 1
	_, _, err = run(t, again)
	require.ErrorIs(t, err, train.ErrOutputHoldsRun)
	assert.Contains(t, err.Error(), "checkpoint-3")
	assert.Contains(t, err.Error(), "--overwrite-output")
	assert.DirExists(t, filepath.Join(cfg.Output, "checkpoint-3"), "a refused run touches nothing")

	resumed := cfg
	resumed.Steps, resumed.Resume = 4, "latest"
	out, _, err := run(t, resumed)
	require.NoError(t, err)
	steps, _, _ := records(t, out)
	require.Len(t, steps, 1)
	assert.Equal(t, 4.0, steps[0]["step"])

	again.OverwriteOutput = true
	_, msg, err := run(t, again)
	require.NoError(t, err)
	assert.Contains(t, msg, "--overwrite-output: removed")
	list, err := train.ListCheckpoints(cfg.Output)
	require.NoError(t, err)
	assert.Equal(t, []string{filepath.Join(cfg.Output, "checkpoint-1"), filepath.Join(cfg.Output, "checkpoint-2")}, list)
	latest, err := train.Latest(cfg.Output)
	require.NoError(t, err)
	st, err := train.LoadState(latest)
	require.NoError(t, err)
	assert.Equal(t, 2, st.Step, "--resume latest now finds the new run's checkpoint")
}

// A lock held by a live process refuses a second job; one left by a
// process that has ended is taken over; a finished run removes its lock.
func TestOutputLock(t *testing.T) {
	cfg := controlConfig(t)
	cfg.Output = t.TempDir()
	lock := filepath.Join(cfg.Output, train.LockFileName)
	host, _ := os.Hostname()
	writeLock := func(pid int) {
		b, _ := json.Marshal(map[string]any{"pid": pid, "host": host, "started": "2026-01-01T00:00:00Z"})
		require.NoError(t, os.WriteFile(lock, b, 0o644))
	}

	writeLock(os.Getppid()) // alive: the go command or the shell that runs the tests
	_, _, err := run(t, cfg)
	require.ErrorIs(t, err, train.ErrOutputInUse)
	assert.Contains(t, err.Error(), fmt.Sprintf("locked by process %d on %s", os.Getppid(), host))
	assert.Contains(t, err.Error(), lock)
	assert.FileExists(t, lock, "another job's lock stays")
	assert.NoFileExists(t, filepath.Join(cfg.Output, "model.onnx"))

	dead := exec.Command("true")
	require.NoError(t, dead.Run())
	writeLock(dead.Process.Pid) // ended
	_, msg, err := run(t, cfg)
	require.NoError(t, err)
	assert.Contains(t, msg, "taking over the lock")
	assert.NoFileExists(t, lock, "the run removes its lock when it ends")
	assert.FileExists(t, filepath.Join(cfg.Output, "model.onnx"))
}

// An --output that cannot be written, and validation data that cannot
// work, fail before the first step.
func TestEarlyChecksBeforeFirstStep(t *testing.T) {
	blocker := filepath.Join(t.TempDir(), "a-file")
	require.NoError(t, os.WriteFile(blocker, nil, 0o644))
	badLabels := mlpCase(t, 8, func(_ []float32, y []int64) { y[5] = 12 })
	wideInput := filepath.Join(t.TempDir(), "wide.npz")
	require.NoError(t, tensorio.WriteNPZ(wideInput, map[string]*graph.Tensor{
		"input": graph.Zeros(graph.Float32, 8, 785), "labels": graph.Zeros(graph.Int64, 8)}))
	cases := map[string]struct {
		mutate func(*train.Config)
		want   string
	}{
		"output under a file": {func(c *train.Config) { c.Output = filepath.Join(blocker, "run") }, "--output " + filepath.Join(blocker, "run") + " cannot be created"},
		"output is a file":    {func(c *train.Config) { c.Output = blocker }, "is a file"},
		"label out of range":  {func(c *train.Config) { c.ValData = badLabels }, "example 5 has label 12, outside the model's 10 classes"},
		"val input shape":     {func(c *train.Config) { c.ValData = wideInput }, `input "input" is float32[785] per example, but float32[784]`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := controlConfig(t)
			c.mutate(&cfg)
			out, _, err := run(t, cfg)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
			assert.Empty(t, out, "no step ran")
		})
	}
	// --ignore-index labels are fine.
	cfg := controlConfig(t)
	cfg.ValData = mlpCase(t, 8, func(_ []float32, y []int64) { y[2] = -100 })
	_, _, err := run(t, cfg)
	require.NoError(t, err)
}

// A validation pass with a NaN loss is a record with null, not a lost
// record, and the run succeeds; a log that cannot be written fails it.
func TestJSONNonFiniteIsNull(t *testing.T) {
	cfg := controlConfig(t)
	cfg.ValData = mlpCase(t, 8, func(x []float32, _ []int64) { x[3] = float32(math.NaN()) })
	out, _, err := run(t, cfg)
	require.NoError(t, err)
	_, evals, lines := records(t, out)
	require.Len(t, evals, 1, out)
	assert.Nil(t, evals[0]["val_loss"])
	assert.Contains(t, lines[len(lines)-1], `"val_loss":null`)
	assert.Contains(t, lines[len(lines)-1], `"val_samples":8`)

	_, err = train.Run(context.Background(), controlConfig(t), failingWriter{}, io.Discard)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "writing the JSON log")
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// --eval-every evaluates every N steps; --save-best keeps the best
// checkpoint besides the last --keep-last; JSON keeps one record per step.
func TestEvalEveryAndSaveBest(t *testing.T) {
	cfg := controlConfig(t)
	cfg.ValData = cfg.Data
	cfg.Output, cfg.Steps, cfg.EvalEvery, cfg.CheckpointEvery, cfg.KeepLast = t.TempDir(), 12, 3, 4, 1
	cfg.SaveBest, cfg.LR = "val_loss", 0.5 // a rate that overshoots: the best is not the last
	out, msg, err := run(t, cfg)
	require.NoError(t, err)
	steps, evals, _ := records(t, out)
	require.Len(t, steps, 12)
	require.Len(t, evals, 4)
	best, bestStep := math.Inf(1), 0
	for i, e := range evals {
		assert.Equal(t, float64(3*(i+1)), e["step"])
		if v := e["val_loss"].(float64); v < best {
			best, bestStep = v, 3*(i+1)
		}
	}
	list, err := train.ListCheckpoints(cfg.Output)
	require.NoError(t, err)
	want := []string{filepath.Join(cfg.Output, fmt.Sprintf("checkpoint-%d", bestStep))}
	if bestStep != 12 {
		want = append(want, filepath.Join(cfg.Output, "checkpoint-12"))
	}
	t.Logf("best val_loss %g at step %d", best, bestStep)
	assert.Equal(t, want, list, "the best and the last")
	assert.Contains(t, msg, fmt.Sprintf("best val_loss %.6g at step %d", best, bestStep))
	st, err := train.LoadState(want[0])
	require.NoError(t, err)
	assert.Equal(t, bestStep, st.Step)
}

// --early-stopping-patience stops after K evaluations without improvement
// (a zero learning rate never improves on the first evaluation).
func TestEarlyStopping(t *testing.T) {
	cfg := controlConfig(t)
	cfg.ValData, cfg.LR, cfg.Momentum = cfg.Data, 0, 0
	cfg.Steps, cfg.EvalEvery, cfg.EarlyStoppingPatience = 20, 2, 3
	out, msg, err := run(t, cfg)
	require.NoError(t, err)
	steps, evals, _ := records(t, out)
	assert.Len(t, steps, 8, "evaluations at 2 (best), 4, 6, 8: three without improvement")
	assert.Len(t, evals, 4)
	assert.Contains(t, msg, "early stopping at step 8")
}

// --log-every sets the text interval (the first and last steps are always
// printed).
func TestLogEvery(t *testing.T) {
	cfg := controlConfig(t)
	cfg.LogFormat, cfg.Steps, cfg.LogEvery = "text", 10, 3
	out, _, err := run(t, cfg)
	require.NoError(t, err)
	var got []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "step" {
			got = append(got, f[1])
		}
	}
	assert.Equal(t, []string{"1/10", "3/10", "6/10", "9/10", "10/10"}, got)
}

// A stop request finishes the step, logs it, writes checkpoint-<step> (no
// temporary folder left) and returns ErrStopped; resuming from it gives the
// uninterrupted run's losses exactly.
func TestStopRequestCheckpointsAndResumesExactly(t *testing.T) {
	base := controlConfig(t)
	base.Steps, base.BatchSize, base.GradAccum = 6, 4, 2
	straight := base
	straight.Output = t.TempDir()
	want := runJSON(t, straight)
	require.Len(t, want, 6)

	first := base
	first.Output = t.TempDir()
	stop := make(chan struct{})
	close(stop) // requested before the first step: it stops after step 1
	var out, msg bytes.Buffer
	_, err := train.Run(train.WithStopRequest(context.Background(), stop), first, &out, &msg)
	require.ErrorIs(t, err, train.ErrStopped)
	var stopped *train.StoppedError
	require.ErrorAs(t, err, &stopped)
	assert.Equal(t, 1, stopped.Step)
	ckpt := filepath.Join(first.Output, "checkpoint-1")
	assert.Equal(t, ckpt, stopped.Checkpoint)
	assert.Contains(t, msg.String(), "--resume latest")
	steps, _, _ := records(t, out.String())
	require.Len(t, steps, 1)
	assert.Equal(t, true, steps[0]["stopped"])
	entries, err := os.ReadDir(first.Output)
	require.NoError(t, err)
	for _, e := range entries {
		assert.NotContains(t, e.Name(), ".tmp-")
	}
	assert.NoFileExists(t, filepath.Join(first.Output, "model.onnx"), "a stopped run writes no final model")

	second := base
	second.Output, second.Resume = first.Output, "latest"
	got := runJSON(t, second)
	require.Len(t, got, 5)
	assert.Equal(t, want[0].Loss, steps[0]["loss"])
	for i, r := range got {
		assert.Equal(t, want[i+1].Loss, r.Loss, "step %d", r.Step)
		assert.Equal(t, want[i+1].Step, r.Step)
	}
}

// --resume latest names the damaged checkpoint it skips and loads the one
// before; a resume that changes the global batch says the data order
// changes.
func TestResumeLatestSkipsDamagedAndWarnsOnDataOrder(t *testing.T) {
	cfg := controlConfig(t)
	cfg.Output, cfg.Steps, cfg.CheckpointEvery = t.TempDir(), 3, 1
	_, _, err := run(t, cfg)
	require.NoError(t, err)
	// Same size, other bytes: the checksum catches it.
	p := filepath.Join(cfg.Output, "checkpoint-3", train.CheckpointModelFile)
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	b[len(b)-1] ^= 0xff
	require.NoError(t, os.WriteFile(p, b, 0o644))

	resumed := cfg
	resumed.Steps, resumed.Resume, resumed.CheckpointEvery, resumed.BatchSize = 5, "latest", 0, 8
	resumed.LogFormat = "text"
	_, msg, err := run(t, resumed)
	require.NoError(t, err)
	assert.Contains(t, msg, "skipped damaged checkpoint "+filepath.Join(cfg.Output, "checkpoint-3"))
	assert.Contains(t, msg, "SHA-256")
	assert.Contains(t, msg, "resumed from "+filepath.Join(cfg.Output, "checkpoint-2")+" at step 2")
	assert.Contains(t, msg, "the data order differs")
	assert.Contains(t, msg, "--batch-size 4 × 1 processes), now 8")

	same := cfg
	same.Steps, same.Resume, same.CheckpointEvery, same.LogFormat = 4, "latest", 0, "text"
	_, msg, err = run(t, same)
	require.NoError(t, err)
	assert.NotContains(t, msg, "data order")
}

// Requests larger than the machine's memory are errors naming the flag.
func TestOOMSizedRequestsNameTheFlag(t *testing.T) {
	if train.MachineMemory() == 0 {
		testutil.Skip(t, "the machine's memory is unknown here (not Linux)")
	}
	cfg := controlConfig(t)
	cfg.BatchSize = 1 << 40
	_, _, err := run(t, cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--batch-size 1099511627776 asks for")
	assert.Contains(t, err.Error(), "more than this machine's memory")

	img := controlConfig(t)
	img.ImageSize = 1 << 20
	_, _, err = run(t, img)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--image-size 1048576 asks for 12.0 TiB")
}

// A batch whose inputs fit but whose training step does not (a CNN's
// activations are many times its inputs) is refused before the first
// step, naming --batch-size, instead of dying of an out-of-memory error.
func TestBatchWhoseStepCannotFit(t *testing.T) {
	have := train.MachineMemory()
	if have == 0 {
		testutil.Skip(t, "the machine's memory is unknown here (not Linux)")
	}
	cfg := train.DefaultConfig()
	cfg.Model, cfg.Data = "../models/fmnist_cnn/fmnist_cnn_train.onnx", "../models/fmnist_cnn/train_case.npz"
	cfg.Steps, cfg.LogFormat = 1, "json"
	// Inputs: 3 KiB per example, 4 batches held: 0.3 of memory. The
	// step's activations: about 75 KiB per example, twice memory.
	cfg.BatchSize = int(have / (40 << 10))
	out, _, err := run(t, cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), fmt.Sprintf("--batch-size %d needs about", cfg.BatchSize))
	assert.Contains(t, err.Error(), "planned from the batch's shapes")
	assert.Contains(t, err.Error(), "more than this machine's memory")
	assert.Empty(t, out)
	t.Log(err)
}

// The best value and the evaluations since it travel in the checkpoint:
// a resumed run keeps counting towards --early-stopping-patience.
func TestEarlyStoppingCountSurvivesResume(t *testing.T) {
	cfg := controlConfig(t)
	cfg.ValData, cfg.LR, cfg.Momentum = cfg.Data, 0, 0
	cfg.Output, cfg.Steps, cfg.EvalEvery, cfg.EarlyStoppingPatience, cfg.CheckpointEvery = t.TempDir(), 4, 2, 3, 4
	_, _, err := run(t, cfg) // evaluations at 2 (the best) and 4 (one without improvement)
	require.NoError(t, err)
	resumed := cfg
	resumed.Steps, resumed.Resume, resumed.CheckpointEvery = 20, "latest", 0
	out, msg, err := run(t, resumed)
	require.NoError(t, err)
	steps, evals, _ := records(t, out)
	assert.Len(t, steps, 4, "steps 5–8: evaluations at 6 and 8 make three without improvement")
	assert.Len(t, evals, 2)
	assert.Contains(t, msg, "early stopping at step 8")
	assert.Contains(t, msg, "(step 2)", "the best is still the first run's")
}

// A validation pass of a loss that is not a classification logs its loss
// and no accuracy (no made-up 0.00%), in JSON and in text.
func TestValidationOfMSELogsNoAccuracy(t *testing.T) {
	for _, format := range []string{"json", "text"} {
		cfg := train.DefaultConfig()
		cfg.Model = filepath.Join("..", "models", "mlp", "mlp_train.onnx")
		cfg.Data = writeMSEData(t)
		cfg.ValData = cfg.Data
		cfg.Loss = "mse"
		cfg.Labels = "target"
		cfg.BatchSize, cfg.Epochs, cfg.LogFormat = 8, 1, format
		var out bytes.Buffer
		_, err := train.Run(context.Background(), cfg, &out, io.Discard)
		require.NoError(t, err)
		assert.Contains(t, out.String(), "val_loss", format)
		assert.NotContains(t, out.String(), "val_accuracy", format)
	}
}

// writeMSEData writes 16 MLP inputs with 10-wide regression targets.
func writeMSEData(t *testing.T) string {
	t.Helper()
	x, err := graph.NewTensor(graph.Float32, []int{16, 784})
	require.NoError(t, err)
	y, err := graph.NewTensor(graph.Float32, []int{16, 10})
	require.NoError(t, err)
	for i := range x.Float32s() {
		x.Float32s()[i] = float32(i%7) / 7
	}
	for i := range y.Float32s() {
		y.Float32s()[i] = float32(i%3) - 1
	}
	p := filepath.Join(t.TempDir(), "mse.npz")
	require.NoError(t, tensorio.WriteNPZ(p, map[string]*graph.Tensor{"input": x, "target": y}))
	return p
}
