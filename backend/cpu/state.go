package cpu

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/graph"
)

// stateStore holds the state buffers of one or more executables
// (backend.CompileOptions.State, ShareState). On the CPU a buffer is the
// Init tensor itself: nothing is copied when it is declared, fed or
// updated in place.
type stateStore struct {
	mu   sync.RWMutex
	bufs map[string]*graph.Tensor
	// views: the buffers that are views of others (state_view.go).
	views map[string]stateView

	readBytes, writeBytes, updateBytes atomic.Int64
}

// stateUpdate is a graph output that replaces a state buffer after a run.
type stateUpdate struct {
	output, state string
}

// initState binds the executable's declared state (Compile).
func (e *Executable) initState(g *graph.Graph, opts backend.CompileOptions) error {
	if len(opts.State) == 0 && opts.ShareState == nil {
		return nil
	}
	if opts.ShareState != nil {
		other, ok := opts.ShareState.(*Executable)
		if !ok {
			return fmt.Errorf("cpu: ShareState: %T is not a CPU executable", opts.ShareState)
		}
		if other.store == nil {
			other.store = &stateStore{bufs: map[string]*graph.Tensor{}}
		}
		e.store = other.store
	} else {
		e.store = &stateStore{bufs: map[string]*graph.Tensor{}}
	}
	inputs := map[string]bool{}
	for _, in := range g.Inputs {
		inputs[in.Name] = true
	}
	outputs := map[string]bool{}
	for _, o := range g.Outputs {
		outputs[o.Name] = true
	}
	e.stateOf = map[string]bool{}
	e.updatedBy = map[string]string{}
	e.updateOut = map[string]bool{}
	s := e.store
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sp := range opts.State {
		switch {
		case sp.Name == "":
			return fmt.Errorf("cpu: a state has no name")
		case !inputs[sp.Name]:
			return fmt.Errorf("cpu: state %q is not an input of the graph", sp.Name)
		case e.stateOf[sp.Name]:
			return fmt.Errorf("cpu: state %q is declared twice", sp.Name)
		case sp.UpdatedBy != "" && !outputs[sp.UpdatedBy]:
			return fmt.Errorf("cpu: state %q is updated by %q, which is not an output of the graph", sp.Name, sp.UpdatedBy)
		}
		if buf, ok := s.bufs[sp.Name]; ok {
			if sp.Init != nil && (sp.Init.DType != buf.DType || !graph.SameShape(sp.Init.Shape, buf.Shape)) {
				return fmt.Errorf("cpu: state %q is %v%v in the shared state, declared %v%v", sp.Name, buf.DType, buf.Shape, sp.Init.DType, sp.Init.Shape)
			}
		} else {
			if sp.Init == nil {
				return fmt.Errorf("cpu: state %q has no initial value", sp.Name)
			}
			if err := sp.Init.Validate(); err != nil {
				return fmt.Errorf("cpu: state %q: %w", sp.Name, err)
			}
			s.bufs[sp.Name] = sp.Init
		}
		e.stateOf[sp.Name] = true
		if sp.UpdatedBy != "" {
			e.updatedBy[sp.Name] = sp.UpdatedBy
			e.updateOut[sp.UpdatedBy] = true
			e.updates = append(e.updates, stateUpdate{output: sp.UpdatedBy, state: sp.Name})
		}
	}
	sort.Slice(e.updates, func(i, j int) bool { return e.updates[i].state < e.updates[j].state })
	return e.checkStateOverlap(opts.State) // state_view.go
}

