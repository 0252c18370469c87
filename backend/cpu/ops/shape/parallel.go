package shape

import (
	"fmt"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// copyGrain is the fewest output elements worth handing to another
// worker: a pure copy moves 2·4 bytes a float32 element, so 64 Ki elements
// are some 50 µs of one core's memory bandwidth, against a hand-off of a
// few µs to a spinning pool goroutine.
const copyGrain = 1 << 16

// copyWorkers is how many chunks a copy of elems output elements in units
// units takes: one per copyGrain elements, at most kern.Workers().
func copyWorkers(elems, units int) int {
	return min(kern.Workers(), elems/copyGrain, units)
}

// gatherTask is a gather (gatherView) in flight, kept in a node's state so
// that its fan-out allocates nothing: a chunk copies a range of the plan's
// units.
type gatherTask struct {
	dst, src, fill any
	plan           gatherPlan
	mapBuf         [stackRank]axisMap
}

// Chunk copies units [lo, hi).
func (t *gatherTask) Chunk(lo, hi int) {
	if err := gatherRange(t.dst, t.src, t.fill, &t.plan, lo, hi); err != nil {
		panic(err) // (checked by run)
	}
}

// gatherRange copies units [lo, hi) of g from src into dst (gatherUnits)
// once it has checked that src (and fill, when not nil) hold dst's element
// type, which must be one a tensor may hold; with lo == hi it only checks
// (g may then be nil).
func gatherRange(dst, src, fill any, g *gatherPlan, lo, hi int) error {
	switch d := dst.(type) {
	case []float32:
		return gatherUnitsAny(d, src, fill, g, lo, hi)
	case []float64:
		return gatherUnitsAny(d, src, fill, g, lo, hi)
	case []int8:
		return gatherUnitsAny(d, src, fill, g, lo, hi)
	case []int16:
		return gatherUnitsAny(d, src, fill, g, lo, hi)
	case []int32:
		return gatherUnitsAny(d, src, fill, g, lo, hi)
	case []int64:
		return gatherUnitsAny(d, src, fill, g, lo, hi)
	case []uint8:
		return gatherUnitsAny(d, src, fill, g, lo, hi)
	case []uint16:
		return gatherUnitsAny(d, src, fill, g, lo, hi)
	case []uint32:
		return gatherUnitsAny(d, src, fill, g, lo, hi)
	case []uint64:
		return gatherUnitsAny(d, src, fill, g, lo, hi)
	case []bool:
		return gatherUnitsAny(d, src, fill, g, lo, hi)
	case []string:
		return gatherUnitsAny(d, src, fill, g, lo, hi)
	}
	return fmt.Errorf("tensor data of Go type %T is not supported", dst)
}

// gatherUnitsAny is gatherUnits with the source and fill still untyped.
func gatherUnitsAny[T any](dst []T, srcAny, fillAny any, g *gatherPlan, lo, hi int) error {
	src, fill, err := typedPair(dst, srcAny, fillAny)
	if err != nil {
		return err
	}
	gatherUnits(dst, src, fill, g, lo, hi)
	return nil
}

// run is gatherView(dst, src, base, maps, fill), split into contiguous
// ranges of units over the kernel pool when the output is large.
func (t *gatherTask) run(dst, src any, base int, maps []axisMap, fill any) error {
	// The element types are checked once here, not in the chunks.
	if err := gatherRange(dst, src, fill, nil, 0, 0); err != nil {
		return err
	}
	if !t.plan.init(t.mapBuf[:], base, maps) {
		return nil
	}
	t.dst, t.src, t.fill = dst, src, fill
	g := &t.plan
	if w := copyWorkers(g.units*g.unitElems, g.units); w > 1 {
		kern.RunTask("shape worker", g.units, w, t)
	} else {
		t.Chunk(0, g.units)
	}
	// Neither the tensors nor the maps' tables are kept past the call.
	t.dst, t.src, t.fill, t.plan.maps = nil, nil, nil, nil
	clear(t.mapBuf[:])
	return nil
}

// CopyRows copies rows rows of w elements, row r read from src at
// off + r·stride, end to end into dst (the data of two tensors of one
// element type), through n's gather (gatherIntoNode): spread over the
// kernel pool by rows, or by pieces when the rows make one contiguous
// run. Concat's gradient (SplitLike) cuts its pieces with it.
func CopyRows(n *graph.Node, dst, src any, rows, w, stride, off int) error {
	maps := [2]axisMap{arith(rows, 0, stride), arith(w, 0, 1)}
	return gatherIntoNode(n, dst, src, off, maps[:], nil)
}

// gatherIntoNode is gatherInto's copy: through the node's gatherTask.
func gatherIntoNode(n *graph.Node, dst, src any, base int, maps []axisMap, fill any) error {
	return kern.State[gatherTask](n).run(dst, src, base, maps, fill)
}
