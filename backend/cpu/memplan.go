package cpu

// Memory planning: liveness of a plan's values, the record of a plan's
// first run (what each step's kernel allocates, and which values share
// storage), and the static placement of those allocations in one arena.
//
// A value's storage may be shared: Reshape, Identity, Squeeze and other
// views return tensors whose Data is (part of) their input's. Storage is
// therefore planned per allocation, not per value: an allocation stays live
// until the last use of every value whose data lies inside it, found by
// address on the recording run.

import (
	"slices"
	"sync"
	"unsafe"

	"github.com/onnxtrain/onnxtrain/graph"
)

// releaseMinBytes is the smallest retired recording buffer whose pages are
// handed back to the OS while it waits for reuse (releasePages; smaller
// ones cost a system call for little).
const releaseMinBytes = 1 << 20

// arenaAlign is the alignment of every tensor in an arena (a cache line,
// and enough for any SIMD load).
const arenaAlign = 64

// lastUses returns, for each value slot of p, the index of the last step
// that reads it: -1 for a value no step reads, len(p.steps) for graph
// outputs (they outlive the run). A node holding subgraphs reads every
// name its subgraphs read.
func lastUses(p *plan) []int {
	last := make([]int, len(p.names))
	for i := range last {
		last[i] = -1
	}
	for s, st := range p.steps {
		for _, slot := range st.in {
			if slot >= 0 {
				last[slot] = s
			}
		}
		for _, a := range st.node.Attrs {
			for _, g := range subgraphsOf(a) {
				forEachRead(g, func(name string) {
					if i, ok := p.index[name]; ok {
						last[i] = s
					}
				})
			}
		}
	}
	for _, o := range p.outs {
		last[o] = len(p.steps)
	}
	return last
}

func subgraphsOf(a *graph.Attr) []*graph.Graph {
	if a == nil {
		return nil
	}
	if a.G != nil {
		return append([]*graph.Graph{a.G}, a.Graphs...)
	}
	return a.Graphs
}

// forEachRead calls fn with every name g and its nested subgraphs read.
func forEachRead(g *graph.Graph, fn func(string)) {
	for _, n := range g.Nodes {
		for _, in := range n.Inputs {
			if in != "" {
				fn(in)
			}
		}
		for _, a := range n.Attrs {
			for _, sg := range subgraphsOf(a) {
				forEachRead(sg, fn)
			}
		}
	}
	for _, o := range g.Outputs {
		fn(o.Name)
	}
}

// dataRange returns the address and byte length of t's elements (0, 0 for
// values without plain numeric storage).
func dataRange(t *graph.Tensor) (uintptr, int) {
	if t == nil {
		return 0, 0
	}
	var p unsafe.Pointer
	var n, size int
	switch s := t.Data.(type) {
	case []float32:
		p, n, size = unsafe.Pointer(unsafe.SliceData(s)), len(s), 4
	case []float64:
		p, n, size = unsafe.Pointer(unsafe.SliceData(s)), len(s), 8
	case []int64:
		p, n, size = unsafe.Pointer(unsafe.SliceData(s)), len(s), 8
	case []int32:
		p, n, size = unsafe.Pointer(unsafe.SliceData(s)), len(s), 4
	case []int16:
		p, n, size = unsafe.Pointer(unsafe.SliceData(s)), len(s), 2
	case []int8:
		p, n, size = unsafe.Pointer(unsafe.SliceData(s)), len(s), 1
	case []uint8:
		p, n, size = unsafe.Pointer(unsafe.SliceData(s)), len(s), 1
	case []uint16:
		p, n, size = unsafe.Pointer(unsafe.SliceData(s)), len(s), 2
	case []uint32:
		p, n, size = unsafe.Pointer(unsafe.SliceData(s)), len(s), 4
	case []uint64:
		p, n, size = unsafe.Pointer(unsafe.SliceData(s)), len(s), 8
	case []bool:
		p, n, size = unsafe.Pointer(unsafe.SliceData(s)), len(s), 1
	default:
		return 0, 0
	}
	if n == 0 || p == nil {
		return 0, 0
	}
	return uintptr(p), n * size
}

