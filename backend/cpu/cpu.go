package cpu

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/graph/passes"

	// Kernel families register themselves.
	_ "github.com/onnxtrain/onnxtrain/backend/cpu/ops"
)

func init() {
	backend.Register("cpu", func() (backend.Backend, error) { return &Backend{}, nil })
}

// Backend is the CPU backend.
type Backend struct {
	// FusedOnly, when not nil, are the fused ops this backend declares
	// (backend.FusedOpsDeclarer) in place of every fused kernel it has:
	// the pass pipeline then keeps the other fusions' chains decomposed.
	// The registered "cpu" backend declares all of them.
	FusedOnly []string
}

// Name implements backend.Backend.
func (*Backend) Name() string { return "cpu" }

// Supports implements backend.Backend.
func (*Backend) Supports(domain, op string, opset int64) bool {
	if _, ok := kern.Lookup(domain, op, opset); ok {
		return true
	}
	if domain == "ai.onnx.preview.training" && op == "Gradient" {
		return true // expanded by autodiff at compile time
	}
	return domain == "" && graph.HasLowering(op)
}

// Compile implements backend.Backend.
func (b *Backend) Compile(m *graph.Model, opts backend.CompileOptions) (backend.Executable, error) {
	e := &Executable{
		opset:  m.Opset(),
		opsets: m.Opsets,
		opts:   opts,
		plans:  map[*graph.Graph]*plan{},
		pcg:    newPCG(opts.Seed),
	}
	e.rng = rand.New(e.pcg)
	if opts.Workers > 0 {
		e.pool = kern.DevicePool(opts.Device, opts.Workers) // the device's share of the cores
	}
	e.fused = backend.DeclaredFusedOps(b, opts)
	if err := e.buildPipelines(); err != nil { // pipeline.go
		return nil, fmt.Errorf("cpu: %w", err)
	}
	g := copyGraph(m.Graph)
	if err := e.initState(g, opts); err != nil { // state.go
		return nil, err
	}
	if _, err := e.compilePipe.Run(g, e.passEnv(true, m.Functions)); err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	p, err := e.buildPlan(g)
	if err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	e.main = p
	e.noMemPlan.Store(opts.NoMemoryPlan)
	e.eagerArena.Store(opts.Repeated)
	e.declared = make(map[string]*graph.ValueInfo, len(p.g.Inputs))
	for _, in := range p.g.Inputs {
		e.declared[in.Name] = in
	}
	return e, nil
}

// newRand is the generator of the random ops, seeded.
// pcgStream is the second word of the random ops' PCG state.
const pcgStream = 0x9e3779b97f4a7c15

func newPCG(seed int64) *rand.PCG {
	return rand.NewPCG(uint64(seed), pcgStream)
}

// reseed restarts the random generator from the compile-time seed.
func (e *Executable) reseed() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.pcg.Seed(uint64(e.opts.Seed), pcgStream)
}

// RandomState implements backend.RandomState: the generator random ops
// draw from, for checkpoints.
func (e *Executable) RandomState() ([]byte, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.pcg.MarshalBinary()
}

// SetRandomState implements backend.RandomState.
func (e *Executable) SetRandomState(b []byte) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.pcg.UnmarshalBinary(b); err != nil {
		return fmt.Errorf("cpu: random state: %w", err)
	}
	return nil
}

// copyGraph copies the parts of g that passes change (node list and
// initializer map), sharing tensors and nodes.
func copyGraph(g *graph.Graph) *graph.Graph {
	c := *g
	c.Nodes = append([]*graph.Node{}, g.Nodes...)
	c.Initializers = make(map[string]*graph.Tensor, len(g.Initializers))
	for k, v := range g.Initializers {
		c.Initializers[k] = v
	}
	return &c
}

// step is one planned node with its kernel.
type step struct {
	node *graph.Node
	spec kern.Spec
	// in and out are the value slots of the node's inputs and outputs
	// (-1 for an omitted input or an unnamed output).
	in, out []int
	// inplace lets the kernel update the state buffers it replaces in
	// place (kern.Context.InPlace; markInPlace in state.go).
	inplace bool
}

