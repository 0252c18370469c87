package optim

import (
	"context"
	"fmt"
	"strconv"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/graph"
)

// An optimizer step runs as a compiled program on a backend: one
// graph.SGDUpdateOp or graph.AdamUpdateOp node over every parameter that
// has a gradient, whose parameters and slots (momentum buffers, moments)
// are state buffers of the program (backend.StateSpec) and whose gradients
// and per-step scalars (learning rates, bias corrections) are inputs. The
// arithmetic is the backend's (on the CPU, backend/cpu/ops/optimizer).
//
// By default the program runs on the "cpu" backend with its own state,
// which adopts the host tensors of the parameters and slots: a step copies
// nothing. Bind makes later steps share the state of a training program
// (train.Program), so that parameters and slots live where it keeps them.

// Binder is implemented by the optimizers of this package: Bind makes the
// optimizer's step a program of backend be that shares share's state
// buffers (parameters by their names; slots are added as
// "<param>/<slot>"). A nil be means the "cpu" backend.
type Binder interface {
	Bind(be backend.Backend, share backend.Executable)
}

// ContextStepper is implemented by the optimizers of this package: Step
// with a context for the backend's Run (profiling: backend.WithNodeTimer).
type ContextStepper interface {
	StepContext(ctx context.Context, params []*Param) error
}

// stepProgram is a compiled optimizer step over a fixed set of tensors.
type stepProgram struct {
	be     backend.Backend
	share  backend.Executable
	layout StateLayout // layout.go: nil for Binder's default names

	exe backend.Executable
	// key is what the program was built for: per tensor, its value and
	// slots (the state buffers), in operand order.
	key   []*graph.Tensor
	kind  string
	flags [3]bool
	names []string // grad input names

	feeds  map[string]*graph.Tensor
	hyper  *graph.Tensor
	consts *graph.Tensor
	// rebound is set by a build that replaced slot tensors by the shared
	// state's buffers: the optimizer then keeps those.
	rebound bool
}

// gradInput names the program input of tensor i's gradient.
func gradInput(i int) string { return "onnxtrain/optim/grad/" + strconv.Itoa(i) }

// run updates the tensors: values[i] and slots[k][i] are state, grads[i]
// the gradient of values[i]; hyper has cols values per tensor.
func (s *stepProgram) run(ctx context.Context, op string, attrs []*graph.Attr, flags [3]bool, names []string, values, grads []*graph.Tensor, slots [][]*graph.Tensor, consts, hyper []float32) error {
	n := len(values)
	if n == 0 {
		return nil
	}
	s.rebound = false
	if !s.matches(op, flags, values, slots) {
		if err := s.build(op, attrs, flags, names, values, grads, slots, len(consts), len(hyper)/n); err != nil {
			return err
		}
	}
	copy(s.consts.Float32s(), consts)
	copy(s.hyper.Float32s(), hyper)
	for i, g := range grads {
		if s.names[i] != "" { // "": the gradient is state (layout.go)
			s.feeds[s.names[i]] = g
		}
	}
	s.feeds["onnxtrain/optim/consts"] = s.consts
	s.feeds["onnxtrain/optim/hyper"] = s.hyper
	if ctx == nil {
		ctx = context.Background()
	}
	_, err := s.exe.Run(ctx, s.feeds)
	clear(s.feeds)
	if err != nil {
		return fmt.Errorf("optim: %s step: %w", op, err)
	}
	return nil
}

// matches reports whether the compiled program is for these tensors.
func (s *stepProgram) matches(op string, flags [3]bool, values []*graph.Tensor, slots [][]*graph.Tensor) bool {
	if s.exe == nil || s.kind != op || s.flags != flags || len(s.key) != len(values)*(1+len(slots)) {
		return false
	}
	k := 0
	for i := range values {
		if s.key[k] != values[i] {
			return false
		}
		k++
	}
	for _, sl := range slots {
		for i := range sl {
			if s.key[k] != sl[i] {
				return false
			}
			k++
		}
	}
	return true
}

