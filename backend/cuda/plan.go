package cuda

import (
	"errors"
	"fmt"
	"slices"

	"github.com/onnxtrain/onnxtrain/graph"
)

// The plan: a graph specialised to its input shapes, turned on the host
// into a list of steps (kernel launches, cuBLAS calls, device copies) over
// buffers whose places in one device arena are fixed before the first run.
// Planning needs no GPU, so tests check it on any machine: which kernels a
// graph becomes, with which geometry and arguments, and where each buffer
// lives.

// BufKind says where a buffer's memory comes from.
type BufKind int

const (
	// BufArena is a value planned into the program's arena by liveness.
	BufArena BufKind = iota
	// BufState is a state buffer the executable owns (StateSpec).
	BufState
	// BufConst is an initializer or folded constant, uploaded once.
	BufConst
)

// Buffer is a region of device memory a step reads or writes.
type Buffer struct {
	Name  string
	Kind  BufKind
	DType graph.DType
	Shape []int
	Bytes int64
	// Offset is the place in the arena (BufArena) or in the constant
	// block (BufConst).
	Offset int64
	// Const is the host value of a BufConst.
	Const *graph.Tensor
	// Addr is the device address, set when the plan is bound to memory.
	Addr DevicePtr
	// first and last are the steps that define and last read the buffer
	// (liveness); pinned buffers (inputs, outputs) live through the run.
	first, last int
	pinned      bool
	// of is the buffer a view (Reshape, Squeeze, ...) shares memory with.
	of *Buffer
}

// root is the buffer that owns the memory (itself unless a view).
func (b *Buffer) root() *Buffer {
	for b.of != nil {
		b = b.of
	}
	return b
}

// addr is the device address of the buffer's memory.
func (b *Buffer) addr() DevicePtr { return b.root().Addr }

// Elements is the buffer's element count.
func (b *Buffer) Elements() int64 {
	n := int64(1)
	for _, d := range b.Shape {
		n *= int64(d)
	}
	return n
}

// Step is one thing the device does.
type Step struct {
	// Node is the label of the graph node the step belongs to.
	Node   string
	Launch *Launch
	Gemm   *Gemm
	// Copy: CopyBytes from CopySrc to CopyDst (device to device).
	CopyDst, CopySrc *Buffer
	CopyBytes        int64
	// Zero clears a buffer.
	Zero *Buffer
}

func (s Step) String() string {
	switch {
	case s.Launch != nil:
		return fmt.Sprintf("%s: %s<<<%v,%v>>>%v", s.Node, s.Launch.Kernel, s.Launch.Grid[0], s.Launch.Block[0], s.Launch.Args)
	case s.Gemm != nil:
		return fmt.Sprintf("%s: %v", s.Node, *s.Gemm)
	case s.Zero != nil:
		return fmt.Sprintf("%s: zero %s", s.Node, s.Zero.Name)
	default:
		return fmt.Sprintf("%s: copy %s <- %s (%d bytes)", s.Node, s.CopyDst.Name, s.CopySrc.Name, s.CopyBytes)
	}
}

// Plan is a specialised graph ready to run.
type Plan struct {
	Steps []Step
	// Inputs are the buffers the fed inputs are uploaded to, by name;
	// Outputs the buffers of the graph outputs Run returns.
	Inputs  map[string]*Buffer
	Outputs []*Buffer
	// OutputNames are the graph output names, in order (state-updating
	// outputs excluded).
	OutputNames []string
	// ArenaBytes is the arena's size; ConstBytes the constants'.
	ArenaBytes, ConstBytes int64
	// Consts are the constant buffers, uploaded when the plan is bound.
	Consts []*Buffer
	// Random is set when the plan draws random numbers: RandomLaunches
	// are the steps whose offset argument advances by RandomPerRun each
	// run (and such plans are not captured as CUDA graphs).
	Random         bool
	RandomLaunches []int
	RandomBase     []int64
	RandomPerRun   int64
	// InPlace counts the state updates made in place (no copy).
	InPlace int
	values  map[string]*Buffer
	arena   []*Buffer
}

// arenaAlign is the alignment of every buffer in device memory (what
// cudaMalloc guarantees, and enough for vector loads).
const arenaAlign = 256

func alignUp(n, a int64) int64 { return (n + a - 1) / a * a }

// planner builds a Plan.
type planner struct {
	g      *graph.Graph
	opset  int64
	types  map[string]*graph.Type
	state  map[string]*Buffer
	p      *Plan
	node   *graph.Node
	fused  bool // fast paths allowed (not PrimitivesOnly)
	tf32   bool
	random int64 // random numbers drawn per run so far (counter offsets)
	// readers counts the nodes that read each value (in-place updates
	// need the updated state to have no other reader).
	readers map[string]int
}