// plan is a graph ready to run. Values live in slots: every name the graph
// defines or reads has an index, so a run keeps its values in a slice.
type plan struct {
	g     *graph.Graph
	steps []step
	index map[string]int // value name -> slot
	names []string       // slot -> value name
	inits []slotValue    // initializers, by slot
	outs  []int          // slots of g.Outputs
	// outOf maps a slot to 1+its index in g.Outputs (0: not an output),
	// for reporting outputs as they are computed (backend.OutputFunc).
	outOf []int
	// shapes are the input shapes a specialised plan was built for (nil
	// for the general plan); mem plans its memory (nil: not planned).
	shapes map[string][]int
	mem    *memState
}

type slotValue struct {
	slot int
	t    *graph.Tensor
}

// Executable is a compiled model on the CPU.
//
// Memory: a plan specialised to a set of input shapes records, on its
// first run, the size and lifetime of every tensor its kernels allocate,
// and from the second run on serves them from one arena in which tensors
// whose lifetimes do not overlap share storage (see MemoryStats).
//
// The tensors Run returns may live in that arena: they stay valid until
// the next Run of the same Executable, from any goroutine, which may
// overwrite them and reuse the map that holds them. A caller that keeps
// outputs longer copies them (graph.Tensor.Clone); goroutines that share
// an Executable and read its outputs after their Run returns call
// SetCopyOutputs(true). The plan can be turned off with
// SetMemoryPlan(false), or at compile time with the option
// backend.Tuning.NoMemoryPlan (the command maps ONNXTRAIN_NO_MEMPLAN=1 to
// it). Inputs may be outputs of
// the previous run: a run never uses an arena that one of its inputs lives
// in (or whose latest run returned them).
type Executable struct {
	opset  int64
	opsets map[string]int64
	opts   backend.CompileOptions
	main   *plan
	// declared maps the main graph's inputs by name (for checkInputs).
	declared map[string]*graph.ValueInfo
	// pool is the device's worker pool (backend.Tuning.Workers; nil:
	// the process-wide one, GOMAXPROCS workers).
	pool *kern.Pool

	mu    sync.Mutex
	plans map[*graph.Graph]*plan
	rng   *rand.Rand
	pcg   *rand.PCG
	// specialised holds one plan per set of input shapes, in which shape
	// computations are folded to constants.
	specialised map[string]*plan
	// last is the specialised plan of the latest run (for MemoryStats and
	// as a cache of the latest shapes).
	last atomic.Pointer[plan]
	// noMemPlan turns the memory plan off (SetMemoryPlan); copyOutputs
	// copies outputs out of the arena (SetCopyOutputs).
	noMemPlan, copyOutputs atomic.Bool
	// eagerArena: the next plan to finish recording allocates its arena
	// at once (set for Repeated executables, cleared by the first).
	eagerArena atomic.Bool

	// state.go: the state buffers (shared with other executables), which
	// inputs are state, which output updates which state; feedMap is
	// Run's reused map of inputs plus state.
	store     *stateStore
	stateOf   map[string]bool
	updatedBy map[string]string
	updateOut map[string]bool
	updates   []stateUpdate
	feedMu    sync.Mutex
	feedMap   map[string]*graph.Tensor
	// gaps are the ops PrimitivesOnly left to their kernels.
	gapMu sync.Mutex
	gaps  map[string]bool
	// pipeline.go: the pass pipelines (graph/passes) of the main graph,
	// of its copies specialised to input shapes, and of subgraphs, and the
	// fused ops they may make.
	compilePipe, specialisedPipe, subgraphPipe *passes.Pipeline
	fused                                      map[string]bool
}

// maxSpecialised bounds the per-shape plan cache.
const maxSpecialised = 32

