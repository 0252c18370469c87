package cpu

import (
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// MemoryStats describes the memory plan of a specialised plan (one set of
// input shapes). Sizes are in bytes.
type MemoryStats struct {
	// Planned is false until a plan has been recorded (the first Run of a
	// set of input shapes) and when no plan applies: NoFold, a graph that
	// could not be specialised, or one whose values the plan cannot track
	// (Unplanned says why). The sizes are reported whenever a run was
	// recorded.
	Planned bool `json:"planned"`
	// Unplanned says why a recorded plan is not used ("" when it is).
	Unplanned string `json:"unplanned,omitempty"`
	// PeakBytes is what a run holds at its peak besides its inputs and
	// weights: ArenaBytes plus HeapPeakBytes.
	PeakBytes int64 `json:"peak_bytes"`
	// ArenaBytes is the size of the arena that holds every tensor the
	// kernels allocate (intermediates, gradients, outputs), with storage
	// shared between tensors whose lifetimes do not overlap.
	ArenaBytes int64 `json:"arena_bytes"`
	// HeapPeakBytes is the peak of the values the plan does not place
	// (kernels that allocate outside kern.New); they come from the heap.
	HeapPeakBytes int64 `json:"heap_peak_bytes"`
	// HeapOps lists the op types whose outputs come from the heap, with
	// their bytes per run (kernels that could allocate with kern.New).
	HeapOps map[string]int64 `json:"heap_ops,omitempty"`
	// TotalBytes is the sum of the sizes of all those tensors: what a run
	// would hold if nothing were freed or shared.
	TotalBytes int64 `json:"total_bytes"`
	// OutputBytes is the part of ArenaBytes that holds the graph's outputs
	// (for a training step: the gradients), which outlive the run.
	OutputBytes int64 `json:"output_bytes"`
	// WeightBytes is the size of the graph's initializers (constants).
	WeightBytes int64 `json:"weight_bytes"`
	// InputBytes is the size of the inputs fed on the recording run (for a
	// training step: the batch, the parameters and the buffers).
	InputBytes int64 `json:"input_bytes"`
	// Tensors is the number of allocations the plan places.
	Tensors int `json:"tensors"`
	// Arenas is the number of arenas allocated (one per concurrent Run, one
	// more when a run's inputs live in another's arena).
	Arenas int `json:"arenas"`
	// Misses counts allocation requests that did not match the plan (same
	// step, dtype and size) and were served from the heap; Rescues counts
	// values found where the plan did not expect them, copied to the heap.
	// Both stay 0 for kernels that allocate the same way on every run.
	Misses  int64 `json:"misses"`
	Rescues int64 `json:"rescues"`
}

// MemoryStats returns the memory plan of the latest Run's input shapes.
func (e *Executable) MemoryStats() MemoryStats {
	p := e.last.Load()
	if p == nil || p.mem == nil {
		return MemoryStats{}
	}
	return p.mem.stats()
}

// PeakBytes is MemoryStats().PeakBytes: the planned peak of the latest
// Run's input shapes, 0 before their first run.
func (e *Executable) PeakBytes() int64 { return e.MemoryStats().PeakBytes }

// WeightBytes is the size of the graph's initializers (constant weights).
func (e *Executable) WeightBytes() int64 {
	var n int64
	for _, t := range e.main.g.Initializers {
		_, b := dataRange(t)
		n += int64(b)
	}
	return n
}

// SetMemoryPlan turns the memory plan on (the default) or off. Off, every
// run allocates its tensors from the heap and outputs are never reused.
func (e *Executable) SetMemoryPlan(on bool) { e.noMemPlan.Store(!on) }

// SetCopyOutputs makes Run return copies of the outputs that live in the
// arena (on) or the arena's tensors themselves (off, the default). Copies
// stay valid for good, at the cost of allocating the outputs every run;
// intermediates stay planned either way.
func (e *Executable) SetCopyOutputs(on bool) { e.copyOutputs.Store(on) }

// maxArenas bounds the arenas of one plan (concurrent runs beyond it
// allocate from the heap).
const maxArenas = 4

// memState is a specialised plan's memory: its plan, once recorded, and
// the arenas runs use.
type memState struct {
	mu        sync.Mutex
	plan      *memPlan
	recording bool
	// eager, when it holds true, makes the recording arena's storage
	// come as the recording run ends rather than on the next run, and is
	// cleared then: the executable's (backend.CompileOptions.Repeated)
	// first plan only, so that a plan recorded later for other shapes
	// (a last, smaller batch) still pays only when it runs again.
	eager   *atomic.Bool
	free    []*arena
	arenas  int
	misses  atomic.Int64
	rescues atomic.Int64
}

func (m *memState) stats() MemoryStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.plan == nil {
		return MemoryStats{}
	}
	st := m.plan.stats
	st.Arenas = m.arenas
	st.Misses = m.misses.Load()
	st.Rescues = m.rescues.Load()
	return st
}

