package cpu

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// Test kernels in their own domain: they allocate only through kern.New,
// so the executor's own allocations show.
const testDomain = "test.memplan"

// resultSlices gives each node one reusable result slice.
var resultSlices sync.Map // *graph.Node -> []*graph.Tensor

func result(n *graph.Node, t *graph.Tensor) []*graph.Tensor {
	v, ok := resultSlices.Load(n)
	if !ok {
		v, _ = resultSlices.LoadOrStore(n, make([]*graph.Tensor, 1))
	}
	out := v.([]*graph.Tensor)
	out[0] = t
	return out
}

// flipCalls counts Flip's calls, to alternate its behaviour.
var flipCalls sync.Map // *graph.Node -> *int

// addOne computes y = x + 1 (float32) into storage from kern.New.
func addOne(n *graph.Node, in []*graph.Tensor) (*graph.Tensor, error) {
	out, err := kern.New(n, graph.Float32, in[0].Shape)
	if err != nil {
		return nil, err
	}
	x, y := in[0].Float32s(), out.Float32s()
	for i := range y {
		y[i] = x[i] + 1
	}
	return out, nil
}

func init() {
	// AddOne reuses its result slice (so a run's allocations are the
	// executor's); a node is then never run by two runs at once.
	kern.RegisterSpec(testDomain, "AddOne", kern.Spec{Fn: func(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
		out, err := addOne(n, in)
		if err != nil {
			return nil, err
		}
		return result(n, out), nil
	}})
	// AddOneFresh returns a fresh result slice, for concurrent runs.
	kern.RegisterSpec(testDomain, "AddOneFresh", kern.Spec{Fn: func(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
		out, err := addOne(n, in)
		if err != nil {
			return nil, err
		}
		return []*graph.Tensor{out}, nil
	}})
	// Flip: y = x + 1, computed in one of two equal allocations; it
	// returns the first on odd calls and the second on even ones, so the
	// tensor a run returns is not the one the recording run returned.
	kern.RegisterSpec(testDomain, "Flip", kern.Spec{Fn: func(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
		a, err := kern.New(n, graph.Float32, in[0].Shape)
		if err != nil {
			return nil, err
		}
		b, err := kern.New(n, graph.Float32, in[0].Shape)
		if err != nil {
			return nil, err
		}
		v, _ := flipCalls.LoadOrStore(n, new(int))
		c := v.(*int)
		*c++
		out := a
		if *c%2 == 0 {
			out = b
		}
		x, y := in[0].Float32s(), out.Float32s()
		for i := range y {
			y[i] = x[i] + 1
		}
		return result(n, out), nil
	}})
	// Grow: y = x + 1 with a scratch allocation whose size depends on the
	// value of x[0] (a kernel that allocates differently from run to run).
	kern.RegisterSpec(testDomain, "Grow", kern.Spec{Fn: func(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
		x := in[0].Float32s()
		if _, err := kern.New(n, graph.Float32, []int{1 + int(x[0])%5}); err != nil {
			return nil, err
		}
		out, err := kern.New(n, graph.Float32, in[0].Shape)
		if err != nil {
			return nil, err
		}
		y := out.Float32s()
		for i := range y {
			y[i] = x[i] + 1
		}
		return result(n, out), nil
	}})
}

func vecType(n int) *graph.Type {
	return &graph.Type{Kind: graph.KindTensor, DType: graph.Float32, HasShape: true, Shape: []graph.Dim{{Value: int64(n), Known: true}}}
}

// chainModel: y = op(op(...op(x))), count nodes, x and y float32[size].
func chainModel(op string, count, size int) *graph.Model {
	g := graph.NewGraph("chain")
	g.Inputs = []*graph.ValueInfo{{Name: "x", Type: vecType(size)}}
	prev := "x"
	for i := 0; i < count; i++ {
		name := fmt.Sprintf("v%d", i)
		if i == count-1 {
			name = "y"
		}
		g.Nodes = append(g.Nodes, &graph.Node{Name: name, OpType: op, Domain: testDomain, Inputs: []string{prev}, Outputs: []string{name}})
		prev = name
	}
	g.Outputs = []*graph.ValueInfo{{Name: "y"}}
	return &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17, testDomain: 1}, Graph: g}
}

