package cuda

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/internal/testutil"
	"github.com/onnxtrain/onnxtrain/train"
)

// emuBackend runs the CUDA backend's plans in the host emulator, state
// included: what train builds (step, optimizer, clipping programs sharing
// state) runs as the GPU would run it, minus the CUDA C.
type emuBackend struct{}

func (emuBackend) Name() string { return "cuda-emulated" }
func (emuBackend) Supports(d, op string, o int64) bool {
	return (&Backend{}).Supports(d, op, o)
}

type emuStore struct {
	m    *emuMem
	next uint64
	bufs map[string]*Buffer
}

type emuExe struct {
	m      *graph.Model
	g      *graph.Graph
	store  *emuStore
	state  map[string]bool
	update []stateUpdate
	plans  map[string]*Plan
}

func (emuBackend) Compile(m *graph.Model, opts backend.CompileOptions) (backend.Executable, error) {
	g, err := prepareGraph(m)
	if err != nil {
		return nil, err
	}
	e := &emuExe{m: m, g: g, state: map[string]bool{}, plans: map[string]*Plan{}}
	if opts.ShareState != nil {
		e.store = opts.ShareState.(*emuExe).store
	} else {
		e.store = &emuStore{m: &emuMem{}, next: 1 << 32, bufs: map[string]*Buffer{}}
	}
	for _, sp := range opts.State {
		if _, ok := e.store.bufs[sp.Name]; !ok {
			b := &Buffer{Name: sp.Name, Kind: BufState, DType: sp.Init.DType, Shape: append([]int{}, sp.Init.Shape...)}
			b.Bytes = b.Elements() * int64(sp.Init.DType.Size())
			b.Addr = DevicePtr(e.store.next)
			e.store.m.add(e.store.next, b.Bytes)
			e.store.next += uint64(alignUp(b.Bytes+1, 1<<16))
			copy(e.store.m.at(uint64(b.Addr)), hostBytes(sp.Init))
			e.store.bufs[sp.Name] = b
		}
		e.state[sp.Name] = true
		if sp.UpdatedBy != "" {
			e.update = append(e.update, stateUpdate{output: sp.UpdatedBy, state: sp.Name})
		}
	}
	return e, nil
}

func (e *emuExe) Run(ctx context.Context, in map[string]*graph.Tensor) (map[string]*graph.Tensor, error) {
	shapes := graph.InputShapes(in)
	state := map[string]*Buffer{}
	for name := range e.state {
		shapes[name] = e.store.bufs[name].Shape
		state[name] = e.store.bufs[name]
	}
	key := graph.ShapeKey(shapes)
	p, ok := e.plans[key]
	if !ok {
		sg, types, err := specialise(e.g, e.m.Opset(), shapes, false)
		if err != nil {
			return nil, err
		}
		if p, err = buildPlan(sg, e.m.Opset(), types, state, true); err != nil {
			return nil, err
		}
		emuBind(p, e.store.m, &e.store.next)
		e.plans[key] = p
	}
	out, err := emuExec(p, e.store.m, in)
	if err != nil {
		return nil, err
	}
	for _, u := range e.update {
		src, dst := p.values[u.output], e.store.bufs[u.state]
		if src.root() != dst {
			copy(e.store.m.at(uint64(dst.Addr))[:dst.Bytes], e.store.m.at(uint64(src.addr()))[:dst.Bytes])
		}
		delete(out, u.output)
	}
	return out, nil
}

func (e *emuExe) StateNames() []string {
	var out []string
	for k := range e.store.bufs {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (e *emuExe) ReadState(name string, dst *graph.Tensor) error {
	b, ok := e.store.bufs[name]
	if !ok {
		return fmt.Errorf("no state %q", name)
	}
	t, err := emuDownload(e.store.m, b)
	if err != nil {
		return err
	}
	copy(graph.ElementBytes(dst.Data), graph.ElementBytes(t.Data))
	return nil
}

func (e *emuExe) WriteState(name string, src *graph.Tensor) error {
	b, ok := e.store.bufs[name]
	if !ok {
		return fmt.Errorf("no state %q", name)
	}
	copy(e.store.m.at(uint64(b.Addr)), hostBytes(src))
	return nil
}
func (e *emuExe) HostState(string) *graph.Tensor     { return nil }
func (e *emuExe) StateTraffic() backend.StateTraffic { return backend.StateTraffic{} }

var emuOnce sync.Once

// TestEmulatedTrainingMatchesCPU trains fixtures for three steps (two
// micro-batches each, clipping, SGD with momentum and AdamW) through the
// CUDA planner and the emulator, and compares each step's loss and
// gradient norm with the CPU backend's: the backward graphs, the fused
// optimizer updates in place on state, accumulation and clipping as the
// GPU would run them.
func TestEmulatedTrainingMatchesCPU(t *testing.T) {
	testutil.SkipShort(t, "trains fixtures twice on the CPU, once emulated")
	emuOnce.Do(func() {
		backend.Register(emuBackend{}.Name(), func() (backend.Backend, error) { return emuBackend{}, nil })
	})
	run := func(t *testing.T, be, model, opt string) []train.StepRecord {
		cfg := train.DefaultConfig()
		cfg.Backend = be
		cfg.Model = filepath.Join("../../models", model, model+"_train.onnx")
		cfg.Data = filepath.Join("../../models", model, "train_case.npz")
		cfg.Loss, cfg.Optimizer, cfg.LR, cfg.Momentum = "cross_entropy", opt, 0.01, 0.9
		if opt == "adamw" {
			cfg.LR = 1e-3
		}
		cfg.BatchSize, cfg.GradAccum, cfg.Steps, cfg.ClipGradNorm = 4, 2, 3, 1
		cfg.Shuffle, cfg.LogFormat = false, "json"
		var out bytes.Buffer
		_, err := train.Run(context.Background(), cfg, &out, io.Discard)
		require.NoError(t, err)
		var recs []train.StepRecord
		dec := json.NewDecoder(&out)
		for dec.More() {
			var r train.StepRecord
			require.NoError(t, dec.Decode(&r))
			recs = append(recs, r)
		}
		return recs
	}
	// (resnet18_small's training is minutes in the emulator's plain loops.)
	for _, model := range []string{"mlp", "fmnist_cnn", "vit_tiny"} {
		for _, opt := range []string{"sgd", "adamw"} {
			t.Run(model+"/"+opt, func(t *testing.T) {
				want := run(t, "cpu", model, opt)
				got := run(t, emuBackend{}.Name(), model, opt)
				require.Len(t, got, len(want))
				for i := range want {
					assert.InEpsilon(t, want[i].Loss, got[i].Loss, 1e-4, "step %d loss", i+1)
					assert.InEpsilon(t, want[i].GradNorm, got[i].GradNorm, 1e-3, "step %d grad norm", i+1)
				}
			})
		}
	}
}
