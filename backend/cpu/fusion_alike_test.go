package cpu_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/backendtest"
	"github.com/onnxtrain/onnxtrain/backend/cpu"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/tensorio"
	"github.com/onnxtrain/onnxtrain/train"
)

// registerCPUWithout registers backend name: the CPU backend with every
// fused op it declares but those in without, so that a test can run the
// same step with and without some fusions.
func registerCPUWithout(name string, without []string) {
	backend.Register(name, func() (backend.Backend, error) {
		var ops []string
		for _, op := range (&cpu.Backend{}).FusedOps() {
			if !slices.Contains(without, op) {
				ops = append(ops, op)
			}
		}
		return &cpu.Backend{FusedOnly: ops}, nil
	})
}

// fixtureSteps is what three training steps (forward, loss, backward) of
// a committed fixture gave on one backend: each step's loss and gradients,
// the BatchNorm running statistics after them, and how many nodes of each
// op the last run executed.
type fixtureSteps struct {
	losses []float64
	grads  [][]*graph.Tensor
	stats  map[string]*graph.Tensor
	ops    map[string]int
}

// runFixtureSteps runs three steps of models/fixture's golden
// configuration on backend be.
func runFixtureSteps(t *testing.T, fixture, be string) fixtureSteps {
	t.Helper()
	dir := filepath.Join("..", "..", "models", fixture)
	gf, names := backendtest.ReadGolden(t, filepath.Join(dir, "train_golden.json"))
	gc := gf.Configs[names[0]]
	arrays, err := tensorio.ReadNPZ(filepath.Join(dir, gf.Data))
	require.NoError(t, err)
	m, err := importer.Load(filepath.Join(dir, gf.Model))
	require.NoError(t, err)
	loss, err := train.ParseLoss(gc.Loss)
	require.NoError(t, err)
	p, err := train.Build(m, train.ProgramConfig{Loss: loss, Seed: 1, Backend: be})
	require.NoError(t, err)
	out := fixtureSteps{stats: map[string]*graph.Tensor{}, ops: map[string]int{}}
	for s := 0; s < 3; s++ {
		inputs := map[string]*graph.Tensor{}
		for _, name := range gf.Inputs {
			inputs[name] = rowsAt(t, arrays[name], s, gc.MicroBatchSize)
		}
		var labels *graph.Tensor
		if gf.Labels != "" && p.NeedsLabels {
			labels = rowsAt(t, arrays[gf.Labels], s, gc.MicroBatchSize)
		}
		res, err := p.ForwardBackward(context.Background(), inputs, labels, 1)
		require.NoError(t, err)
		var grads []*graph.Tensor
		for _, g := range res.Grads {
			grads = append(grads, g.Clone())
		}
		out.losses = append(out.losses, res.Loss)
		out.grads = append(out.grads, grads)
	}
	for _, n := range p.Executable().(backend.PlanInspector).LastRunNodes() {
		out.ops[n.OpType]++
	}
	sf := p.Executable().(backend.Stateful)
	for _, name := range sf.StateNames() {
		if strings.HasSuffix(name, "running_mean") || strings.HasSuffix(name, "running_var") {
			v := sf.HostState(name)
			require.NotNil(t, v, name)
			out.stats[name] = v.Clone()
		}
	}
	return out
}

// requireSameSteps checks that two runs gave the same bits (losses,
// gradients, running statistics) and that plain ran none of fusedOps.
func requireSameSteps(t *testing.T, plain, fused fixtureSteps, fusedOps []string) {
	t.Helper()
	for _, op := range fusedOps {
		assert.Zero(t, plain.ops[op], op)
	}
	require.Len(t, fused.losses, len(plain.losses))
	for s := range fused.losses {
		assert.Equal(t, plain.losses[s], fused.losses[s], "step %d loss", s)
		require.Len(t, fused.grads[s], len(plain.grads[s]))
		for i := range fused.grads[s] {
			assert.Equal(t, plain.grads[s][i].Float32s(), fused.grads[s][i].Float32s(), "step %d gradient %d", s, i)
		}
	}
	require.Len(t, fused.stats, len(plain.stats))
	for name, v := range plain.stats {
		require.Contains(t, fused.stats, name)
		assert.Equal(t, v.Float32s(), fused.stats[name].Float32s(), name)
	}
}

// rowsAt is rows [s·n, (s+1)·n) of x, wrapping around its first dimension.
func rowsAt(t *testing.T, x *graph.Tensor, s, n int) *graph.Tensor {
	t.Helper()
	require.NotNil(t, x)
	rows := x.Shape[0]
	if n <= 0 || n > rows {
		n = rows
	}
	per := x.Size() / rows
	out := graph.Zeros(x.DType, append([]int{n}, x.Shape[1:]...)...)
	for r := 0; r < n; r++ {
		src := ((s*n + r) % rows) * per
		for i := 0; i < per; i++ {
			out.SetFloat(r*per+i, x.Float(src+i))
		}
	}
	return out
}