// acquire returns the arena a run of p uses: a recording one on p's first
// run, then a free arena that none of the inputs lives in. It returns nil
// (the run allocates from the heap) while another run records, and when
// maxArenas are in use.
func (m *memState) acquire(p *plan, inputs map[string]*graph.Tensor) *arena {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.plan == nil {
		if m.recording {
			return nil
		}
		m.recording = true
		return newArena(p, m, nil)
	}
	if !m.plan.usable {
		return nil
	}
	for i := len(m.free) - 1; i >= 0; i-- {
		if a := m.free[i]; !a.holdsAny(inputs) {
			m.free = append(m.free[:i], m.free[i+1:]...)
			if a.plan == nil {
				a.serve(m.plan) // the recording arena, on its second run
			}
			return a
		}
	}
	if m.arenas >= maxArenas {
		return nil
	}
	m.arenas++
	return newArena(p, m, m.plan)
}

// release takes an arena back after a run. A successful recording run
// becomes the plan, and its arena the plan's first.
func (m *memState) release(a *arena, ok bool) {
	clear(a.frame.vals)
	recorded := m.releaseLocked(a, ok)
	if recorded >= freeOSAfter {
		// The recording run's buffers are garbage now: hand their pages
		// back to the OS before the arena is allocated, so that the
		// process's peak is the larger of the two rather than their sum.
		debug.FreeOSMemory()
	}
	if recorded > 0 && m.eager != nil && m.eager.Load() {
		// A repeated executable: the storage now, so that the second
		// run does not start by faulting in the whole arena (ViT-B/16's
		// 411 MiB in huge pages took ~1 s on a 2-vCPU EPYC).
		m.mu.Lock()
		if a.plan == nil && m.plan != nil && m.plan.usable && slices.Contains(m.free, a) && m.eager.CompareAndSwap(true, false) {
			a.serve(m.plan)
		}
		m.mu.Unlock()
	}
}

// freeOSAfter is the size of a recording run's tensors above which its end
// returns the freed memory to the OS (a forced collection: worth it for a
// large step, not for the small graphs of tests and constant folding).
const freeOSAfter = 64 << 20

// releaseLocked is release under m.mu; when a recording ended it returns
// the bytes the recording run allocated (at least 1), 0 otherwise.
func (m *memState) releaseLocked(a *arena, ok bool) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if a.rec != nil {
		m.recording = false
		if !ok {
			a.unbind()
			return 1
		}
		m.plan = a.rec.finish()
		a.rec = nil
		// The recording run's tensors came from the heap: let the
		// collection below take them.
		for _, b := range a.bindings {
			b.Forget()
		}
		recorded := max(m.plan.stats.TotalBytes, 1)
		if !m.plan.usable {
			a.unbind()
			return recorded
		}
		// The storage comes on the next run: an executable run once never
		// allocates it.
		m.arenas++
		m.free = append(m.free, a)
		return recorded
	}
	m.free = append(m.free, a)
	return 0
}

