package train_test

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

	_ "github.com/onnxtrain/onnxtrain/backend/cpu"
	"github.com/onnxtrain/onnxtrain/train"
)

// goldenFile is models/<name>/train_golden.json, written by
// models/train_golden.py from PyTorch 1.13 (see models/TRAINING.md).
type goldenFile struct {
	Model     string                  `json:"model"`
	Data      string                  `json:"data"`
	BatchSize int                     `json:"batch_size"`
	Inputs    []string                `json:"inputs"`
	Labels    string                  `json:"labels"`
	Configs   map[string]goldenConfig `json:"configs"`
}

type goldenConfig struct {
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

// TestTrainingMatchesPyTorch runs every fixture's PyTorch traces through
// train.Run (the code path of `onnxtrain train --data case.npz --shuffle=false
// --log-format json`) and compares the per-step losses: the first to 1e-5
// relative, every later one to 1e-3.
func TestTrainingMatchesPyTorch(t *testing.T) {
	files, err := filepath.Glob("../models/*/train_golden.json")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		gf, names := readGolden(t, f)
		for _, name := range names {
			t.Run(filepath.Base(filepath.Dir(f))+"/"+name, func(t *testing.T) {
				checkGolden(t, filepath.Dir(f), gf, gf.Configs[name])
			})
		}
	}
}

// readGolden reads a train_golden.json and returns it with its config
// names in order.
func readGolden(t *testing.T, file string) (goldenFile, []string) {
	t.Helper()
	var gf goldenFile
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

// checkGolden trains the fixture in dir on one PyTorch trace and compares
// the per-step losses (the first to 1e-5 relative, later ones to 1e-3) and
// gradient norms (1e-3 relative).
func checkGolden(t *testing.T, dir string, gf goldenFile, gc goldenConfig, mods ...func(*train.Config)) {
	t.Helper()
	cfg := train.DefaultConfig()
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