func compileTest(t *testing.T, m *graph.Model) *Executable {
	t.Helper()
	exe, err := (&Backend{}).Compile(m, backend.CompileOptions{})
	require.NoError(t, err)
	return exe.(*Executable)
}

func ramp(size int, start float32) *graph.Tensor {
	x := make([]float32, size)
	for i := range x {
		x[i] = start + float32(i)
	}
	return graph.FromFloat32(x, size)
}

func TestPlaceIntervals(t *testing.T) {
	// A chain: each value lives from its step to the next. Two buffers
	// suffice, alternating.
	var chain []interval
	for i := 0; i < 10; i++ {
		chain = append(chain, interval{size: 64, start: i, end: i + 1})
	}
	offsets, total := placeIntervals(chain)
	assert.Equal(t, int64(128), total)
	for i := range chain {
		assert.Equal(t, int64(64*(i%2)), offsets[i], "value %d", i)
	}
	// Disjoint in time: everything at offset 0.
	offsets, total = placeIntervals([]interval{{size: 128, start: 0, end: 0}, {size: 64, start: 1, end: 1}, {size: 192, start: 2, end: 3}})
	assert.Equal(t, int64(192), total)
	assert.Equal(t, []int64{0, 0, 0}, offsets)
	// All live together: the sum.
	_, total = placeIntervals([]interval{{size: 64, start: 0, end: 5}, {size: 128, start: 1, end: 4}, {size: 192, start: 2, end: 3}})
	assert.Equal(t, int64(384), total)
	// Random sets: no two intervals live at a common step overlap in
	// memory, and the total lies between the largest live sum (a lower
	// bound for any placement) and the sum of all sizes.
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 200; trial++ {
		items := make([]interval, 1+rng.IntN(40))
		var sum int64
		for i := range items {
			start := rng.IntN(30)
			items[i] = interval{size: int64(64 * (1 + rng.IntN(8))), start: start, end: start + rng.IntN(6)}
			sum += items[i].size
		}
		offsets, total := placeIntervals(items)
		var lower int64
		for s := 0; s < 40; s++ {
			var live int64
			for _, it := range items {
				if it.start <= s && s <= it.end {
					live += it.size
				}
			}
			lower = max(lower, live)
		}
		require.GreaterOrEqual(t, total, lower)
		require.LessOrEqual(t, total, sum)
		for i, a := range items {
			require.LessOrEqual(t, offsets[i]+a.size, total)
			for j := i + 1; j < len(items); j++ {
				b := items[j]
				if a.start <= b.end && b.start <= a.end {
					disjoint := offsets[i]+a.size <= offsets[j] || offsets[j]+b.size <= offsets[i]
					require.True(t, disjoint, "trial %d: intervals %d %+v at %d and %d %+v at %d overlap", trial, i, a, offsets[i], j, b, offsets[j])
				}
			}
		}
	}
}

func TestLastUses(t *testing.T) {
	// s = x + x; an If whose branches read s; y = Identity(x); outputs y
	// and the If's result.
	then := graph.NewGraph("then")
	then.Nodes = []*graph.Node{{Name: "t", OpType: "Identity", Inputs: []string{"s"}, Outputs: []string{"r"}}}
	then.Outputs = []*graph.ValueInfo{{Name: "r"}}
	g := graph.NewGraph("g")
	g.Inputs = []*graph.ValueInfo{{Name: "x", Type: vecType(2)}, {Name: "c"}}
	g.Nodes = []*graph.Node{
		{Name: "add", OpType: "Add", Inputs: []string{"x", "x"}, Outputs: []string{"s"}},
		{Name: "unused", OpType: "Neg", Inputs: []string{"x"}, Outputs: []string{"n"}},
		{Name: "if", OpType: "If", Inputs: []string{"c"}, Outputs: []string{"z"}, Attrs: map[string]*graph.Attr{
			"then_branch": {Name: "then_branch", Type: graph.AttrGraph, G: then},
			"else_branch": {Name: "else_branch", Type: graph.AttrGraph, G: then},
		}},
		{Name: "id", OpType: "Identity", Inputs: []string{"x"}, Outputs: []string{"y"}},
	}
	g.Outputs = []*graph.ValueInfo{{Name: "y"}, {Name: "z"}}
	e := &Executable{opset: 17}
	p, err := e.buildPlan(g)
	require.NoError(t, err)
	last := lastUses(p)
	at := func(name string) int { return last[p.index[name]] }
	assert.Equal(t, 3, at("x"), "x: read last by the Identity")
	assert.Equal(t, 2, at("s"), "s: read inside the If's branches")
	assert.Equal(t, -1, at("n"), "n: never read")
	assert.Equal(t, 4, at("y"), "graph outputs outlive the run")
	assert.Equal(t, 4, at("z"))
}