// dataPointer returns the address of t's first element as a pointer that
// keeps the storage alive (nil for empty or non-numeric tensors).
func dataPointer(t *graph.Tensor) unsafe.Pointer {
	if _, n := dataRange(t); n == 0 {
		return nil
	}
	switch s := t.Data.(type) {
	case []float32:
		return unsafe.Pointer(unsafe.SliceData(s))
	case []float64:
		return unsafe.Pointer(unsafe.SliceData(s))
	case []int64:
		return unsafe.Pointer(unsafe.SliceData(s))
	case []int32:
		return unsafe.Pointer(unsafe.SliceData(s))
	case []int16:
		return unsafe.Pointer(unsafe.SliceData(s))
	case []int8:
		return unsafe.Pointer(unsafe.SliceData(s))
	case []uint8:
		return unsafe.Pointer(unsafe.SliceData(s))
	case []uint16:
		return unsafe.Pointer(unsafe.SliceData(s))
	case []uint32:
		return unsafe.Pointer(unsafe.SliceData(s))
	case []uint64:
		return unsafe.Pointer(unsafe.SliceData(s))
	case []bool:
		return unsafe.Pointer(unsafe.SliceData(s))
	}
	return nil
}

// plannable reports whether tensors of dtype d can live in an arena: plain
// numbers without pointers, whose zero bytes are the zero value.
func plannable(d graph.DType) bool {
	switch d {
	case graph.Float32, graph.Float64, graph.Int8, graph.Int16, graph.Int32, graph.Int64,
		graph.Uint8, graph.Uint16, graph.Uint32, graph.Uint64, graph.Float16, graph.BFloat16, graph.Bool:
		return true
	}
	return false
}

// typedView makes a slice of n elements of d's Go type over memory at p.
func typedView(d graph.DType, p unsafe.Pointer, n int) any {
	if n == 0 {
		s, _ := graph.MakeSlice(d, 0)
		return s
	}
	switch d {
	case graph.Float32:
		return unsafe.Slice((*float32)(p), n)
	case graph.Float64:
		return unsafe.Slice((*float64)(p), n)
	case graph.Int8:
		return unsafe.Slice((*int8)(p), n)
	case graph.Int16:
		return unsafe.Slice((*int16)(p), n)
	case graph.Int32:
		return unsafe.Slice((*int32)(p), n)
	case graph.Int64:
		return unsafe.Slice((*int64)(p), n)
	case graph.Uint8:
		return unsafe.Slice((*uint8)(p), n)
	case graph.Uint16, graph.Float16, graph.BFloat16:
		return unsafe.Slice((*uint16)(p), n)
	case graph.Uint32:
		return unsafe.Slice((*uint32)(p), n)
	case graph.Uint64:
		return unsafe.Slice((*uint64)(p), n)
	case graph.Bool:
		return unsafe.Slice((*bool)(p), n)
	}
	return nil
}

// interval is one allocation to place: size bytes, live from step start to
// step end inclusive.
type interval struct {
	size       int64
	start, end int
}

// placeIntervals assigns each interval an offset so that intervals live at
// a common step never overlap in memory, and returns the offsets and the
// total size. Greedy: largest first, each at the lowest gap that fits
// among the already placed intervals it overlaps in time.
func placeIntervals(items []interval) ([]int64, int64) {
	order := make([]int, len(items))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		ia, ib := items[a], items[b]
		switch {
		case ia.size != ib.size:
			if ia.size > ib.size {
				return -1
			}
			return 1
		case ia.start != ib.start:
			return ia.start - ib.start
		}
		return 0
	})
	offsets := make([]int64, len(items))
	var placed []int // indices, by increasing offset
	var total int64
	var conflicts []int
	for _, i := range order {
		it := items[i]
		conflicts = conflicts[:0]
		for _, j := range placed {
			if items[j].start <= it.end && it.start <= items[j].end {
				conflicts = append(conflicts, j)
			}
		}
		var off int64
		for _, j := range conflicts { // increasing offset
			if offsets[j]-off >= it.size {
				break
			}
			if end := offsets[j] + items[j].size; end > off {
				off = end
			}
		}
		offsets[i] = off
		at, _ := slices.BinarySearchFunc(placed, off, func(j int, o int64) int {
			switch {
			case offsets[j] < o:
				return -1
			case offsets[j] > o:
				return 1
			}
			return 0
		})
		placed = slices.Insert(placed, at, i)
		if off+it.size > total {
			total = off + it.size
		}
	}
	return offsets, total
}

// memSlot is one planned allocation: the request a step's kernel makes
// (dtype, element count) and where its storage lies in the arena.
type memSlot struct {
	dtype      graph.DType
	elems      int
	rank       int
	off, bytes int64
	step, end  int
}