// markInPlace lets the state-updating nodes of p (optimizer-step and
// collective ops, graph.UpdatedInput) update state in place. A state
// buffer S may be updated by a chain of such nodes: the first replaces S,
// each next one replaces the value the one before made, and the last
// one's output is the update S is declared with (AccumulateGrad, then
// AllReduceStart, then AllReduceWait on a gradient sum). Every value of
// the chain, S included, must be read by the next node of the chain only
// (not by other nodes, nor as a graph output), except that S itself may
// be read by nodes that all run before the chain's first node
// (readersBefore, state_order.go: a parameter read by forward and
// backward, then updated by its optimizer node). A node runs in place when
// every input it replaces lies on such a chain.
func (e *Executable) markInPlace(p *plan) {
	readers := map[string]int{}
	for _, st := range p.steps {
		for _, in := range st.node.Inputs {
			readers[in]++
		}
		for _, sg := range st.node.Subgraphs() {
			for _, name := range sg.OuterScopeNames() {
				readers[name]++
			}
		}
	}
	for _, o := range p.g.Outputs {
		readers[o.Name]++
	}
	// producer: value -> (step, output index) of the updating node that
	// makes it as the new value of one of its inputs.
	type at struct{ step, out int }
	producer := map[string]at{}
	upds := make([][]int, len(p.steps))
	for i := range p.steps {
		n := p.steps[i].node
		upds[i] = graph.UpdatedInput(n)
		for j, in := range upds[i] {
			if in >= 0 && j < len(n.Outputs) && n.Outputs[j] != "" {
				producer[n.Outputs[j]] = at{i, j}
			}
		}
	}
	// ok[step][output] marks the pairs that lie on a chain from a state
	// buffer to its declared update.
	ok := map[at]bool{}
	for _, u := range e.updates {
		var chain []at
		v := u.output
		for len(chain) <= len(p.steps) {
			pr, found := producer[v]
			if !found {
				chain = nil
				break
			}
			chain = append(chain, pr)
			n := p.steps[pr.step].node
			v = n.Inputs[upds[pr.step][pr.out]]
			if readers[v] != 1 && (v != u.state || !readersBefore(p, v, pr.step)) { // state_order.go
				chain = nil
				break
			}
			if v == u.state {
				break
			}
		}
		if v != u.state {
			continue
		}
		for _, c := range chain {
			ok[c] = true
		}
	}
	for i := range p.steps {
		st := &p.steps[i]
		if upds[i] == nil {
			continue
		}
		all, any := true, false
		for j, in := range upds[i] {
			if in < 0 {
				continue
			}
			if !ok[at{i, j}] && (e.stateOf[st.node.Inputs[in]] || !transientInPlace(p, readers, i, st.node.Inputs[in])) { // state_order.go
				all = false
				break
			}
			any = true
		}
		st.inplace = all && any
	}
}

// withState returns inputs plus the executable's state buffers, in a map
// the caller passes back to putFeeds with owned.
func (e *Executable) withState(inputs map[string]*graph.Tensor) (m map[string]*graph.Tensor, owned bool, err error) {
	for name := range inputs {
		if e.stateOf[name] {
			return nil, false, fmt.Errorf("cpu: %w: %q is a state buffer of the program; it is not fed", ErrInput, name)
		}
	}
	if e.feedMu.TryLock() {
		if e.feedMap == nil {
			e.feedMap = make(map[string]*graph.Tensor, len(inputs)+len(e.stateOf))
		}
		m, owned = e.feedMap, true
	} else {
		m = make(map[string]*graph.Tensor, len(inputs)+len(e.stateOf))
	}
	for k, v := range inputs {
		m[k] = v
	}
	e.store.mu.RLock()
	for name := range e.stateOf {
		m[name] = e.store.bufs[name]
	}
	e.store.mu.RUnlock()
	return m, owned, nil
}

// putFeeds releases a map withState returned.
func (e *Executable) putFeeds(m map[string]*graph.Tensor, owned bool) {
	if owned {
		clear(m)
		e.feedMu.Unlock()
	}
}

// applyUpdates writes the run's updated values into their state buffers:
// nothing to do for an update made in place, a copy otherwise.
func (e *Executable) applyUpdates(p *plan, fr *frame) error {
	s := e.store
	for _, u := range e.updates {
		var src *graph.Tensor
		if i, ok := p.index[u.output]; ok {
			src = fr.vals[i]
		}
		s.mu.RLock()
		dst := s.bufs[u.state]
		s.mu.RUnlock()
		if src == nil {
			return fmt.Errorf("cpu: state update %q was not computed", u.output)
		}
		if sameData(dst, src) {
			continue
		}
		n, err := copyTensor(dst, src)
		if err != nil {
			return fmt.Errorf("cpu: state %q from %q: %w", u.state, u.output, err)
		}
		s.updateBytes.Add(n)
	}
	return nil
}

// sameData reports whether a and b share their first element.
func sameData(a, b *graph.Tensor) bool {
	if a == b {
		return true
	}
	pa, na := dataPtr(a)
	pb, nb := dataPtr(b)
	return pa != nil && pa == pb && na == nb
}