// TestChainRunsInTwoBuffers: a chain of n nodes needs two buffers of the
// value size whatever n, and a run allocates a constant number of objects
// (the outputs map), not one per node.
func TestChainRunsInTwoBuffers(t *testing.T) {
	ctx := context.Background()
	const size = 100 // 400 bytes, 448 aligned
	allocs := map[int]float64{}
	for _, count := range []int{8, 64} {
		exe := compileTest(t, chainModel("AddOne", count, size))
		x := ramp(size, 0)
		in := map[string]*graph.Tensor{"x": x}
		for run := 0; run < 3; run++ {
			out, err := exe.Run(ctx, in)
			require.NoError(t, err)
			require.Equal(t, float32(count), out["y"].Float32s()[0])
			require.Equal(t, float32(count+size-1), out["y"].Float32s()[size-1])
		}
		st := exe.MemoryStats()
		require.True(t, st.Planned)
		assert.Equal(t, int64(2*448), st.ArenaBytes, "%d nodes", count)
		assert.Equal(t, st.ArenaBytes, st.PeakBytes)
		assert.Equal(t, int64(count*400), st.TotalBytes)
		assert.Equal(t, int64(400), st.OutputBytes)
		assert.Equal(t, int64(400), st.InputBytes)
		assert.Equal(t, count, st.Tensors)
		assert.Zero(t, st.Misses)
		assert.Zero(t, st.Rescues)
		allocs[count] = testing.AllocsPerRun(20, func() {
			if _, err := exe.Run(ctx, in); err != nil {
				panic(err)
			}
		})
	}
	t.Logf("allocations per run: %v", allocs)
	if RaceEnabled {
		return
	}
	assert.Equal(t, allocs[8], allocs[64], "allocations per run do not grow with the number of nodes")
	assert.LessOrEqual(t, allocs[64], 4.0)
}

// TestViewsKeepTheirStorage: a Reshape of an early value is read at the
// end, after many same-size values have come and gone; the view keeps the
// early allocation live, so those values may not reuse it.
func TestViewsKeepTheirStorage(t *testing.T) {
	const size, count = 12, 6
	g := graph.NewGraph("views")
	g.Inputs = []*graph.ValueInfo{{Name: "x", Type: vecType(size)}}
	g.Initializers["shape"] = graph.FromInt64([]int64{3, 4}, 2)
	g.Initializers["back"] = graph.FromInt64([]int64{size}, 1)
	g.Initializers["two"] = graph.FromFloat32([]float32{2}, 1)
	g.Nodes = []*graph.Node{
		{Name: "a", OpType: "Mul", Inputs: []string{"x", "two"}, Outputs: []string{"a"}},
		{Name: "r", OpType: "Reshape", Inputs: []string{"a", "shape"}, Outputs: []string{"r"}},
		{Name: "i", OpType: "Identity", Inputs: []string{"r"}, Outputs: []string{"i"}},
		{Name: "f", OpType: "Reshape", Inputs: []string{"i", "back"}, Outputs: []string{"f"}},
	}
	prev := "x"
	for k := 0; k < count; k++ {
		name := fmt.Sprintf("t%d", k)
		g.Nodes = append(g.Nodes, &graph.Node{Name: name, OpType: "Mul", Inputs: []string{prev, "two"}, Outputs: []string{name}})
		prev = name
	}
	g.Nodes = append(g.Nodes, &graph.Node{Name: "y", OpType: "Add", Inputs: []string{"f", prev}, Outputs: []string{"y"}})
	g.Outputs = []*graph.ValueInfo{{Name: "y"}, {Name: "r"}}
	exe := compileTest(t, &graph.Model{IRVersion: 8, Opsets: map[string]int64{"": 17}, Graph: g})
	for run := 0; run < 4; run++ {
		x := ramp(size, float32(run))
		out, err := exe.Run(context.Background(), map[string]*graph.Tensor{"x": x})
		require.NoError(t, err)
		y, r := out["y"].Float32s(), out["r"].Float32s()
		require.Equal(t, []int{3, 4}, out["r"].Shape)
		for i, v := range x.Float32s() {
			// y = 2x + 2^count x
			require.Equal(t, 2*v+float32(1<<count)*v, y[i], "run %d, y[%d]", run, i)
			require.Equal(t, 2*v, r[i], "run %d, r[%d]", run, i)
		}
	}
	st := exe.MemoryStats()
	require.True(t, st.Planned)
	assert.Zero(t, st.Misses)
	assert.Zero(t, st.Rescues)
	// a (aliased by r, a graph output) and y outlive the run (48 bytes
	// each, 64 aligned). a has a buffer of its own all along; t0 another
	// (x is fed), which t1..t5 are written over, each Mul the last reader
	// of the one before (donated inputs, memplan_donate.go), and so is y,
	// the last reader of t5 (f, a view of the output a, is not given).
	assert.Equal(t, int64(2*48), st.OutputBytes, "a and y are outputs")
	assert.Equal(t, int64(2*64), st.ArenaBytes)
	assert.Equal(t, int64(2*48), st.TotalBytes)
}

