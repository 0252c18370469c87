package train

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/cpu"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
)

// runCounter is the CPU backend with a count of every Run of every
// executable it compiled ("cpu-counting", registered by the tests).
type runCounter struct {
	cpu.Backend
	runs *atomic.Int64
}

type countedExe struct {
	*cpu.Executable
	runs *atomic.Int64
}

func (e countedExe) Run(ctx context.Context, in map[string]*graph.Tensor) (map[string]*graph.Tensor, error) {
	e.runs.Add(1)
	return e.Executable.Run(ctx, in)
}

func (b *runCounter) Name() string { return "cpu-counting" }

func (b *runCounter) Compile(m *graph.Model, opts backend.CompileOptions) (backend.Executable, error) {
	if c, ok := opts.ShareState.(countedExe); ok {
		opts.ShareState = c.Executable
	}
	exe, err := b.Backend.Compile(m, opts)
	if err != nil {
		return nil, err
	}
	return countedExe{exe.(*cpu.Executable), b.runs}, nil
}

var (
	countedRuns     atomic.Int64
	registerCounter sync.Once
)

func countingBackend() string {
	registerCounter.Do(func() {
		backend.Register("cpu-counting", func() (backend.Backend, error) { return &runCounter{runs: &countedRuns}, nil })
	})
	return "cpu-counting"
}

// TestFusedStepIsOneRun: with AcceleratorConfig.FusedStep a training step
// of the Accelerator loop (Forward, Backward, ClipGradNorm for the norm,
// ClipGradValue, the optimizer's Step) is one Run of one executable,
// moves no state byte between the program and the host (nor copies an
// update), keeps no gradient sums, and the optimizer's slots are program
// state; the separate path takes three Runs per step (micro-batch, norm,
// update) and keeps the sums.
func TestFusedStepIsOneRun(t *testing.T) {
	for _, fused := range []bool{true, false} {
		for _, opt := range []string{"sgd", "adamw"} {
			cfg := AcceleratorConfig{Backend: countingBackend(), FusedStep: fused}
			if fused {
				cfg.ClipGradValue = 0.5
			}
			r := newZeroRank(t, nil, cfg, zeroMLP, zeroMLPData, opt, 2)
			prog := r.model.Prog
			require.Equal(t, fused, prog.UpdateBound())
			require.NoError(t, r.train(1, 0))
			before := paramValues(r.model)
			runs := countedRuns.Load()
			require.NoError(t, r.train(4, 0))
			perStep := float64(countedRuns.Load()-runs) / 3
			if fused {
				assert.Equal(t, 1.0, perStep, "%s: Runs per optimizer step", opt)
				assert.Equal(t, backend.StateTraffic{}, prog.StateTraffic(), "%s: state bytes moved or copied", opt)
				st := prog.Executable().(backend.Stateful)
				for _, name := range st.StateNames() {
					assert.NotContains(t, name, "grad_sum", "no gradient sums are kept")
				}
				slot := "momentum_buffer"
				if opt == "adamw" {
					slot = "exp_avg_sq"
				}
				for _, p := range prog.Params {
					assert.Same(t, p.Value, st.HostState(p.Name), "%s: the host parameter is the state buffer", p.Name)
					assert.NotNil(t, st.HostState(p.Name+"/"+slot), "%s: the optimizer's %s is program state", p.Name, slot)
				}
				assert.Len(t, r.norms, 4, "a norm reported for each step")
				assert.Greater(t, r.norms[len(r.norms)-1], 0.0, "the step reports its gradient norm")
			} else {
				assert.Equal(t, 3.0, perStep, "%s: Runs per step of the separate path", opt)
			}
			assert.NotEqual(t, before, paramValues(r.model), "the steps trained")
			assert.Equal(t, 4, r.acc.Step())
		}
	}
}

// TestFusedStepRefusesWhatNeedsEveryGradient: gradient accumulation and
// clips other than the declared ones are errors that name the
// conflict.
func TestFusedStepRefusesWhatNeedsEveryGradient(t *testing.T) {
	_, err := NewAccelerator(AcceleratorConfig{FusedStep: true, GradAccum: 2})
	assert.ErrorContains(t, err, "--grad-accum 2")
	_, err = NewAccelerator(AcceleratorConfig{FusedStep: true, Zero: 1})
	assert.ErrorContains(t, err, "--zero 1")
	r := newZeroRank(t, nil, AcceleratorConfig{FusedStep: true}, zeroMLP, zeroMLPData, "sgd", 2)
	assert.ErrorContains(t, r.train(1, 1.0), "clipped to a norm of +Inf inside the step")
	assert.ErrorContains(t, r.acc.ClipGradValue(r.model, 0.1), "clipped by value at 0")
	m, err := importer.Load(zeroMLP)
	require.NoError(t, err)
	_, err = Build(m, ProgramConfig{Loss: LossConfig{Kind: "cross_entropy"}, FusedUpdate: true, GradSums: true})
	assert.ErrorContains(t, err, "GradSums")
}