// memPlan is the memory plan of one specialised plan.
type memPlan struct {
	slots []memSlot
	// perStep lists, for each step, the slots of its allocation requests
	// in request order.
	perStep [][]int32
	// expect gives, for each step and output, the slot its data lies in
	// (-1: not in the arena).
	expect [][]int32
	stats  MemoryStats
	// donate gives, for each step, the inputs whose storage its kernel
	// may write over (kern.Context.Donated; memplan_donate.go).
	donate []uint64
	// usable is false when the record found values the plan cannot keep
	// sound (stats.Unplanned says which): runs then use the heap.
	usable bool
	// peakLive is the arena's live set at its fullest step.
	peakLive PeakLive
}

// recorder watches a plan's first run: it serves allocations from the heap
// and notes their sizes, which values share them, and how long they live.
type recorder struct {
	mu     sync.Mutex
	nsteps int
	last   []int
	allocs []allocRec
	live   []int // allocations still in use, by index
	// perStep, expect and donate as in memPlan, by allocation index.
	perStep [][]int32
	expect  [][]int32
	donate  []uint64
	// Storage the plan does not own: values allocated by kernels outside
	// kern.New, by address (for the peak estimate), and the addresses of
	// inputs and initializers (never counted).
	heap     map[uintptr]*heapRec
	heapRecs []*heapRec
	fed      map[uintptr]bool
	stats    MemoryStats
	// unusable says why the record cannot become a plan ("" if it can).
	unusable string
	// spare holds the storage of retired allocations by byte size: later
	// requests of the same size reuse it, so that the recording run holds
	// about the plan's live set rather than one buffer per request.
	spare map[int][]unsafe.Pointer
	// p is the plan being recorded (for naming values in the peak's
	// live set).
	p *plan
}

type allocRec struct {
	step  int
	dtype graph.DType
	elems int
	rank  int
	ptr   uintptr
	bytes int
	end   int
	t     *graph.Tensor // keeps the storage (and its address) while live
	// value is the slot of the first value found in this allocation (-1
	// before one is).
	value int
}

type heapRec struct {
	bytes      int64
	start, end int
}

// begin starts recording a run of p whose inputs and initializers are in fr.
func (r *recorder) begin(p *plan, fr *frame) {
	*r = recorder{
		nsteps:  len(p.steps),
		last:    lastUses(p),
		perStep: make([][]int32, len(p.steps)),
		expect:  make([][]int32, len(p.steps)),
		donate:  make([]uint64, len(p.steps)),
		heap:    map[uintptr]*heapRec{},
		fed:     map[uintptr]bool{},
		spare:   map[int][]unsafe.Pointer{},
		p:       p,
	}
	for slot, t := range fr.vals {
		ptr, n := dataRange(t)
		if n == 0 || r.fed[ptr] {
			continue
		}
		r.fed[ptr] = true
		if _, isInit := p.g.Initializers[p.names[slot]]; isInit {
			r.stats.WeightBytes += int64(n)
		} else {
			r.stats.InputBytes += int64(n)
		}
	}
}

// alloc serves one request of step s, from the storage of an allocation
// already retired when one of the same byte size is, from the heap
// otherwise, and records it.
func (r *recorder) alloc(s int, d graph.DType, shape []int) *graph.Tensor {
	if !plannable(d) {
		return nil
	}
	elems, err := graph.NumElements(shape)
	if err != nil {
		return nil
	}
	r.mu.Lock()
	var t *graph.Tensor
	if size := elems * d.Size(); size > 0 {
		if free := r.spare[size]; len(free) > 0 {
			at := free[len(free)-1]
			r.spare[size] = free[:len(free)-1]
			clear(unsafe.Slice((*byte)(at), size))
			t = &graph.Tensor{DType: d, Shape: append([]int{}, shape...), Data: typedView(d, at, elems)}
		}
	}
	r.mu.Unlock()
	if t == nil {
		if t, err = graph.NewTensor(d, shape); err != nil {
			return nil
		}
	}
	ptr, n := dataRange(t)
	r.mu.Lock()
	id := len(r.allocs)
	r.allocs = append(r.allocs, allocRec{step: s, dtype: d, elems: t.Size(), rank: len(shape), ptr: ptr, bytes: n, end: s, t: t, value: -1})
	r.perStep[s] = append(r.perStep[s], int32(id))
	r.live = append(r.live, id)
	r.mu.Unlock()
	return t
}

