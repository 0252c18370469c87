package train_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/tensorio"
	"github.com/onnxtrain/onnxtrain/train"
)

// TestTrainingMatchesPyTorchPrimitivesOnly is TestTrainingMatchesPyTorch
// with the backend restricted to the primitive and extended sets
// (Config.PrimitivesOnly): every op outside them runs in its lowered form,
// and the per-step losses and gradient norms still match PyTorch's within
// the same tolerances.
func TestTrainingMatchesPyTorchPrimitivesOnly(t *testing.T) {
	files, err := filepath.Glob("../models/*/train_golden.json")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	primitivesOnly := func(c *train.Config) { c.PrimitivesOnly = true }
	for _, f := range files {
		gf, names := readGolden(t, f)
		for _, name := range names {
			t.Run(filepath.Base(filepath.Dir(f))+"/"+name, func(t *testing.T) {
				checkGolden(t, filepath.Dir(f), gf, gf.Configs[name], primitivesOnly)
			})
		}
	}
}

// goldenPrimitiveGaps are the ops the golden training graphs still run
// with their own kernel under PrimitivesOnly, per fixture (docs/primitives.md,
// "Gaps"). A fixture not listed has none.
var goldenPrimitiveGaps = map[string][]string{}

// TestGoldenTrainingStepsRunAsPrimitives compiles each golden fixture's
// training step with PrimitivesOnly, runs it on the fixture's first batch,
// and lists the ops the CPU backend still ran with a kernel outside the
// primitive and extended sets: they must be exactly the ones
// goldenPrimitiveGaps names.
func TestGoldenTrainingStepsRunAsPrimitives(t *testing.T) {
	files, err := filepath.Glob("../models/*/train_golden.json")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		gf, names := readGolden(t, f)
		dir := filepath.Dir(f)
		fixture := filepath.Base(dir)
		t.Run(fixture, func(t *testing.T) {
			gc := gf.Configs[names[0]]
			m, err := importer.Load(filepath.Join(dir, gf.Model))
			require.NoError(t, err)
			loss, err := train.ParseLoss(gc.Loss)
			require.NoError(t, err)
			p, err := train.Build(m, train.ProgramConfig{Loss: loss, Seed: 1, PrimitivesOnly: true})
			require.NoError(t, err)
			arrays, err := tensorio.ReadNPZ(filepath.Join(dir, gf.Data))
			require.NoError(t, err)
			inputs := map[string]*graph.Tensor{}
			for _, name := range gf.Inputs {
				inputs[name] = firstRows(t, arrays[name], gc.MicroBatchSize)
			}
			var labels *graph.Tensor
			if gf.Labels != "" && p.NeedsLabels {
				labels = firstRows(t, arrays[gf.Labels], gc.MicroBatchSize)
			}
			_, err = p.ForwardBackward(context.Background(), inputs, labels, 1)
			require.NoError(t, err)
			ce, ok := p.Executable().(*cpu.Executable)
			require.True(t, ok)
			want := goldenPrimitiveGaps[fixture]
			if want == nil {
				want = []string{}
			}
			assert.Equal(t, want, ce.PrimitiveGaps(), "%s: ops run by their own kernel under PrimitivesOnly", fixture)
		})
	}
}

// firstRows is the first n rows of t (all of it when it has fewer).
func firstRows(t *testing.T, x *graph.Tensor, n int) *graph.Tensor {
	t.Helper()
	require.NotNil(t, x)
	if n <= 0 || n >= x.Shape[0] {
		return x
	}
	per := x.Size() / x.Shape[0]
	shape := append([]int{n}, x.Shape[1:]...)
	out := graph.Zeros(x.DType, shape...)
	for i := 0; i < n*per; i++ {
		out.SetFloat(i, x.Float(i))
	}
	return out
}