// buildPlan plans g, whose every value has a concrete shape (a graph
// Specialize returned), with state the state buffers by input name.
func buildPlan(g *graph.Graph, opset int64, types map[string]*graph.Type, state map[string]*Buffer, fused bool) (*Plan, error) {
	pl := &planner{g: g, opset: opset, state: state, fused: fused, types: map[string]*graph.Type{}}
	for k, v := range types {
		pl.types[k] = v
	}
	pl.p = &Plan{Inputs: map[string]*Buffer{}, values: map[string]*Buffer{}}
	pl.readers = map[string]int{}
	for _, n := range g.Nodes {
		for _, in := range n.Inputs {
			if in != "" {
				pl.readers[in]++
			}
		}
	}
	for name, vi := range g.ValueInfo {
		if vi != nil && vi.Type != nil {
			pl.types[name] = vi.Type
		}
	}
	for _, in := range g.Inputs {
		if in.Type != nil {
			pl.types[in.Name] = in.Type
		}
	}
	for _, in := range g.Inputs {
		if b, ok := state[in.Name]; ok {
			pl.p.values[in.Name] = b
			continue
		}
		if _, isInit := g.Initializers[in.Name]; isInit {
			continue
		}
		b, err := pl.newValue(in.Name)
		if err != nil {
			return nil, fmt.Errorf("cuda: input %q: %w", in.Name, err)
		}
		b.first, b.pinned = -1, true
		pl.p.Inputs[in.Name] = b
	}
	names := make([]string, 0, len(g.Initializers))
	for name := range g.Initializers {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if _, ok := pl.p.values[name]; ok {
			continue
		}
		pl.constant(name, g.Initializers[name])
	}
	for _, n := range g.Nodes {
		pl.node = n
		if err := pl.lowerNode(n); err != nil {
			if !errors.Is(err, graph.ErrUnsupportedOp) {
				// The node's variant (dtype, rank, attribute) has no
				// CUDA plan.
				err = fmt.Errorf("cuda: %w (%w)", err, graph.ErrUnsupportedOp)
			}
			return nil, err
		}
	}
	for _, o := range g.Outputs {
		b, ok := pl.p.values[o.Name]
		if !ok {
			return nil, fmt.Errorf("cuda: graph output %q is computed by no node", o.Name)
		}
		b.pinned = true
		pl.p.Outputs = append(pl.p.Outputs, b)
		pl.p.OutputNames = append(pl.p.OutputNames, o.Name)
	}
	pl.placeArena()
	for _, s := range pl.p.Steps {
		if s.Launch != nil {
			if err := checkLaunch(s.Launch); err != nil {
				return nil, fmt.Errorf("%w (node %s)", err, s.Node)
			}
		}
	}
	return pl.p, nil
}

// constant makes a constant buffer for a host tensor.
func (pl *planner) constant(name string, t *graph.Tensor) *Buffer {
	b := &Buffer{Name: name, Kind: BufConst, DType: t.DType, Shape: append([]int{}, t.Shape...), Const: t}
	b.Bytes = b.Elements() * int64(max(t.DType.Size(), 1))
	b.Offset = pl.p.ConstBytes
	pl.p.ConstBytes += alignUp(max(b.Bytes, 1), arenaAlign)
	pl.p.Consts = append(pl.p.Consts, b)
	pl.p.values[name] = b
	return b
}

// newValue makes the arena buffer of a value the current node defines.
func (pl *planner) newValue(name string) (*Buffer, error) {
	t := pl.types[name]
	if t == nil || !t.HasShape {
		return nil, fmt.Errorf("no static shape for %q (the graph must be specialised to its input shapes)", name)
	}
	shape := make([]int, len(t.Shape))
	for i, d := range t.Shape {
		if !d.Known || d.Value < 0 {
			return nil, fmt.Errorf("dimension %d of %q is not static (%v)", i, name, t)
		}
		shape[i] = int(d.Value)
	}
	return pl.newBuffer(name, t.DType, shape)
}

func (pl *planner) newBuffer(name string, dt graph.DType, shape []int) (*Buffer, error) {
	if dt.Size() <= 0 {
		return nil, fmt.Errorf("%q has dtype %v, which the CUDA backend does not hold in device memory: %w", name, dt, graph.ErrUnsupportedOp)
	}
	b := &Buffer{Name: name, Kind: BufArena, DType: dt, Shape: shape, first: len(pl.p.Steps), last: len(pl.p.Steps)}
	b.Bytes = b.Elements() * int64(dt.Size())
	pl.p.arena = append(pl.p.arena, b)
	pl.p.values[name] = b
	return b, nil
}