// build compiles the program for the tensors.
func (s *stepProgram) build(op string, attrs []*graph.Attr, flags [3]bool, names []string, values, grads []*graph.Tensor, slots [][]*graph.Tensor, nconsts, cols int) error {
	n := len(values)
	be := s.be
	if be == nil {
		var err error
		if be, err = backend.Open("cpu"); err != nil {
			return fmt.Errorf("optim: %w", err)
		}
	}
	slotNames := slotNamesOf(op, flags)
	g := &graph.Graph{Name: "onnxtrain/optim/" + op, Initializers: map[string]*graph.Tensor{}}
	f32 := func(shape ...int) *graph.Type {
		t := &graph.Type{Kind: graph.KindTensor, DType: graph.Float32, HasShape: true, Shape: []graph.Dim{}}
		for _, d := range shape {
			t.Shape = append(t.Shape, graph.Dim{Value: int64(d), Known: true})
		}
		return t
	}
	node := &graph.Node{Name: "onnxtrain/optim/" + op, OpType: op, Domain: graph.InternalDomain,
		Inputs: []string{"onnxtrain/optim/consts", "onnxtrain/optim/hyper"}}
	g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: "onnxtrain/optim/consts", Type: f32(nconsts)},
		&graph.ValueInfo{Name: "onnxtrain/optim/hyper", Type: f32(n, cols)})
	var state []backend.StateSpec
	s.key = s.key[:0]
	s.names = s.names[:0]
	var outs []string
	for i, v := range values {
		vn := s.valueState(names[i])
		g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: vn, Type: f32(v.Shape...)})
		node.Inputs = append(node.Inputs, vn)
		out := vn + "/new"
		outs = append(outs, out)
		state = append(state, backend.StateSpec{Name: vn, Init: v, UpdatedBy: out})
		s.key = append(s.key, v)
	}
	for i, gr := range grads {
		gn, fed := s.gradState(names[i]), ""
		if gn == "" {
			gn, fed = gradInput(i), gradInput(i)
		} else {
			state = append(state, backend.StateSpec{Name: gn, Init: gr})
		}
		g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: gn, Type: f32(gr.Shape...)})
		node.Inputs = append(node.Inputs, gn)
		s.names = append(s.names, fed)
	}
	for k, sl := range slots {
		for i, t := range sl {
			name := s.slotState(names[i], slotNames[k])
			g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: name, Type: f32(t.Shape...)})
			node.Inputs = append(node.Inputs, name)
			out := name + "/new"
			outs = append(outs, out)
			state = append(state, backend.StateSpec{Name: name, Init: t, UpdatedBy: out})
			s.key = append(s.key, t)
		}
	}
	node.Outputs = outs
	node.Attrs = map[string]*graph.Attr{}
	for _, a := range append(attrs, graph.IntAttr("tensors", int64(n))) {
		node.Attrs[a.Name] = a
	}
	g.Nodes = []*graph.Node{node}
	for _, o := range outs {
		g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: o})
	}
	m := &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17, graph.InternalDomain: 1}, Graph: g}
	// StaticShapes: every shape is declared, so the backend keeps no
	// second, shape-specialised copy of the graph and its plan (held as
	// long as the optimizer: about half its bookkeeping per tensor).
	exe, err := be.Compile(m, backend.CompileOptions{State: state, ShareState: s.share, StaticShapes: true})
	if err != nil {
		return fmt.Errorf("optim: compiling the %s step: %w", op, err)
	}
	// Shared state may already hold these slots (a resumed optimizer):
	// their values go to the buffers, and the optimizer keeps the buffers.
	// Where that buffer is host memory the caller's slot tensor becomes
	// the buffer (rebound, for the optimizer to keep).
	s.rebound = false
	if st, ok := exe.(backend.Stateful); ok && s.share != nil {
		k0 := len(values)
		for k, sl := range slots {
			for i, t := range sl {
				name := s.slotState(names[i], slotNames[k])
				if err := st.WriteState(name, t); err != nil {
					return fmt.Errorf("optim: %w", err)
				}
				if h := st.HostState(name); h != nil && h != t {
					sl[i] = h
					s.key[k0+k*len(values)+i] = h
					s.rebound = true
				}
			}
		}
	}
	s.exe, s.kind, s.flags = exe, op, flags
	s.feeds = make(map[string]*graph.Tensor, n+2)
	s.consts = graph.Zeros(graph.Float32, nconsts)
	s.hyper = graph.Zeros(graph.Float32, n, cols)
	return nil
}

// slotNamesOf names the slot groups of an op's operands.
func slotNamesOf(op string, flags [3]bool) []string {
	switch op {
	case graph.SGDUpdateOp:
		if flags[0] {
			return []string{"momentum_buffer"}
		}
		return nil
	default:
		if flags[0] {
			return []string{"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}
		}
		return []string{"exp_avg", "exp_avg_sq"}
	}
}

// StepBytes is the memory traffic of one step of o over params of elems
// float32 elements in all: the bytes of parameters, gradients and slots the
// update reads and writes (each once). It is 0 for an optimizer of another
// package.
func StepBytes(o Optimizer, elems int64) int64 {
	var streams int64 // arrays read plus arrays written
	switch o := o.(type) {
	case *SGD:
		streams = 3 // read p, g; write p
		if o.cfg.Momentum != 0 {
			streams += 2 // read and write the momentum buffer
		}
	case *Adam:
		streams = 7 // read p, g, m, v; write p, m, v
		if o.cfg.AMSGrad {
			streams += 2
		}
	}
	return 4 * streams * elems
}
