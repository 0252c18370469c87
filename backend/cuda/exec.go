package cuda

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/graph"
)

// stateStore holds device state buffers shared by executables
// (CompileOptions.ShareState).
type stateStore struct {
	mu   sync.Mutex
	bufs map[string]*Buffer

	readBytes, writeBytes, updateBytes atomic.Int64
}

type stateUpdate struct{ output, state string }

// Executable is a compiled graph on the GPU.
type Executable struct {
	b      *Backend
	opset  int64
	opts   backend.CompileOptions
	g      *graph.Graph
	store  *stateStore
	state  map[string]bool
	update []stateUpdate

	// m is the model compiled, for the host fallback.
	m *graph.Model
	// host runs graphs the GPU plan cannot (strings, sequences, control
	// flow, ops with no kernel and no lowering) on the CPU backend, for
	// executables without state; hostReason is why.
	host       backend.Executable
	hostReason string

	mu    sync.Mutex
	plans map[string]*boundPlan
	runs  uint64
	// graphs turns CUDA-graph capture on (Backend default, SetGraphCapture).
	graphs bool
}

type boundPlan struct {
	p             *Plan
	arena, consts DevicePtr
	graphExec     uintptr
	eagerRuns     int
	updatedState  map[string]bool // outputs that update state (not returned)
}

// Compile implements backend.Backend.
func (b *Backend) Compile(m *graph.Model, opts backend.CompileOptions) (backend.Executable, error) {
	g, err := prepareGraph(m)
	if err != nil {
		return nil, err
	}
	e := &Executable{b: b, opset: m.Opset(), opts: opts, g: g, m: m, plans: map[string]*boundPlan{}, graphs: b.graphs}
	b.mu.Lock()
	defer b.mu.Unlock()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := b.ctx.makeCurrent(); err != nil {
		return nil, err
	}
	if err := e.initState(opts); err != nil {
		return nil, err
	}
	if opts.StaticShapes {
		if _, err := e.planFor(nil); err != nil {
			if ferr := e.fallBack(err); ferr != nil {
				return nil, ferr
			}
		}
	}
	return e, nil
}

// fallBack moves an executable without state to the CPU backend when its
// graph cannot be planned for the GPU (an op or dtype without a kernel, a
// graph that does not specialise to static shapes); errors of the device
// itself (cuError, cublasError), and executables with state (whose buffers
// live on the GPU), keep the error.
func (e *Executable) fallBack(planErr error) error {
	var ce *cuError
	var be *cublasError
	if errors.As(planErr, &ce) || errors.As(planErr, &be) || e.store != nil || os.Getenv(EnvHostFallback) == "0" {
		return planErr
	}
	cpu, err := backend.Open("cpu")
	if err != nil {
		return fmt.Errorf("%w (and no CPU backend to fall back to: %v)", planErr, err)
	}
	host, err := cpu.Compile(e.m, e.opts)
	if err != nil {
		return fmt.Errorf("%w (the CPU fallback failed too: %v)", planErr, err)
	}
	e.host, e.hostReason = host, planErr.Error()
	return nil
}

// HostFallback says why the executable runs on the CPU backend ("" when
// it runs on the GPU).
func (e *Executable) HostFallback() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.hostReason
}

// prepareGraph is the backend-neutral part of compiling: functions
// inlined, nodes sorted, Gradient ops expanded by autodiff.
func prepareGraph(m *graph.Model) (*graph.Graph, error) {
	c := *m.Graph
	c.Nodes = append([]*graph.Node{}, m.Graph.Nodes...)
	c.Initializers = make(map[string]*graph.Tensor, len(m.Graph.Initializers))
	for k, v := range m.Graph.Initializers {
		c.Initializers[k] = v
	}
	g := &c
	if err := graph.InlineFunctions(g, m.Functions); err != nil {
		return nil, fmt.Errorf("cuda: %w", err)
	}
	if err := graph.TopoSort(g); err != nil {
		return nil, fmt.Errorf("cuda: %w", err)
	}
	if err := graph.ExpandGradientOps(g, m.Opset()); err != nil {
		return nil, fmt.Errorf("cuda: %w", err)
	}
	return g, nil
}

// specialise returns g for the given input shapes, lowered to what the
// planner runs, with every value's type.
func specialise(g *graph.Graph, opset int64, shapes map[string][]int, primitivesOnly bool) (*graph.Graph, map[string]*graph.Type, error) {
	sg, err := graph.Specialize(g, opset, shapes, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("cuda: %w", err)
	}
	if err := graph.LowerGraphFallback(sg, opset, func(n *graph.Node) bool { return hasKernel(n, primitivesOnly) }, nil); err != nil {
		return nil, nil, fmt.Errorf("cuda: %w", err)
	}
	known := map[string]*graph.Type{}
	for _, in := range sg.Inputs {
		known[in.Name] = in.Type
	}
	types, err := graph.InferShapes(sg, opset, known)
	if err != nil {
		return nil, nil, fmt.Errorf("cuda: %w", err)
	}
	return sg, types, nil
}

