// Package cpu is the pure-Go CPU backend. It registers itself as "cpu".
//
// Compilation inlines model-local functions, sorts the graph, lowers every op
// that has no kernel here to primitives, folds constants and removes dead
// nodes. Running walks the planned node list once per call.
package cpu

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"sync"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"

	// Kernel families register themselves.
	_ "github.com/onnxtrain/onnxtrain/backend/cpu/ops"
)

func init() {
	backend.Register("cpu", func() (backend.Backend, error) { return &Backend{}, nil })
}

// Backend is the CPU backend.
type Backend struct{}

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
		rng:    rand.New(rand.NewPCG(uint64(opts.Seed), 0x9e3779b97f4a7c15)),
	}
	g := copyGraph(m.Graph)
	if err := graph.InlineFunctions(g, m.Functions); err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	if err := graph.TopoSort(g); err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	if err := graph.ExpandGradientOps(g, e.opset); err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	p, err := e.planGraph(g, true)
	if err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	e.main = p
	return e, nil
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
}

// plan is a graph ready to run.
type plan struct {
	g     *graph.Graph
	steps []step
}

// Executable is a compiled model on the CPU.
type Executable struct {
	opset  int64
	opsets map[string]int64
	opts   backend.CompileOptions
	main   *plan

	mu    sync.Mutex
	plans map[*graph.Graph]*plan
	rng   *rand.Rand
	// specialised holds one plan per set of input shapes, in which shape
	// computations are folded to constants.
	specialised map[string]*plan
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
	shapes := graph.InputShapes(inputs)
	key := graph.ShapeKey(shapes)
	e.mu.Lock()
	p, ok := e.specialised[key]
	e.mu.Unlock()
	if ok {
		return p, nil
	}
	sg, err := graph.Specialize(e.main.g, e.opset, shapes, e.evaluate)
	if err != nil {
		if errors.Is(err, graph.ErrShapeMismatch) {
			return nil, fmt.Errorf("cpu: %w: %v", ErrInput, err)
		}
		return e.main, nil
	}
	p, err = e.planGraph(sg, false)
	if err != nil {
		return e.main, nil
	}
	e.mu.Lock()
	if e.specialised == nil || len(e.specialised) >= maxSpecialised {
		e.specialised = map[string]*plan{}
	}
	e.specialised[key] = p
	e.mu.Unlock()
	return p, nil
}

// evaluate runs one node on constant inputs (for folding).
func (e *Executable) evaluate(n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	spec, ok := kern.Lookup(n.Domain, n.OpType, e.opset)
	if !ok {
		return nil, graph.ErrUnsupportedOp
	}
	return e.call(spec, n, in, nil)
}

// planGraph lowers ops without kernels, folds constants (top level only,
// where inputs are known to be fed) and resolves kernels.
func (e *Executable) planGraph(g *graph.Graph, top bool) (*plan, error) {
	// Ops without a kernel here (or all ops with a lowering, under
	// DisableFused) are lowered to primitives, with constants typed like
	// their inputs.
	err := graph.LowerGraph(g, e.opset, func(n *graph.Node) bool {
		if n.Domain == "ai.onnx.preview.training" && n.OpType == "Gradient" {
			return false
		}
		_, ok := kern.Lookup(n.Domain, n.OpType, e.opset)
		return ok && !(e.opts.DisableFused && graph.HasLowering(n.OpType))
	})
	if err != nil {
		return nil, err
	}
	if top && !e.opts.NoFold {
		graph.FoldConstants(g, e.evaluate)
		graph.RemoveDeadNodes(g)
	}
	p := &plan{g: g}
	for _, n := range g.Nodes {
		spec, _ := kern.Lookup(n.Domain, n.OpType, e.opset)
		p.steps = append(p.steps, step{node: n, spec: spec})
	}
	return p, nil
}

// frame is one scope of values: a graph's, linked to the graph that holds it.
type frame struct {
	values map[string]*graph.Tensor
	parent *frame
}

func (f *frame) lookup(name string) (*graph.Tensor, bool) {
	for s := f; s != nil; s = s.parent {
		if t, ok := s.values[name]; ok {
			return t, true
		}
	}
	return nil, false
}

// Run implements backend.Executable.
func (e *Executable) Run(ctx context.Context, inputs map[string]*graph.Tensor) (map[string]*graph.Tensor, error) {
	if err := checkInputs(e.main.g, inputs); err != nil {
		return nil, err
	}
	p, err := e.planFor(inputs)
	if err != nil {
		return nil, err
	}
	g := p.g
	fr := &frame{values: make(map[string]*graph.Tensor, len(g.Initializers)+len(inputs)+len(g.Nodes))}
	for k, v := range g.Initializers {
		fr.values[k] = v
	}
	for k, v := range inputs {
		fr.values[k] = v
	}
	if err := e.runPlan(ctx, p, fr); err != nil {
		return nil, err
	}
	out := make(map[string]*graph.Tensor, len(g.Outputs))
	for _, o := range g.Outputs {
		t, ok := fr.lookup(o.Name)
		if !ok {
			return nil, fmt.Errorf("cpu: graph output %q was not computed", o.Name)
		}
		out[o.Name] = t
	}
	return out, nil
}