// arena is the storage of one run at a time of a specialised plan, with
// its own copies of the plan's nodes, bound (kern.Bind) to the allocators
// that serve their kernels.
type arena struct {
	m     *memState
	steps []step
	frame frame
	kctx  kern.Context
	sub   subRunner
	in    []*graph.Tensor

	// outs are the tensors the latest run returned, and outMap the map
	// it returned them in (reused by the next run; see Executable.Run).
	outs   []*graph.Tensor
	outMap map[string]*graph.Tensor

	rec      *recorder // recording run only
	bindings []*kern.Binding
	seq      []atomic.Int32 // requests so far, per step

	plan    *memPlan
	mem     []byte
	base    uintptr
	views   []any
	tensors []graph.Tensor
	shapes  [][]int
}

// stepAlloc serves the kern.New calls of one step's kernel.
type stepAlloc struct {
	a    *arena
	step int
}

// Alloc implements kern.Allocator.
func (s *stepAlloc) Alloc(n *graph.Node, d graph.DType, shape []int, elems int) *graph.Tensor {
	if s.a.rec != nil {
		return s.a.rec.alloc(s.step, d, shape)
	}
	return s.a.alloc(s.step, d, shape, elems, true)
}

// AllocUninit implements kern.UninitAllocator: the planned storage comes
// as the previous tensors in it left it (the recording run's still zeroed).
func (s *stepAlloc) AllocUninit(n *graph.Node, d graph.DType, shape []int, elems int) *graph.Tensor {
	if s.a.rec != nil {
		return s.a.rec.alloc(s.step, d, shape)
	}
	return s.a.alloc(s.step, d, shape, elems, false)
}

// newArena copies p's nodes and binds them; with a plan it allocates the
// arena, without one it records.
func newArena(p *plan, m *memState, mp *memPlan) *arena {
	a := &arena{
		m:        m,
		steps:    make([]step, len(p.steps)),
		frame:    frame{p: p, vals: make([]*graph.Tensor, len(p.names))},
		in:       make([]*graph.Tensor, 0, 8),
		bindings: make([]*kern.Binding, len(p.steps)),
		seq:      make([]atomic.Int32, len(p.steps)),
	}
	nodes := make([]*graph.Node, len(p.steps))
	for i, st := range p.steps {
		n := *st.node
		st.node = &n
		a.steps[i] = st
		nodes[i] = &n
		a.bindings[i] = &kern.Binding{Allocator: &stepAlloc{a: a, step: i}}
		kern.Bind(&n, a.bindings[i])
	}
	// The bindings are weak: once the arena is unreachable (its plan or
	// executable dropped), its nodes are unbound.
	runtime.AddCleanup(a, func(nodes []*graph.Node) {
		for _, n := range nodes {
			kern.Unbind(n)
		}
	}, nodes)
	if mp == nil {
		a.rec = &recorder{} // started by runPlan
	} else {
		a.serve(mp)
	}
	return a
}

// unbind releases the arena's nodes now.
func (a *arena) unbind() {
	for _, st := range a.steps {
		kern.Unbind(st.node)
	}
}

// serve allocates the arena's storage for mp.
func (a *arena) serve(mp *memPlan) {
	a.plan = mp
	size := mp.stats.ArenaBytes
	if size > 0 {
		words := make([]uint64, (size+arenaAlign)/8+1)
		p := unsafe.Pointer(unsafe.SliceData(words))
		p = unsafe.Add(p, (arenaAlign-uintptr(p)%arenaAlign)%arenaAlign)
		a.mem = unsafe.Slice((*byte)(p), size)
		a.base = uintptr(p)
		// Fault the pages in here, once, rather than in the kernels of
		// the first run that writes each of them.
		prefaultPages(p, int(size))
	}
	a.views = make([]any, len(mp.slots))
	a.tensors = make([]graph.Tensor, len(mp.slots))
	a.shapes = make([][]int, len(mp.slots))
	for i, sl := range mp.slots {
		var at unsafe.Pointer
		if sl.bytes > 0 {
			at = unsafe.Pointer(&a.mem[sl.off])
		}
		a.views[i] = typedView(sl.dtype, at, sl.elems)
		a.shapes[i] = make([]int, 0, sl.rank)
	}
}