// scratch is an arena buffer used only by the steps the current node
// emits from now on (im2col columns, partial norms).
func (pl *planner) scratch(dt graph.DType, shape ...int) *Buffer {
	b, _ := pl.newBuffer(fmt.Sprintf("%s.scratch%d", pl.node.Label(), len(pl.p.arena)), dt, shape)
	return b
}

// in returns the buffer of input i of the current node, marking its use.
func (pl *planner) in(i int) (*Buffer, error) {
	name := pl.node.Input(i)
	if name == "" {
		return nil, nil
	}
	b, ok := pl.p.values[name]
	if !ok {
		return nil, pl.node.Errorf("input %q has no value on the device", name)
	}
	pl.use(b)
	return b, nil
}

// use extends a buffer's life to the steps emitted so far, and its root's
// for aliases.
func (pl *planner) use(b *Buffer) {
	if b == nil {
		return
	}
	if r := b.root(); r.Kind == BufArena {
		r.last = max(r.last, len(pl.p.Steps))
	}
}

// out makes the buffer of output i of the current node.
func (pl *planner) out(i int) (*Buffer, error) {
	if i >= len(pl.node.Outputs) || pl.node.Outputs[i] == "" {
		return nil, nil
	}
	b, err := pl.newValue(pl.node.Outputs[i])
	if err != nil {
		return nil, pl.node.Errorf("%v", err)
	}
	return b, nil
}

// alias makes output i the same memory as buffer src, with its own shape
// (Reshape and the other views).
func (pl *planner) alias(i int, src *Buffer) error {
	name := pl.node.Outputs[i]
	t := pl.types[name]
	shape := src.Shape
	if t != nil && t.HasShape && knownShape(t) {
		shape = make([]int, len(t.Shape))
		for k, d := range t.Shape {
			shape[k] = int(d.Value)
		}
	}
	pl.p.values[name] = &Buffer{Name: name, Kind: src.Kind, DType: src.DType, Shape: shape, Bytes: src.Bytes, of: src.root()}
	return nil
}

func (pl *planner) emit(l *Launch) {
	pl.p.Steps = append(pl.p.Steps, Step{Node: pl.node.Label(), Launch: l})
	pl.touch(l.Args)
}

// touch extends the life of every buffer a step reads or writes to it.
func (pl *planner) touch(args []Arg) {
	for _, a := range args {
		if a.Kind == ArgPtr && a.Buf != nil {
			r := a.Buf.root()
			if r.Kind == BufArena {
				r.last = max(r.last, len(pl.p.Steps)-1)
				r.first = min(r.first, len(pl.p.Steps)-1)
			}
		}
	}
}

// placeArena gives every arena buffer an offset: buffers sorted by size,
// largest first, each at the lowest aligned offset that no buffer with an
// overlapping lifetime occupies (greedy by size, as TFLite's and the CPU
// backend's planners).
func (pl *planner) placeArena() {
	bufs := pl.p.arena
	for _, b := range bufs {
		if b.pinned {
			b.first = -1
			b.last = len(pl.p.Steps)
		}
		for _, o := range pl.p.Outputs {
			if o.root() == b {
				b.last = len(pl.p.Steps)
			}
		}
	}
	order := slices.Clone(bufs)
	slices.SortStableFunc(order, func(a, b *Buffer) int {
		if a.Bytes != b.Bytes {
			if a.Bytes > b.Bytes {
				return -1
			}
			return 1
		}
		return a.first - b.first
	})
	var placed []*Buffer
	var top int64
	for _, b := range order {
		size := alignUp(max(b.Bytes, 1), arenaAlign)
		var live []*Buffer
		for _, q := range placed {
			if q.first <= b.last && b.first <= q.last {
				live = append(live, q)
			}
		}
		slices.SortFunc(live, func(x, y *Buffer) int { return int(x.Offset - y.Offset) })
		off := int64(0)
		for _, q := range live {
			if off+size <= q.Offset {
				break
			}
			off = max(off, q.Offset+alignUp(max(q.Bytes, 1), arenaAlign))
		}
		b.Offset = off
		top = max(top, off+size)
		placed = append(placed, b)
	}
	pl.p.ArenaBytes = top
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

func knownShape(t *graph.Type) bool {
	for _, d := range t.Shape {
		if !d.Known {
			return false
		}
	}
	return true
}