func dataPtr(t *graph.Tensor) (unsafe.Pointer, int) {
	switch d := t.Data.(type) {
	case []float32:
		if len(d) > 0 {
			return unsafe.Pointer(&d[0]), len(d)
		}
	case []float64:
		if len(d) > 0 {
			return unsafe.Pointer(&d[0]), len(d)
		}
	case []int64:
		if len(d) > 0 {
			return unsafe.Pointer(&d[0]), len(d)
		}
	case []bool:
		if len(d) > 0 {
			return unsafe.Pointer(&d[0]), len(d)
		}
	}
	return nil, 0
}

// copyTensor copies src's elements into dst (same dtype and size) and
// returns the bytes copied.
func copyTensor(dst, src *graph.Tensor) (int64, error) {
	if dst.DType != src.DType || dst.Size() != src.Size() {
		return 0, fmt.Errorf("%v%v does not fit %v%v", src.DType, src.Shape, dst.DType, dst.Shape)
	}
	switch d := dst.Data.(type) {
	case []float32:
		return 4 * int64(copy(d, src.Data.([]float32))), nil
	case []float64:
		return 8 * int64(copy(d, src.Data.([]float64))), nil
	case []int64:
		return 8 * int64(copy(d, src.Data.([]int64))), nil
	case []int32:
		return 4 * int64(copy(d, src.Data.([]int32))), nil
	case []bool:
		return int64(copy(d, src.Data.([]bool))), nil
	}
	for i := 0; i < dst.Size(); i++ {
		dst.SetFloat(i, src.Float(i))
	}
	return int64(dst.Size() * dst.DType.Size()), nil
}

// StateNames implements backend.Stateful.
func (e *Executable) StateNames() []string {
	if e.store == nil {
		return nil
	}
	e.store.mu.RLock()
	defer e.store.mu.RUnlock()
	out := make([]string, 0, len(e.store.bufs))
	for k := range e.store.bufs {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (e *Executable) buffer(name string) (*graph.Tensor, error) {
	if e.store == nil {
		return nil, fmt.Errorf("cpu: the executable has no state")
	}
	e.store.mu.RLock()
	defer e.store.mu.RUnlock()
	b, ok := e.store.bufs[name]
	if !ok {
		return nil, fmt.Errorf("cpu: no state named %q", name)
	}
	return b, nil
}

// ReadState implements backend.Stateful.
func (e *Executable) ReadState(name string, dst *graph.Tensor) error {
	b, err := e.buffer(name)
	if err != nil {
		return err
	}
	if dst == nil {
		return fmt.Errorf("cpu: ReadState %q: nil destination", name)
	}
	if sameData(dst, b) {
		return nil
	}
	n, err := copyTensor(dst, b)
	if err != nil {
		return fmt.Errorf("cpu: ReadState %q: %w", name, err)
	}
	e.store.readBytes.Add(n)
	return nil
}

// WriteState implements backend.Stateful.
func (e *Executable) WriteState(name string, src *graph.Tensor) error {
	b, err := e.buffer(name)
	if err != nil {
		return err
	}
	if src == nil {
		return fmt.Errorf("cpu: WriteState %q: nil source", name)
	}
	if sameData(b, src) {
		return nil
	}
	n, err := copyTensor(b, src)
	if err != nil {
		return fmt.Errorf("cpu: WriteState %q: %w", name, err)
	}
	e.store.writeBytes.Add(n)
	return nil
}

// HostState implements backend.Stateful: on the CPU every buffer is host
// memory.
func (e *Executable) HostState(name string) *graph.Tensor {
	b, err := e.buffer(name)
	if err != nil {
		return nil
	}
	return b
}

// StateTraffic implements backend.Stateful.
func (e *Executable) StateTraffic() backend.StateTraffic {
	if e.store == nil {
		return backend.StateTraffic{}
	}
	return backend.StateTraffic{
		ReadBytes:       e.store.readBytes.Load(),
		WriteBytes:      e.store.writeBytes.Load(),
		UpdateCopyBytes: e.store.updateBytes.Load(),
	}
}

var (
	_ backend.Stateful     = (*Executable)(nil)
	_ backend.PeakReporter = (*Executable)(nil)
)