// planFor returns the plan specialised to the inputs' shapes, building it
// on first sight of those shapes. A shape error found while specialising
// is returned; any other failure falls back to the general plan.
func (e *Executable) planFor(inputs map[string]*graph.Tensor) (*plan, error) {
	if e.opts.NoFold {
		return e.main, nil
	}
	if p := e.last.Load(); p != nil && sameShapes(p.shapes, inputs) {
		return p, nil
	}
	if e.opts.StaticShapes {
		// The graph is planned for the shapes it declares (checkInputs
		// held the inputs to them): the main plan gets the memory plan,
		// and no specialised copy of it is made.
		e.mu.Lock()
		p := e.main
		if p.mem == nil {
			p.shapes = graph.InputShapes(inputs)
			p.mem = &memState{eager: &e.eagerArena}
		}
		e.mu.Unlock()
		if sameShapes(p.shapes, inputs) {
			e.last.Store(p)
			return p, nil
		}
	}
	shapes := graph.InputShapes(inputs)
	key := graph.ShapeKey(shapes)
	e.mu.Lock()
	p, ok := e.specialised[key]
	e.mu.Unlock()
	if ok {
		e.last.Store(p)
		return p, nil
	}
	// The specialised pipeline (graph/passes.SpecialisedPasses) on a copy
	// of the main graph: shapes specialised, the fusions that need every
	// shape, then the lowerings that did.
	sg := copyGraph(e.main.g)
	env := e.passEnv(false, nil)
	env.Shapes = shapes
	if _, err := e.specialisedPipe.Run(sg, env); err != nil {
		if errors.Is(err, graph.ErrShapeMismatch) {
			return nil, fmt.Errorf("cpu: %w: %v", ErrInput, err)
		}
		return e.generalPlan(), nil
	}
	p, err := e.buildPlan(sg)
	if err != nil {
		return e.generalPlan(), nil
	}
	p.shapes = shapes
	p.mem = &memState{eager: &e.eagerArena}
	e.mu.Lock()
	if e.specialised == nil || len(e.specialised) >= maxSpecialised {
		e.specialised = map[string]*plan{}
	}
	e.specialised[key] = p
	e.mu.Unlock()
	e.last.Store(p)
	return p, nil
}

// sameShapes reports whether inputs have exactly the shapes (same names).
func sameShapes(shapes map[string][]int, inputs map[string]*graph.Tensor) bool {
	n := 0
	for name, t := range inputs {
		if t == nil {
			continue
		}
		s, ok := shapes[name]
		if !ok || !graph.SameShape(s, t.Shape) {
			return false
		}
		n++
	}
	return n == len(shapes)
}

// evaluate runs one node on constant inputs (for folding).
func (e *Executable) evaluate(n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	spec, ok := kern.Lookup(n.Domain, n.OpType, e.opset)
	if !ok {
		return nil, graph.ErrUnsupportedOp
	}
	kctx := &kern.Context{Opset: e.opset, Opsets: e.opsets, Winograd: e.opts.Winograd, Rand: e.rng, Sub: &subRunner{e: e}}
	return e.call(kctx, spec, n, in)
}

// buildPlan resolves the kernels of g, whose passes have run, and gives
// every value a slot.
func (e *Executable) buildPlan(g *graph.Graph) (*plan, error) {
	p := &plan{g: g, index: map[string]int{}}
	slot := func(name string) int {
		if name == "" {
			return -1
		}
		if i, ok := p.index[name]; ok {
			return i
		}
		p.index[name] = len(p.names)
		p.names = append(p.names, name)
		return len(p.names) - 1
	}
	for _, name := range g.SortedInitializerNames() {
		p.inits = append(p.inits, slotValue{slot: slot(name), t: g.Initializers[name]})
	}
	for _, in := range g.Inputs {
		slot(in.Name)
	}
	for _, n := range g.Nodes {
		spec, _ := kern.Lookup(n.Domain, n.OpType, e.opset)
		st := step{node: n, spec: spec, in: make([]int, len(n.Inputs)), out: make([]int, len(n.Outputs))}
		for i, name := range n.Inputs {
			st.in[i] = slot(name)
		}
		for i, name := range n.Outputs {
			st.out[i] = slot(name)
		}
		p.steps = append(p.steps, st)
	}
	for _, o := range g.Outputs {
		p.outs = append(p.outs, slot(o.Name))
	}
	p.outOf = make([]int, len(p.names))
	for i, s := range p.outs {
		if p.outOf[s] == 0 {
			p.outOf[s] = i + 1
		}
	}
	e.markInPlace(p) // state.go
	return p, nil
}