// TestOutputsLiveUntilTheNextRun documents the contract: outputs share the
// arena with the next run, a run fed the previous run's outputs uses
// another arena, and without the plan outputs are the caller's.
func TestOutputsLiveUntilTheNextRun(t *testing.T) {
	ctx := context.Background()
	const size = 16
	exe := compileTest(t, chainModel("AddOne", 3, size))
	_, err := exe.Run(ctx, map[string]*graph.Tensor{"x": ramp(size, 0)}) // records
	require.NoError(t, err)
	first, err := exe.Run(ctx, map[string]*graph.Tensor{"x": ramp(size, 0)})
	require.NoError(t, err)
	kept := first["y"].Clone()
	_, err = exe.Run(ctx, map[string]*graph.Tensor{"x": ramp(size, 100)})
	require.NoError(t, err)
	assert.Equal(t, float32(103), first["y"].Float32s()[0], "the next run reused the output's storage")
	assert.Equal(t, float32(3), kept.Float32s()[0], "a clone is the caller's")

	// Feeding outputs back: y(k+1) = y(k) + 3.
	y := ramp(size, 0)
	for k := 1; k <= 6; k++ {
		out, err := exe.Run(ctx, map[string]*graph.Tensor{"x": y})
		require.NoError(t, err)
		y = out["y"]
		require.Equal(t, float32(3*k), y.Float32s()[0], "iteration %d", k)
		require.Equal(t, float32(3*k+size-1), y.Float32s()[size-1], "iteration %d", k)
	}
	st := exe.MemoryStats()
	assert.Equal(t, 2, st.Arenas, "two arenas alternate when outputs are fed back")
	assert.Zero(t, st.Rescues)

	exe.SetMemoryPlan(false)
	a, err := exe.Run(ctx, map[string]*graph.Tensor{"x": ramp(size, 0)})
	require.NoError(t, err)
	_, err = exe.Run(ctx, map[string]*graph.Tensor{"x": ramp(size, 100)})
	require.NoError(t, err)
	assert.Equal(t, float32(3), a["y"].Float32s()[0], "without the plan, outputs are never reused")
}

// TestUnexpectedAllocationsStaySound: kernels that allocate differently
// from the recording run get heap storage (misses) or have their outputs
// copied out of the arena (rescues), and the results stay right.
func TestUnexpectedAllocationsStaySound(t *testing.T) {
	ctx := context.Background()
	const size = 32
	for _, op := range []string{"Flip", "Grow"} {
		exe := compileTest(t, chainModel(op, 12, size))
		for run := 0; run < 6; run++ {
			x := ramp(size, float32(run))
			out, err := exe.Run(ctx, map[string]*graph.Tensor{"x": x})
			require.NoError(t, err)
			for i, v := range x.Float32s() {
				require.Equal(t, v+12, out["y"].Float32s()[i], "%s, run %d, y[%d]", op, run, i)
			}
		}
		st := exe.MemoryStats()
		require.True(t, st.Planned)
		switch op {
		case "Flip":
			assert.Greater(t, st.Rescues, int64(0), "Flip returns the other allocation every other run")
		case "Grow":
			assert.Greater(t, st.Misses, int64(0), "Grow's scratch size follows the data")
		}
	}
}