// holdsAny reports whether any of the tensors lies in the arena, or is
// one of the tensors its latest run returned (whose headers, for views of
// data outside the arena, its nodes reuse).
func (a *arena) holdsAny(inputs map[string]*graph.Tensor) bool {
	for _, t := range inputs {
		if a.holds(t) {
			return true
		}
		for _, o := range a.outs {
			if o == t {
				return true
			}
		}
	}
	return false
}

// holds reports whether t's data lies in the arena.
func (a *arena) holds(t *graph.Tensor) bool {
	ptr, n := dataRange(t)
	return n > 0 && len(a.mem) > 0 && ptr < a.base+uintptr(len(a.mem)) && ptr+uintptr(n) > a.base
}

// alloc serves request k of step s from its planned slot, zeroed if zero is
// set, or returns nil (heap) when the request differs from the recorded one.
func (a *arena) alloc(s int, d graph.DType, shape []int, elems int, zero bool) *graph.Tensor {
	if !plannable(d) {
		return nil // never recorded
	}
	k := int(a.seq[s].Add(1)) - 1
	slots := a.plan.perStep[s]
	if k >= len(slots) {
		a.m.misses.Add(1)
		return nil
	}
	id := slots[k]
	sl := &a.plan.slots[id]
	if sl.dtype != d || sl.elems != elems {
		a.m.misses.Add(1)
		return nil
	}
	if sl.bytes > 0 {
		switch {
		case zero:
			clear(a.mem[sl.off : sl.off+sl.bytes])
		case poisonUninit.Load():
			fillBytes(a.mem[sl.off:sl.off+sl.bytes], 0xff)
		}
	}
	t := &a.tensors[id]
	a.shapes[id] = append(a.shapes[id][:0], shape...)
	*t = graph.Tensor{DType: d, Shape: a.shapes[id], Data: a.views[id]}
	return t
}

// poisonUninit makes tests fill the storage that kern.NewUninit serves with
// 0xff bytes (NaN for floats, -1 for signed integers), so that a kernel
// that leaves part of such an output unwritten gives wrong results.
var poisonUninit atomic.Bool

func fillBytes(b []byte, v byte) {
	for i := range b {
		b[i] = v
	}
}

// beginStep resets step s's request count and its node's views
// (kern.View).
func (a *arena) beginStep(s int) {
	a.bindings[s].Begin()
	if a.rec == nil {
		a.seq[s].Store(0)
	}
}

// endStep checks step s's outputs: on the recording run it notes where
// they live; afterwards it copies to the heap any output found in the arena
// where the plan did not put it (a kernel that allocates differently from
// one run to the next), so the plan's lifetimes always hold.
func (a *arena) endStep(s int, st *step, fr *frame) {
	if a.rec != nil {
		a.rec.endStep(s, st, fr)
		return
	}
	if len(a.mem) == 0 {
		return
	}
	end := a.base + uintptr(len(a.mem))
	exp := a.plan.expect[s]
	for j, slot := range st.out {
		if slot < 0 {
			continue
		}
		v := fr.vals[slot]
		ptr, n := dataRange(v)
		if n == 0 || ptr >= end || ptr+uintptr(n) <= a.base {
			continue
		}
		if e := exp[j]; e >= 0 {
			sl := &a.plan.slots[e]
			lo := a.base + uintptr(sl.off)
			if ptr >= lo && ptr+uintptr(n) <= lo+uintptr(sl.bytes) {
				continue
			}
		}
		fr.vals[slot] = v.Clone()
		a.m.rescues.Add(1)
	}
}

// touchPages writes a zero to one byte of every page of the n bytes at p,
// which must be zero already (fresh storage).
func touchPages(p unsafe.Pointer, n int) {
	page := os.Getpagesize()
	for off := 0; off < n; off += page {
		*(*byte)(unsafe.Add(p, off)) = 0
	}
	if n > 0 {
		*(*byte)(unsafe.Add(p, n-1)) = 0
	}
}