// ErrInput is wrapped by errors about the tensors a caller feeds.
var ErrInput = errors.New("bad input")

// checkInputs compares fed tensors with the graph's declared inputs: every
// required input present, dtypes equal, ranks and fixed dims equal, and a
// symbolic dim bound to the same size everywhere.
func checkInputs(g *graph.Graph, inputs map[string]*graph.Tensor) error {
	declared := map[string]*graph.ValueInfo{}
	for _, in := range g.Inputs {
		declared[in.Name] = in
	}
	for name, t := range inputs {
		if _, ok := declared[name]; !ok {
			return fmt.Errorf("cpu: %w: %q is not an input of the graph (inputs: %v)", ErrInput, name, g.InputNames())
		}
		if t == nil {
			return fmt.Errorf("cpu: %w: input %q is nil", ErrInput, name)
		}
		if err := t.Validate(); err != nil {
			return fmt.Errorf("cpu: %w: input %q: %v", ErrInput, name, err)
		}
	}
	bound := map[string]int{}
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
		for i, d := range ty.Shape {
			switch {
			case d.Known && int(d.Value) != t.Shape[i]:
				return fmt.Errorf("cpu: %w: input %q has shape %v, the graph expects %v (dim %d)", ErrInput, vi.Name, t.Shape, ty, i)
			case d.Param != "":
				if v, ok := bound[d.Param]; ok && v != t.Shape[i] {
					return fmt.Errorf("cpu: %w: input %q dim %d (%s) is %d, but %s is %d in another input", ErrInput, vi.Name, i, d.Param, t.Shape[i], d.Param, v)
				}
				bound[d.Param] = t.Shape[i]
			}
		}
	}
	return nil
}

func (e *Executable) runPlan(ctx context.Context, p *plan, fr *frame) error {
	in := make([]*graph.Tensor, 0, 8)
	for i := range p.steps {
		if i%64 == 0 && ctx != nil {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		st := &p.steps[i]
		n := st.node
		in = in[:0]
		for _, name := range n.Inputs {
			if name == "" {
				in = append(in, nil)
				continue
			}
			t, ok := fr.lookup(name)
			if !ok {
				return fmt.Errorf("cpu: %w", n.Errorf("input %q has no value", name))
			}
			in = append(in, t)
		}
		out, err := e.call(st.spec, n, in, fr)
		if err != nil {
			return fmt.Errorf("cpu: %w", err)
		}
		for j, name := range n.Outputs {
			if name == "" {
				continue
			}
			if j >= len(out) || out[j] == nil {
				return fmt.Errorf("cpu: %w", n.Errorf("output %d (%q) was not produced", j, name))
			}
			fr.values[name] = out[j]
		}
	}
	return nil
}

// call runs one kernel, converting half-precision floats for kernels that
// only handle float32, and turning a kernel panic into an error that names
// the node.
func (e *Executable) call(spec kern.Spec, n *graph.Node, in []*graph.Tensor, fr *frame) (out []*graph.Tensor, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = n.Errorf("kernel panicked: %v\n%s", r, debug.Stack())
		}
	}()
	if spec.Fn == nil {
		return nil, n.Errorf("%w: no kernel", graph.ErrUnsupportedOp)
	}
	ctx := &kern.Context{Opset: e.opset, Opsets: e.opsets, Rand: e.rng, Sub: &subRunner{e: e, parent: fr}}
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
	out, err = spec.Fn(ctx, n, in)
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
			p, err = e.planGraph(c, false)
		}
		if err != nil {
			e.mu.Unlock()
			return nil, fmt.Errorf("subgraph %q: %w", g.Name, err)
		}
		e.plans[g] = p
	}
	e.mu.Unlock()
	fr := &frame{values: make(map[string]*graph.Tensor, len(p.g.Initializers)+len(inputs)), parent: s.parent}
	for k, v := range p.g.Initializers {
		fr.values[k] = v
	}
	if len(inputs) > len(p.g.Inputs) {
		return nil, fmt.Errorf("subgraph %q takes %d inputs, got %d", g.Name, len(p.g.Inputs), len(inputs))
	}
	for i, t := range inputs {
		if t != nil {
			fr.values[p.g.Inputs[i].Name] = t
		}
	}
	if err := e.runPlan(context.Background(), p, fr); err != nil {
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