// planFor returns the bound plan for the fed shapes (nil: the declared
// ones), planning and allocating it on first use.
func (e *Executable) planFor(shapes map[string][]int) (*boundPlan, error) {
	all := map[string][]int{}
	for k, v := range shapes {
		all[k] = v
	}
	for name := range e.state {
		all[name] = e.store.bufs[name].Shape
	}
	key := graph.ShapeKey(all)
	if bp, ok := e.plans[key]; ok {
		return bp, nil
	}
	sg, types, err := specialise(e.g, e.opset, all, e.opts.PrimitivesOnly || e.opts.DisableFused)
	if err != nil {
		return nil, err
	}
	state := map[string]*Buffer{}
	for name := range e.state {
		state[name] = e.store.bufs[name]
	}
	p, err := buildPlan(sg, e.opset, types, state, !e.opts.PrimitivesOnly)
	if err != nil {
		return nil, err
	}
	bp := &boundPlan{p: p, updatedState: map[string]bool{}}
	for _, u := range e.update {
		bp.updatedState[u.output] = true
	}
	c := e.b.ctx
	if bp.arena, err = c.Alloc(p.ArenaBytes); err != nil {
		return nil, err
	}
	if bp.consts, err = c.Alloc(p.ConstBytes); err != nil {
		return nil, err
	}
	for _, b := range p.arena {
		b.Addr = bp.arena + DevicePtr(b.Offset)
	}
	for _, b := range p.Consts {
		b.Addr = bp.consts + DevicePtr(b.Offset)
		if err := c.Upload(b.Addr, hostBytes(b.Const)); err != nil {
			return nil, fmt.Errorf("cuda: constant %q: %w", b.Name, err)
		}
	}
	e.plans[key] = bp
	return bp, nil
}

// hostBytes is a tensor's elements as bytes (bool as 0/1 bytes).
func hostBytes(t *graph.Tensor) []byte {
	if bs, ok := t.Data.([]bool); ok {
		out := make([]byte, len(bs))
		for i, v := range bs {
			if v {
				out[i] = 1
			}
		}
		return out
	}
	return graph.ElementBytes(t.Data)
}