// frame is one scope of values: a graph's, linked to the graph that holds it.
type frame struct {
	p      *plan
	vals   []*graph.Tensor // by slot
	parent *frame
}

func (f *frame) lookup(name string) (*graph.Tensor, bool) {
	for s := f; s != nil; s = s.parent {
		if i, ok := s.p.index[name]; ok && s.vals[i] != nil {
			return s.vals[i], true
		}
	}
	return nil, false
}

// Run implements backend.Executable. The returned tensors stay valid until
// the next Run (see Executable); so does the returned map, which a run in
// the memory plan's arena reuses (unless SetCopyOutputs is on).
func (e *Executable) Run(ctx context.Context, inputs map[string]*graph.Tensor) (map[string]*graph.Tensor, error) {
	if e.pool != nil {
		defer kern.Leave(kern.Enter(e.pool)) // the kernels run on the device's workers
	}
	if e.store != nil {
		feeds, owned, err := e.withState(inputs) // state.go
		if err != nil {
			return nil, err
		}
		defer e.putFeeds(feeds, owned)
		inputs = feeds
	}
	if err := e.checkInputs(inputs); err != nil {
		return nil, err
	}
	p, err := e.planFor(inputs)
	if err != nil {
		return nil, err
	}
	var ar *arena
	if p.mem != nil && !e.noMemPlan.Load() {
		ar = p.mem.acquire(p, inputs)
	}
	var fr *frame
	if ar != nil {
		fr = &ar.frame
	} else {
		fr = &frame{p: p, vals: make([]*graph.Tensor, len(p.names))}
	}
	for _, iv := range p.inits {
		fr.vals[iv.slot] = iv.t
	}
	for k, v := range inputs {
		if i, ok := p.index[k]; ok {
			fr.vals[i] = v
		}
	}
	err = e.runPlan(ctx, p, fr, ar)
	if err == nil && e.store != nil {
		err = e.applyUpdates(p, fr) // state.go
	}
	var out map[string]*graph.Tensor
	if err == nil {
		copyOut := e.copyOutputs.Load()
		switch {
		case ar != nil && !copyOut && ar.outMap != nil:
			out = ar.outMap
			clear(out)
		case ar != nil && !copyOut:
			out = make(map[string]*graph.Tensor, len(p.outs))
			ar.outMap = out
		default:
			out = make(map[string]*graph.Tensor, len(p.outs))
		}
		if ar != nil {
			ar.outs = ar.outs[:0]
		}
		for i, o := range p.g.Outputs {
			if e.updateOut[o.Name] {
				continue // a state update: it stays in the state buffer (state.go)
			}
			t := fr.vals[p.outs[i]]
			if t == nil {
				err = fmt.Errorf("cpu: graph output %q was not computed", o.Name)
				break
			}
			if ar != nil && copyOut && ar.holds(t) {
				t = t.Clone()
			}
			if ar != nil {
				ar.outs = append(ar.outs, t)
			}
			out[o.Name] = t
		}
	}
	if ar != nil {
		p.mem.release(ar, err == nil)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ErrInput is wrapped by errors about the tensors a caller feeds.
var ErrInput = errors.New("bad input")

// checkInputs compares fed tensors with the graph's declared inputs: every
// required input present, dtypes equal, ranks and fixed dims equal, and a
// symbolic dim bound to the same size everywhere.
func (e *Executable) checkInputs(inputs map[string]*graph.Tensor) error {
	g := e.main.g
	for name, t := range inputs {
		if _, ok := e.declared[name]; !ok {
			return fmt.Errorf("cpu: %w: %q is not an input of the graph (inputs: %v)", ErrInput, name, g.InputNames())
		}
		if t == nil {
			return fmt.Errorf("cpu: %w: input %q is nil", ErrInput, name)
		}
		if err := t.Validate(); err != nil {
			return fmt.Errorf("cpu: %w: input %q: %v", ErrInput, name, err)
		}
	}
	// Symbolic dims seen so far; a few fit on the stack.
	type binding struct {
		param string
		size  int
	}
	var buf [8]binding
	bound := buf[:0]
	for _, vi := range g.Inputs {
		t, ok := inputs[vi.Name]
		if !ok {
			if _, isInit := g.Initializers[vi.Name]; isInit {
				continue
			}
			return fmt.Errorf("cpu: %w: missing input %q (%v)", ErrInput, vi.Name, vi.Type)
		}
		ty := vi.Type
		if ty == nil || ty.Kind != graph.KindTensor {
			continue
		}
		if ty.DType != graph.Undefined && ty.DType != t.DType {
			return fmt.Errorf("cpu: %w: input %q has dtype %v, the graph expects %v", ErrInput, vi.Name, t.DType, ty.DType)
		}
		if !ty.HasShape {
			continue
		}
		if len(ty.Shape) != len(t.Shape) {
			return fmt.Errorf("cpu: %w: input %q has shape %v, the graph expects %v", ErrInput, vi.Name, t.Shape, ty)
		}
	dims:
		for i, d := range ty.Shape {
			switch {
			case d.Known && int(d.Value) != t.Shape[i]:
				return fmt.Errorf("cpu: %w: input %q has shape %v, the graph expects %v (dim %d)", ErrInput, vi.Name, t.Shape, ty, i)
			case d.Param != "":
				for _, b := range bound {
					if b.param == d.Param {
						if b.size != t.Shape[i] {
							return fmt.Errorf("cpu: %w: input %q dim %d (%s) is %d, but %s is %d in another input", ErrInput, vi.Name, i, d.Param, t.Shape[i], d.Param, b.size)
						}
						continue dims
					}
				}
				bound = append(bound, binding{d.Param, t.Shape[i]})
			}
		}
	}
	return nil
}

// runPlan runs p's steps over the values in fr. With an arena, the steps
// are the arena's own copies of the nodes, whose allocations the arena
// serves (or records, on a plan's first run).
func (e *Executable) runPlan(ctx context.Context, p *plan, fr *frame, ar *arena) error {
	steps := p.steps
	var kctx *kern.Context
	var in []*graph.Tensor
	if ar != nil {
		steps = ar.steps
		kctx, in = &ar.kctx, ar.in[:0]
		ar.kctx = kern.Context{Opset: e.opset, Opsets: e.opsets, Winograd: e.opts.Winograd, Rand: e.rng, Sub: &ar.sub, Ctx: ctx}
		ar.sub = subRunner{e: e, parent: fr}
		if ar.rec != nil {
			ar.rec.begin(p, fr)
		}
	} else {
		kctx = &kern.Context{Opset: e.opset, Opsets: e.opsets, Winograd: e.opts.Winograd, Rand: e.rng, Sub: &subRunner{e: e, parent: fr}, Ctx: ctx}
		in = make([]*graph.Tensor, 0, 8)
	}
	// Only the top-level graph reports its outputs as they are computed.
	var notify backend.OutputFunc
	var timer backend.NodeTimer
	var callTimer backend.NodeCallTimer
	if fr.parent == nil {
		notify = backend.OutputFuncFrom(ctx)
		timer = backend.NodeTimerFrom(ctx)
		callTimer = backend.NodeCallTimerFrom(ctx)
	}
	defer func() {
		if ar != nil {
			clear(in[:cap(in)])
			ar.in = in[:0]
		}
	}()
	for i := range steps {
		if i%64 == 0 && ctx != nil {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		st := &steps[i]
		n := st.node
		in = in[:0]
		for k, slot := range st.in {
			if slot < 0 {
				in = append(in, nil)
				continue
			}
			t := fr.vals[slot]
			if t == nil && fr.parent != nil {
				t, _ = fr.parent.lookup(p.names[slot])
			}
			if t == nil {
				return fmt.Errorf("cpu: %w", n.Errorf("input %q has no value", n.Inputs[k]))
			}
			in = append(in, t)
		}
		if ar != nil {
			ar.beginStep(i)
		}
		var t0 time.Time
		if timer != nil || callTimer != nil {
			t0 = time.Now()
		}
		kctx.InPlace = st.inplace
		if ar != nil {
			kctx.Donated = ar.donated(i, st, fr) // memplan_donate.go
		}
		out, err := e.call(kctx, st.spec, n, in)
		kctx.InPlace, kctx.Donated = false, 0
		if err != nil {
			return fmt.Errorf("cpu: %w", err)
		}
		if timer != nil || callTimer != nil {
			d := time.Since(t0)
			if timer != nil {
				timer(n, d)
			}
			if callTimer != nil {
				callTimer(n, in, out, d)
			}
		}
		for j, slot := range st.out {
			if slot < 0 {
				continue
			}
			if j >= len(out) || out[j] == nil {
				return fmt.Errorf("cpu: %w", n.Errorf("output %d (%q) was not produced", j, n.Outputs[j]))
			}
			fr.vals[slot] = out[j]
			if notify != nil && p.outOf[slot] != 0 {
				notify(p.g.Outputs[p.outOf[slot]-1].Name, out[j])
			}
		}
		if ar != nil {
			ar.endStep(i, st, fr)
		}
	}
	return nil
}

// call runs one kernel, converting half-precision floats for kernels that
// only handle float32, and turning a kernel panic into an error that names
// the node.
func (e *Executable) call(kctx *kern.Context, spec kern.Spec, n *graph.Node, in []*graph.Tensor) (out []*graph.Tensor, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = n.Errorf("kernel panicked: %v\n%s", r, debug.Stack())
		}
	}()
	if spec.Fn == nil {
		return nil, n.Errorf("%w: no kernel", graph.ErrUnsupportedOp)
	}
	halfType := graph.Undefined
	if !spec.Half {
		conv := false
		for _, t := range in {
			if t != nil && (t.DType == graph.Float16 || t.DType == graph.BFloat16) {
				halfType = t.DType
				conv = true
			}
		}
		if conv {
			c := make([]*graph.Tensor, len(in))
			for i, t := range in {
				c[i] = t
				if t != nil && (t.DType == graph.Float16 || t.DType == graph.BFloat16) {
					if c[i], err = kern.Cast(t, graph.Float32); err != nil {
						return nil, n.Errorf("%v", err)
					}
				}
			}
			in = c
		}
	}
	out, err = spec.Fn(kctx, n, in)
	if err != nil {
		return nil, err
	}
	if halfType != graph.Undefined {
		for i, t := range out {
			if t != nil && t.DType == graph.Float32 {
				if out[i], err = kern.Cast(t, halfType); err != nil {
					return nil, n.Errorf("%v", err)
				}
			}
		}
	}
	return out, nil
}

// subRunner runs subgraphs in the scope of the frame that holds their node.
type subRunner struct {
	e      *Executable
	parent *frame
}

// RunSubgraph implements kern.SubgraphRunner.
func (s *subRunner) RunSubgraph(g *graph.Graph, inputs []*graph.Tensor) ([]*graph.Tensor, error) {
	e := s.e
	e.mu.Lock()
	p, ok := e.plans[g]
	if !ok {
		c := copyGraph(g)
		var err error
		if err = graph.TopoSortSubgraph(c); err == nil {
			_, err = e.subgraphPipe.Run(c, e.passEnv(false, nil))
		}
		if err == nil {
			p, err = e.buildPlan(c)
		}
		if err != nil {
			e.mu.Unlock()
			return nil, fmt.Errorf("subgraph %q: %w", g.Name, err)
		}
		e.plans[g] = p
	}
	e.mu.Unlock()
	fr := &frame{p: p, vals: make([]*graph.Tensor, len(p.names)), parent: s.parent}
	for _, iv := range p.inits {
		fr.vals[iv.slot] = iv.t
	}
	if len(inputs) > len(p.g.Inputs) {
		return nil, fmt.Errorf("subgraph %q takes %d inputs, got %d", g.Name, len(p.g.Inputs), len(inputs))
	}
	for i, t := range inputs {
		if t != nil {
			fr.vals[p.index[p.g.Inputs[i].Name]] = t
		}
	}
	if err := e.runPlan(context.Background(), p, fr, nil); err != nil {
		return nil, err
	}
	out := make([]*graph.Tensor, len(p.g.Outputs))
	for i, o := range p.g.Outputs {
		t, ok := fr.lookup(o.Name)
		if !ok {
			return nil, fmt.Errorf("subgraph %q: output %q was not computed", g.Name, o.Name)
		}
		out[i] = t
	}
	return out, nil
}
