package backendtest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/internal/repodata"
	"github.com/onnxtrain/onnxtrain/train"
)

// GoldenFile is models/<name>/train_golden.json, written by
// models/train_golden.py from PyTorch 1.13 (see models/TRAINING.md).
type GoldenFile struct {
	Model     string                  `json:"model"`
	Data      string                  `json:"data"`
	BatchSize int                     `json:"batch_size"`
	Inputs    []string                `json:"inputs"`
	Labels    string                  `json:"labels"`
	Configs   map[string]GoldenConfig `json:"configs"`
}

type GoldenConfig struct {
	Optimizer      string    `json:"optimizer"`
	LR             float64   `json:"lr"`
	Momentum       float64   `json:"momentum"`
	Betas          []float64 `json:"betas"`
	Eps            float64   `json:"eps"`
	WeightDecay    float64   `json:"weight_decay"`
	GradAccum      int       `json:"grad_accum"`
	MicroBatchSize int       `json:"micro_batch_size"`
	Steps          int       `json:"steps"`
	ClipGradNorm   float64   `json:"clip_grad_norm"`
	Loss           string    `json:"loss"`
	Losses         []float64 `json:"losses"`
	GradNorms      []float64 `json:"grad_norms"`
}

// trainingPyTorch runs every fixture's PyTorch traces through train.Run
// (the code path of `onnxtrain train --data case.npz --shuffle=false
// --log-format json`) on the backend and compares the per-step losses: the
// first to 1e-5 relative, every later one to 1e-3.
func (kc checker) trainingPyTorch(t *testing.T, mods ...func(*train.Config)) {
	files, err := filepath.Glob(filepath.Join(ModelsDir(t), "*", "train_golden.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		gf, names := ReadGolden(t, f)
		for _, name := range names {
			t.Run(filepath.Base(filepath.Dir(f))+"/"+name, func(t *testing.T) {
				CheckGolden(t, kc.backend, filepath.Dir(f), gf, gf.Configs[name], mods...)
			})
		}
	}
}

// trainingWinograd runs the convolutional fixtures' PyTorch traces (as
// trainingPyTorch does) with the compile option backend.Tuning.Winograd
// forced on, so that on a backend with the transform every 3×3 stride-1
// convolution, input gradient and filter gradient it can compute goes
// through it, and compares the per-step losses and gradient norms to the
// same tolerances. (The fixtures' layers are below the sizes where the
// automatic policy uses it; the CPU's own tests check that the option
// reaches its kernels.)
func (kc checker) trainingWinograd(t *testing.T) {
	force := func(c *train.Config) { c.Tuning.Winograd = backend.WinogradForce }
	for _, fixture := range []string{"resnet18_small", "cifar_resnet"} {
		dir := filepath.Join(ModelsDir(t), fixture)
		gf, names := ReadGolden(t, filepath.Join(dir, "train_golden.json"))
		for _, name := range names {
			t.Run(fixture+"/"+name, func(t *testing.T) {
				CheckGolden(t, kc.backend, dir, gf, gf.Configs[name], force)
			})
		}
	}
}

// ModelsDir is the repository's models/ folder (the committed fixtures and
// PyTorch goldens), found from the working directory.
func ModelsDir(t testing.TB) string {
	t.Helper()
	root := repodata.ModuleRoot()
	require.NotEmpty(t, root, "no go.mod at or above the working directory")
	return filepath.Join(root, "models")
}

// ReadGolden reads a train_golden.json and returns it with its config
// names in order.
func ReadGolden(t *testing.T, file string) (GoldenFile, []string) {
	t.Helper()
	var gf GoldenFile
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &gf))
	names := make([]string, 0, len(gf.Configs))
	for k := range gf.Configs {
		names = append(names, k)
	}
	sort.Strings(names)
	return gf, names
}

// CheckGolden trains the fixture in dir on one PyTorch trace with the
// backend registered under name and compares the per-step losses (the
// first to 1e-5 relative, later ones to 1e-3) and gradient norms (1e-3
// relative). mods change the configuration first (PrimitivesOnly, a
// compile option).
func CheckGolden(t *testing.T, name, dir string, gf GoldenFile, gc GoldenConfig, mods ...func(*train.Config)) {
	t.Helper()
	cfg := train.DefaultConfig()
	cfg.Backend = name
	cfg.Model = filepath.Join(dir, gf.Model)
	cfg.Data = filepath.Join(dir, gf.Data)
	cfg.Loss = gc.Loss
	cfg.Optimizer = gc.Optimizer
	cfg.LR = gc.LR
	cfg.Momentum = gc.Momentum
	cfg.WeightDecay = gc.WeightDecay
	if len(gc.Betas) == 2 {
		cfg.Beta1, cfg.Beta2 = gc.Betas[0], gc.Betas[1]
	}
	if gc.Eps != 0 {
		cfg.Eps = gc.Eps
	}
	cfg.GradAccum = gc.GradAccum
	cfg.BatchSize = gc.MicroBatchSize
	cfg.Steps = gc.Steps
	cfg.ClipGradNorm = gc.ClipGradNorm
	cfg.Shuffle = false
	cfg.LogFormat = "json"
	for _, mod := range mods {
		mod(&cfg)
	}
	var out bytes.Buffer
	sum, err := train.Run(context.Background(), cfg, &out, io.Discard)
	require.NoError(t, err)
	var recs []train.StepRecord
	dec := json.NewDecoder(&out)
	for dec.More() {
		var r train.StepRecord
		require.NoError(t, dec.Decode(&r))
		recs = append(recs, r)
	}
	require.Len(t, recs, len(gc.Losses))
	assert.Equal(t, len(gc.Losses), sum.Steps)
	for i, want := range gc.Losses {
		tol := 1e-3
		if i == 0 {
			tol = 1e-5
		}
		got := recs[i].Loss
		assert.LessOrEqual(t, math.Abs(got-want), tol*math.Abs(want), "step %d: loss %.7f, PyTorch %.7f", i+1, got, want)
	}
	for i, want := range gc.GradNorms {
		assert.InDelta(t, want, recs[i].GradNorm, 1e-3*want, "step %d grad norm", i+1)
	}
}