// Run implements backend.Executable.
func (e *Executable) Run(ctx context.Context, inputs map[string]*graph.Tensor) (map[string]*graph.Tensor, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for name := range inputs {
		if e.state[name] {
			return nil, fmt.Errorf("cuda: input %q is state the executable owns; do not feed it", name)
		}
	}
	e.mu.Lock()
	host := e.host
	e.mu.Unlock()
	if host != nil {
		return host.Run(ctx, inputs)
	}
	e.b.mu.Lock()
	defer e.b.mu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c := e.b.ctx
	if err := c.makeCurrent(); err != nil {
		return nil, err
	}
	bp, err := e.planFor(graph.InputShapes(inputs))
	if err != nil {
		if ferr := e.fallBack(err); ferr != nil {
			return nil, ferr
		}
		return e.host.Run(ctx, inputs)
	}
	p := bp.p
	for name, buf := range p.Inputs {
		t, ok := inputs[name]
		if !ok {
			return nil, fmt.Errorf("cuda: input %q not fed", name)
		}
		if t.DType != buf.DType {
			return nil, fmt.Errorf("cuda: input %q is %v, the graph declares %v", name, t.DType, buf.DType)
		}
		if err := c.Upload(buf.Addr, hostBytes(t)); err != nil {
			return nil, fmt.Errorf("cuda: input %q: %w", name, err)
		}
	}
	if p.Random {
		for k, i := range p.RandomLaunches {
			l := p.Steps[i].Launch
			seed, off := 2, 3 // random_uniform_f32
			if l.Kernel == "dropout_f32" {
				seed, off = 4, 5
			}
			l.Args[seed].I = e.opts.Seed
			l.Args[off].I = int64(e.runs)*p.RandomPerRun + p.RandomBase[k]
		}
	}
	e.runs++
	if err := e.runSteps(bp); err != nil {
		return nil, err
	}
	for _, u := range e.update {
		src := p.values[u.output]
		dst := e.store.bufs[u.state]
		if src.root() == dst {
			continue
		}
		if err := c.Copy(dst.Addr, src.addr(), dst.Bytes); err != nil {
			return nil, err
		}
		e.store.updateBytes.Add(dst.Bytes)
	}
	if err := c.Sync(); err != nil { // a failed kernel is this run's error
		return nil, err
	}
	out := make(map[string]*graph.Tensor, len(p.Outputs))
	for i, b := range p.Outputs {
		name := p.OutputNames[i]
		if bp.updatedState[name] {
			continue
		}
		t, err := download(c, b)
		if err != nil {
			return nil, fmt.Errorf("cuda: output %q: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

// runSteps runs the plan: eagerly the first time, then (capture on, no
// random ops) as a captured CUDA graph.
func (e *Executable) runSteps(bp *boundPlan) error {
	c := e.b.ctx
	if bp.graphExec != 0 {
		return c.replay(bp.graphExec)
	}
	if e.graphs && !bp.p.Random && bp.eagerRuns >= 1 {
		exec, err := c.capture(func() error { return e.issue(bp.p) })
		if err == nil {
			bp.graphExec = exec
			return c.replay(exec)
		}
		// A step that cannot be captured runs eagerly from now on.
		e.graphs = false
	}
	bp.eagerRuns++
	return e.issue(bp.p)
}

// issue puts every step of p on the stream.
func (e *Executable) issue(p *Plan) error {
	c := e.b.ctx
	for i := range p.Steps {
		s := &p.Steps[i]
		var err error
		switch {
		case s.Launch != nil:
			err = c.Launch(s.Launch)
		case s.Gemm != nil:
			err = c.runGemm(s.Gemm, e.b.allowTF32)
		case s.Zero != nil:
			err = c.Zero(s.Zero.addr(), s.Zero.Bytes)
		default:
			err = c.Copy(s.CopyDst.addr(), s.CopySrc.addr(), s.CopyBytes)
		}
		if err != nil {
			return fmt.Errorf("%w (node %s)", err, s.Node)
		}
	}
	return nil
}

func download(c *Context, b *Buffer) (*graph.Tensor, error) {
	t, err := graph.NewTensor(b.DType, append([]int{}, b.Shape...))
	if err != nil {
		return nil, err
	}
	if bs, ok := t.Data.([]bool); ok {
		raw := make([]byte, len(bs))
		if err := c.Download(raw, b.addr()); err != nil {
			return nil, err
		}
		for i, v := range raw {
			bs[i] = v != 0
		}
		return t, nil
	}
	if err := c.Download(graph.ElementBytes(t.Data), b.addr()); err != nil {
		return nil, err
	}
	return t, nil
}

// SetGraphCapture turns whole-step CUDA-graph capture on or off for this
// executable (ONNXTRAIN_CUDA_GRAPHS=0 turns it off for all).
func (e *Executable) SetGraphCapture(on bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.graphs = on
}

// MemoryStats reports the device memory of the latest plans: the arena
// (the planned peak of activations and temporaries), constants and state.
func (e *Executable) MemoryStats() (arena, consts, state int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, bp := range e.plans {
		arena = max(arena, bp.p.ArenaBytes)
		consts = max(consts, bp.p.ConstBytes)
	}
	if e.store != nil {
		for _, b := range e.store.bufs {
			state += b.Bytes
		}
	}
	return
}

// ---- state (backend.Stateful) ------------------------------------------

func (e *Executable) initState(opts backend.CompileOptions) error {
	if len(opts.State) == 0 && opts.ShareState == nil {
		return nil
	}
	if opts.ShareState != nil {
		other, ok := opts.ShareState.(*Executable)
		if !ok {
			return fmt.Errorf("cuda: ShareState: %T is not a CUDA executable", opts.ShareState)
		}
		if other.store == nil {
			other.store = &stateStore{bufs: map[string]*Buffer{}}
		}
		e.store = other.store
	} else {
		e.store = &stateStore{bufs: map[string]*Buffer{}}
	}
	inputs, outputs := map[string]bool{}, map[string]bool{}
	for _, in := range e.g.Inputs {
		inputs[in.Name] = true
	}
	for _, o := range e.g.Outputs {
		outputs[o.Name] = true
	}
	e.state = map[string]bool{}
	for _, sp := range opts.State {
		switch {
		case sp.Name == "":
			return fmt.Errorf("cuda: a state has no name")
		case !inputs[sp.Name]:
			return fmt.Errorf("cuda: state %q is not an input of the graph", sp.Name)
		case e.state[sp.Name]:
			return fmt.Errorf("cuda: state %q is declared twice", sp.Name)
		case sp.UpdatedBy != "" && !outputs[sp.UpdatedBy]:
			return fmt.Errorf("cuda: state %q is updated by %q, which is not an output of the graph", sp.Name, sp.UpdatedBy)
		}
		if buf, ok := e.store.bufs[sp.Name]; ok {
			if sp.Init != nil && (sp.Init.DType != buf.DType || !graph.SameShape(sp.Init.Shape, buf.Shape)) {
				return fmt.Errorf("cuda: state %q is %v%v in the shared state, declared %v%v", sp.Name, buf.DType, buf.Shape, sp.Init.DType, sp.Init.Shape)
			}
		} else {
			if sp.Init == nil {
				return fmt.Errorf("cuda: state %q has no initial value", sp.Name)
			}
			b := &Buffer{Name: sp.Name, Kind: BufState, DType: sp.Init.DType, Shape: append([]int{}, sp.Init.Shape...)}
			b.Bytes = b.Elements() * int64(sp.Init.DType.Size())
			addr, err := e.b.ctx.Alloc(b.Bytes)
			if err != nil {
				return fmt.Errorf("cuda: state %q: %w", sp.Name, err)
			}
			b.Addr = addr
			if err := e.b.ctx.Upload(addr, hostBytes(sp.Init)); err != nil {
				return fmt.Errorf("cuda: state %q: %w", sp.Name, err)
			}
			e.store.bufs[sp.Name] = b
		}
		e.state[sp.Name] = true
		if sp.UpdatedBy != "" {
			e.update = append(e.update, stateUpdate{output: sp.UpdatedBy, state: sp.Name})
		}
	}
	return nil
}

// StateNames implements backend.Stateful.
func (e *Executable) StateNames() []string {
	if e.store == nil {
		return nil
	}
	e.store.mu.Lock()
	defer e.store.mu.Unlock()
	out := make([]string, 0, len(e.store.bufs))
	for k := range e.store.bufs {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (e *Executable) stateBuf(name string, t *graph.Tensor) (*Buffer, error) {
	if e.store == nil {
		return nil, fmt.Errorf("cuda: no state %q (the executable has no state)", name)
	}
	e.store.mu.Lock()
	b, ok := e.store.bufs[name]
	e.store.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("cuda: no state %q", name)
	}
	if t.DType != b.DType || !graph.SameShape(t.Shape, b.Shape) {
		return nil, fmt.Errorf("cuda: state %q is %v%v, the tensor %v%v", name, b.DType, b.Shape, t.DType, t.Shape)
	}
	return b, nil
}

// ReadState implements backend.Stateful.
func (e *Executable) ReadState(name string, dst *graph.Tensor) error {
	b, err := e.stateBuf(name, dst)
	if err != nil {
		return err
	}
	e.b.mu.Lock()
	defer e.b.mu.Unlock()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := e.b.ctx.makeCurrent(); err != nil {
		return err
	}
	t, err := download(e.b.ctx, b)
	if err != nil {
		return err
	}
	copy(hostBytesWritable(dst), hostBytes(t))
	if bs, ok := dst.Data.([]bool); ok {
		copy(bs, t.Data.([]bool))
	}
	e.store.readBytes.Add(b.Bytes)
	return nil
}

func hostBytesWritable(t *graph.Tensor) []byte { return graph.ElementBytes(t.Data) }

// WriteState implements backend.Stateful.
func (e *Executable) WriteState(name string, src *graph.Tensor) error {
	b, err := e.stateBuf(name, src)
	if err != nil {
		return err
	}
	e.b.mu.Lock()
	defer e.b.mu.Unlock()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := e.b.ctx.makeCurrent(); err != nil {
		return err
	}
	if err := e.b.ctx.Upload(b.Addr, hostBytes(src)); err != nil {
		return err
	}
	e.store.writeBytes.Add(b.Bytes)
	return nil
}

// HostState implements backend.Stateful: device state is never host
// memory.
func (e *Executable) HostState(string) *graph.Tensor { return nil }

// StateTraffic implements backend.Stateful.
func (e *Executable) StateTraffic() backend.StateTraffic {
	if e.store == nil {
		return backend.StateTraffic{}
	}
	return backend.StateTraffic{ReadBytes: e.store.readBytes.Load(), WriteBytes: e.store.writeBytes.Load(), UpdateCopyBytes: e.store.updateBytes.Load()}
}

// RandomState implements backend.RandomState: the seed and the number of
// runs so far (the counter-based stream's position).
func (e *Executable) RandomState() ([]byte, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, uint64(e.opts.Seed)), e.runs), nil
}

// SetRandomState implements backend.RandomState.
func (e *Executable) SetRandomState(b []byte) error {
	if len(b) != 16 || int64(binary.LittleEndian.Uint64(b)) != e.opts.Seed {
		return fmt.Errorf("cuda: random state: not one of this executable's (seed %d)", e.opts.Seed)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.runs = binary.LittleEndian.Uint64(b[8:])
	return nil
}

var (
	_ backend.Stateful    = (*Executable)(nil)
	_ backend.RandomState = (*Executable)(nil)
)

var _ backend.PeakReporter = (*Executable)(nil)

// PeakBytes is the arena size of the largest plan so far: the planned
// device-memory peak of activations and temporaries (bench's
// planned_peak_bytes), state and constants apart.
func (e *Executable) PeakBytes() int64 {
	a, _, _ := e.MemoryStats()
	return a
}
