package cuda

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	_ "github.com/onnxtrain/onnxtrain/backend/cpu"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/internal/testutil"
	"github.com/onnxtrain/onnxtrain/train"
)

// planCheck is a backend for tests on machines without a GPU: it compiles
// every graph train builds (micro-batch step, optimizer step, clipping,
// unscaling, evaluation) with the CUDA planner, with the state declared
// as the CUDA executable would hold it, records the first error, and runs
// the graph on the CPU backend so that training goes on.
type planCheck struct {
	cpu backend.Backend

	mu     sync.Mutex
	err    error
	plans  int
	steps  map[string]int // kernels and GEMMs planned, by kind
	shapes map[string][]int
}

func (pc *planCheck) Name() string { return "cuda-plan-check" }
func (pc *planCheck) Supports(d, op string, o int64) bool {
	return pc.cpu.Supports(d, op, o)
}

type planCheckExe struct {
	pc    *planCheck
	m     *graph.Model
	g     *graph.Graph
	state map[string]*Buffer
	cpu   backend.Executable
	done  map[string]bool
}

func (pc *planCheck) Compile(m *graph.Model, opts backend.CompileOptions) (backend.Executable, error) {
	cpuOpts := opts
	if opts.ShareState != nil {
		cpuOpts.ShareState = opts.ShareState.(*planCheckExe).cpu
	}
	ce, err := pc.cpu.Compile(m, cpuOpts)
	if err != nil {
		return nil, err
	}
	g, err := prepareGraph(m)
	if err != nil {
		return nil, err
	}
	e := &planCheckExe{pc: pc, m: m, g: g, cpu: ce, state: map[string]*Buffer{}, done: map[string]bool{}}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	for _, sp := range opts.State {
		shape, ok := pc.shapes[sp.Name]
		if sp.Init != nil {
			shape, ok = sp.Init.Shape, true
			pc.shapes[sp.Name] = shape
		}
		require.True(nil, ok)
		dt := graph.Float32
		if sp.Init != nil {
			dt = sp.Init.DType
		}
		b := &Buffer{Name: sp.Name, Kind: BufState, DType: dt, Shape: shape}
		b.Bytes = b.Elements() * int64(dt.Size())
		e.state[sp.Name] = b
	}
	return e, nil
}

func (e *planCheckExe) Run(ctx context.Context, in map[string]*graph.Tensor) (map[string]*graph.Tensor, error) {
	shapes := graph.InputShapes(in)
	for name, b := range e.state {
		shapes[name] = b.Shape
	}
	if key := graph.ShapeKey(shapes); !e.done[key] {
		e.done[key] = true
		sg, types, err := specialise(e.g, e.m.Opset(), shapes, false)
		if err == nil {
			var p *Plan
			if p, err = buildPlan(sg, e.m.Opset(), types, e.state, true); err == nil {
				e.pc.mu.Lock()
				e.pc.plans++
				for _, s := range p.Steps {
					switch {
					case s.Launch != nil:
						e.pc.steps[s.Launch.Kernel]++
					case s.Gemm != nil:
						e.pc.steps["gemm/"+s.Gemm.DType.String()]++
					}
				}
				e.pc.mu.Unlock()
			}
		}
		if err != nil {
			e.pc.mu.Lock()
			if e.pc.err == nil {
				e.pc.err = err
			}
			e.pc.mu.Unlock()
		}
	}
	return e.cpu.Run(ctx, in)
}

// Stateful and RandomState pass through to the CPU executable.
func (e *planCheckExe) StateNames() []string { return e.cpu.(backend.Stateful).StateNames() }
func (e *planCheckExe) ReadState(n string, t *graph.Tensor) error {
	return e.cpu.(backend.Stateful).ReadState(n, t)
}
func (e *planCheckExe) WriteState(n string, t *graph.Tensor) error {
	return e.cpu.(backend.Stateful).WriteState(n, t)
}
func (e *planCheckExe) HostState(n string) *graph.Tensor {
	return e.cpu.(backend.Stateful).HostState(n)
}
func (e *planCheckExe) StateTraffic() backend.StateTraffic {
	return e.cpu.(backend.Stateful).StateTraffic()
}
func (e *planCheckExe) RandomState() ([]byte, error) {
	return e.cpu.(backend.RandomState).RandomState()
}
func (e *planCheckExe) SetRandomState(b []byte) error {
	return e.cpu.(backend.RandomState).SetRandomState(b)
}

var (
	planCheckOnce sync.Once
	thePlanCheck  = &planCheck{steps: map[string]int{}, shapes: map[string][]int{}}
)

// TestTrainingProgramsPlan trains each golden fixture for two steps
// (AdamW, gradient accumulation, clipping; float32 and bf16 autocast)
// through the plan-checking backend: every graph of the training program
// must plan for the GPU.
func TestTrainingProgramsPlan(t *testing.T) {
	testutil.SkipShort(t, "trains nine fixtures for two steps on the CPU")
	planCheckOnce.Do(func() {
		c, err := backend.Open("cpu")
		require.NoError(t, err)
		thePlanCheck.cpu = c
		backend.Register(thePlanCheck.Name(), func() (backend.Backend, error) { return thePlanCheck, nil })
	})
	files, err := filepath.Glob("../../models/*/train_golden.json")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		var gf struct {
			Model, Data string
			Configs     map[string]struct {
				Loss string `json:"loss"`
			}
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, &gf))
		dir := filepath.Dir(f)
		m, err := os.Stat(filepath.Join(dir, gf.Model))
		require.NoError(t, err)
		_ = m
		var loss string
		for _, c := range gf.Configs {
			loss = c.Loss
			break
		}
		for _, mp := range []string{"no", "bf16"} {
			t.Run(filepath.Base(dir)+"/"+mp, func(t *testing.T) {
				thePlanCheck.mu.Lock()
				thePlanCheck.err, thePlanCheck.plans = nil, 0
				thePlanCheck.steps = map[string]int{}
				thePlanCheck.mu.Unlock()
				cfg := train.DefaultConfig()
				cfg.Model, cfg.Data = filepath.Join(dir, gf.Model), filepath.Join(dir, gf.Data)
				cfg.Loss, cfg.Optimizer, cfg.LR = loss, "adamw", 1e-3
				cfg.BatchSize, cfg.GradAccum, cfg.Steps, cfg.ClipGradNorm = 4, 2, 2, 1
				cfg.Shuffle, cfg.LogFormat, cfg.MixedPrecision = false, "json", mp
				cfg.Backend = thePlanCheck.Name()
				_, err := train.Run(context.Background(), cfg, io.Discard, io.Discard)
				require.NoError(t, err)
				thePlanCheck.mu.Lock()
				defer thePlanCheck.mu.Unlock()
				if lackingLowering(mustLoad(t, cfg.Model)) != "" {
					require.ErrorIs(t, thePlanCheck.err, graph.ErrUnsupportedOp)
					t.Logf("not planned: %v", thePlanCheck.err)
					return
				}
				require.NoError(t, thePlanCheck.err)
				assert.GreaterOrEqual(t, thePlanCheck.plans, 2, "the step and the optimizer programs")
				assert.NotZero(t, thePlanCheck.steps["adam_update_f32"], "AdamW runs as the fused update")
				if mp == "bf16" {
					assert.NotZero(t, thePlanCheck.steps["gemm/bfloat16"], "autocast products run as bf16 GEMMs: %v", thePlanCheck.steps)
				}
			})
		}
	}
}