func TestConcurrentRuns(t *testing.T) {
	ctx := context.Background()
	const size, count = 64, 10
	exe := compileTest(t, chainModel("AddOneFresh", count, size))
	// Each goroutine reads its outputs after its Run returns, while the
	// others run: they need copies.
	exe.SetCopyOutputs(true)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for run := 0; run < 25; run++ {
				start := float32(1000*w + run)
				out, err := exe.Run(ctx, map[string]*graph.Tensor{"x": ramp(size, start)})
				if err != nil {
					errs <- err
					return
				}
				for i, v := range out["y"].Float32s() {
					if v != start+float32(i+count) {
						errs <- fmt.Errorf("worker %d run %d: y[%d] = %v, want %v", w, run, i, v, start+float32(i+count))
						return
					}
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st := exe.MemoryStats()
	assert.True(t, st.Planned)
	assert.LessOrEqual(t, st.Arenas, maxArenas)
	assert.GreaterOrEqual(t, st.Arenas, 1)
}

// TestArenasAreReleased: an executable that is dropped unbinds its nodes
// (and frees its arenas) once collected.
func TestArenasAreReleased(t *testing.T) {
	settle := func(want func(int64) bool) int64 {
		n := kern.Bound()
		for i := 0; i < 100 && !want(n); i++ {
			runtime.GC()
			time.Sleep(5 * time.Millisecond)
			n = kern.Bound()
		}
		return n
	}
	base := settle(func(int64) bool { return false })
	func() {
		exe := compileTest(t, chainModel("AddOne", 20, 8))
		for run := 0; run < 2; run++ {
			_, err := exe.Run(context.Background(), map[string]*graph.Tensor{"x": ramp(8, 0)})
			require.NoError(t, err)
		}
		assert.Equal(t, base+20, kern.Bound(), "one arena's 20 nodes are bound")
		runtime.KeepAlive(exe)
	}()
	assert.LessOrEqual(t, settle(func(n int64) bool { return n <= base }), base, "the collected executable's nodes are unbound")
}

// TestMemoryStatsWithoutPlan: NoFold (the general plan) runs on the heap.
func TestMemoryStatsWithoutPlan(t *testing.T) {
	exe, err := (&Backend{}).Compile(chainModel("AddOne", 3, 4), backend.CompileOptions{NoFold: true})
	require.NoError(t, err)
	e := exe.(*Executable)
	for run := 0; run < 2; run++ {
		_, err := e.Run(context.Background(), map[string]*graph.Tensor{"x": ramp(4, 0)})
		require.NoError(t, err)
	}
	assert.False(t, e.MemoryStats().Planned)
	assert.Zero(t, e.PeakBytes())
	assert.Zero(t, e.WeightBytes())
}

// SetPoisonUninit turns on (or off) the filling of uninitialised planned
// storage with 0xff bytes, for the tests of package cpu_test.
func SetPoisonUninit(on bool) { poisonUninit.Store(on) }

func init() {
	// KeepFirst: y has x's shape; y[0] = x[0] + 1 and the rest is left as
	// the allocator served it, from kern.NewUninit (uninit=1) or kern.New.
	kern.RegisterSpec(testDomain, "KeepFirst", kern.Spec{Fn: func(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
		alloc := kern.New
		if n.AttrInt("uninit", 0) != 0 {
			alloc = kern.NewUninit
		}
		out, err := alloc(n, graph.Float32, in[0].Shape)
		if err != nil {
			return nil, err
		}
		out.Float32s()[0] = in[0].Float32s()[0] + 1
		return []*graph.Tensor{out}, nil
	}})
}

// TestUninitStorage: storage a kernel asks for with kern.NewUninit comes
// from the arena as the previous tensor left it (poisoned here), not
// zeroed; kern.New's is zeroed on every run; on the recording run both are
// zeroed.
func TestUninitStorage(t *testing.T) {
	SetPoisonUninit(true)
	defer SetPoisonUninit(false)
	for _, uninit := range []int64{0, 1} {
		m := chainModel("AddOne", 3, 8)
		n := m.Graph.Nodes[1]
		n.OpType = "KeepFirst"
		n.Attrs = map[string]*graph.Attr{"uninit": {Name: "uninit", Type: graph.AttrInt, I: uninit}}
		exe := compileTest(t, m)
		for run := 0; run < 3; run++ {
			out, err := exe.Run(context.Background(), map[string]*graph.Tensor{"x": ramp(8, 0)})
			require.NoError(t, err)
			y := out["y"].Float32s()
			assert.Equal(t, float32(3), y[0], "run %d", run)
			for i := 1; i < 8; i++ {
				if uninit == 1 && run > 0 {
					assert.True(t, y[i] != y[i], "uninit run %d: y[%d] = %v, want the poison (NaN)+1", run, i, y[i])
				} else {
					assert.Equal(t, float32(1), y[i], "uninit %d run %d: y[%d] (zeroed storage + 1)", uninit, run, i)
				}
			}
		}
		assert.True(t, exe.MemoryStats().Planned)
	}
}

// TestRecordingRunHoldsLiveSet: the recording run frees each value at its
// last use and serves later requests of the same size from the storage of
// retired ones, so a long chain runs in a few buffers already on its first
// run (here: the live bytes the runtime reports stay far below the sum of
// the chain's values).
func TestRecordingRunHoldsLiveSet(t *testing.T) {
	const count, size = 64, 1 << 18 // 64 values of 1 MiB
	exe := compileTest(t, chainModel("AddOne", count, size))
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	out, err := exe.Run(context.Background(), map[string]*graph.Tensor{"x": ramp(size, 0)})
	require.NoError(t, err)
	runtime.ReadMemStats(&after)
	assert.Equal(t, float32(count), out["y"].Float32s()[0])
	allocated := int64(after.TotalAlloc - before.TotalAlloc)
	st := exe.MemoryStats()
	t.Logf("recording run allocated %.1f MiB; all tensors %.1f MiB, arena %.1f MiB", mib(allocated), mib(st.TotalBytes), mib(st.ArenaBytes))
	assert.Equal(t, int64(count*size*4), st.TotalBytes)
	assert.Less(t, allocated, st.TotalBytes/8, "the recording run reuses retired storage")
	assert.Equal(t, int64(2*size*4), st.ArenaBytes)
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// arenaStorage reports, for the plan of the latest run, how many of its
// arenas hold their storage.
func arenaStorage(exe *Executable) (served, arenas int) {
	p := exe.last.Load()
	p.mem.mu.Lock()
	defer p.mem.mu.Unlock()
	for _, a := range p.mem.free {
		if a.plan != nil {
			served++
		}
	}
	return served, p.mem.arenas
}

// TestRepeatedServesTheArenaAfterTheFirstRun: a Repeated executable's
// recording run ends with its arena's storage allocated, so the second
// run does not fault it in; without Repeated the storage comes on the
// second run. A plan recorded later (other input shapes) is lazy either
// way, and the results are the same.
func TestRepeatedServesTheArenaAfterTheFirstRun(t *testing.T) {
	ctx := context.Background()
	for _, repeated := range []bool{false, true} {
		t.Run(fmt.Sprint("repeated=", repeated), func(t *testing.T) {
			m := chainModel("AddOne", 8, 100)
			m.Graph.Inputs[0].Type.Shape = []graph.Dim{{Param: "n"}} // any length: a plan per length
			be, err := (&Backend{}).Compile(m, backend.CompileOptions{Repeated: repeated})
			require.NoError(t, err)
			exe := be.(*Executable)
			run := func(size int) {
				out, err := exe.Run(ctx, map[string]*graph.Tensor{"x": ramp(size, 0)})
				require.NoError(t, err)
				require.Equal(t, float32(8+size-1), out["y"].Float32s()[size-1])
			}
			run(100)
			served, arenas := arenaStorage(exe)
			assert.Equal(t, 1, arenas)
			want := 0
			if repeated {
				want = 1
			}
			assert.Equal(t, want, served, "arenas with storage after the recording run")
			run(100)
			served, _ = arenaStorage(exe)
			assert.Equal(t, 1, served, "after the second run")
			assert.True(t, exe.MemoryStats().Planned)

			run(50) // another shape: records a second plan
			served, arenas = arenaStorage(exe)
			assert.Equal(t, 1, arenas)
			assert.Zero(t, served, "a later plan stays lazy")
		})
	}
}