// find returns the live allocation holding [ptr, ptr+n), or -1.
func (r *recorder) find(ptr uintptr, n int) int {
	for _, id := range r.live {
		a := &r.allocs[id]
		if a.bytes > 0 && ptr >= a.ptr && ptr+uintptr(n) <= a.ptr+uintptr(a.bytes) {
			return id
		}
	}
	return -1
}

// endStep notes where step s's outputs live and retires the allocations
// nothing live uses any more.
func (r *recorder) endStep(s int, st *step, fr *frame) {
	exp := make([]int32, len(st.out))
	for j, slot := range st.out {
		exp[j] = -1
		if slot < 0 {
			continue
		}
		if v := fr.vals[slot]; v != nil && v.IsContainer() && r.unusable == "" {
			// Sequences and optionals hold tensors that may live in the
			// arena, out of sight of the checks that keep the plan sound.
			r.unusable = st.node.Errorf("makes a %v value, whose elements the memory plan does not track", v.DType).Error()
		}
		end := max(r.last[slot], s)
		ptr, n := dataRange(fr.vals[slot])
		if n == 0 {
			continue
		}
		if id := r.find(ptr, n); id >= 0 {
			exp[j] = int32(id)
			r.allocs[id].end = max(r.allocs[id].end, end)
			if r.allocs[id].value < 0 {
				r.allocs[id].value = slot
			}
			continue
		}
		if r.fed[ptr] {
			continue
		}
		h := r.heap[ptr]
		if h == nil || h.end < s { // new storage (or a dead value's address reused)
			if r.stats.HeapOps == nil {
				r.stats.HeapOps = map[string]int64{}
			}
			r.stats.HeapOps[st.node.OpType] += int64(n)
			h = &heapRec{bytes: int64(n), start: s, end: end}
			r.heap[ptr] = h
			r.heapRecs = append(r.heapRecs, h)
		}
		h.end = max(h.end, end)
	}
	r.expect[s] = exp
	// Values read for the last time by this step (and outputs nothing
	// reads) leave the frame, so that the run holds only what is live.
	for _, slot := range st.in {
		if slot >= 0 && r.last[slot] == s {
			fr.vals[slot] = nil
		}
	}
	for _, slot := range st.out {
		if slot >= 0 && r.last[slot] < s {
			fr.vals[slot] = nil
		}
	}
	keep := r.live[:0]
	for _, id := range r.live {
		a := &r.allocs[id]
		if a.end <= s {
			if at := dataPointer(a.t); at != nil {
				r.spare[a.bytes] = append(r.spare[a.bytes], at)
				releasePages(at, a.bytes)
			}
			a.t = nil
			continue
		}
		keep = append(keep, id)
	}
	r.live = keep
}

// finish turns the record into a plan.
func (r *recorder) finish() *memPlan {
	mp := &memPlan{perStep: r.perStep, expect: r.expect, donate: r.donate, slots: make([]memSlot, len(r.allocs))}
	items := make([]interval, len(r.allocs))
	for i, a := range r.allocs {
		end := min(a.end, r.nsteps)
		size := (int64(a.bytes) + arenaAlign - 1) / arenaAlign * arenaAlign
		items[i] = interval{size: size, start: a.step, end: end}
		mp.slots[i] = memSlot{dtype: a.dtype, elems: a.elems, rank: a.rank, bytes: int64(a.bytes), step: a.step, end: end}
		r.stats.TotalBytes += int64(a.bytes)
		if end >= r.nsteps {
			r.stats.OutputBytes += int64(a.bytes)
		}
	}
	mp.peakLive = r.peakLive()
	offsets, total := placeIntervals(items)
	for i := range mp.slots {
		mp.slots[i].off = offsets[i]
	}
	st := r.stats
	st.Planned = r.unusable == ""
	st.Unplanned = r.unusable
	mp.usable = st.Planned
	st.ArenaBytes = total
	st.Tensors = len(r.allocs)
	// Peak of the storage the plan does not own, step by step.
	delta := make([]int64, r.nsteps+2)
	for _, h := range r.heapRecs {
		delta[h.start] += h.bytes
		delta[min(h.end, r.nsteps)+1] -= h.bytes
		st.TotalBytes += h.bytes
	}
	var cur int64
	for _, d := range delta {
		cur += d
		st.HeapPeakBytes = max(st.HeapPeakBytes, cur)
	}
	st.PeakBytes = st.ArenaBytes + st.HeapPeakBytes
	mp.stats = st
	r.allocs, r.live, r.heap, r.heapRecs, r.fed, r.spare, r.p = nil, nil, nil, nil, nil, nil, nil
	return mp
}
