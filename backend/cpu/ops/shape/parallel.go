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
	g := &t.plan
	switch d := t.dst.(type) {
	case []float32:
		gatherUnitsAny(d, t.src, t.fill, g, lo, hi)
	case []float64:
		gatherUnitsAny(d, t.src, t.fill, g, lo, hi)
	case []int8:
		gatherUnitsAny(d, t.src, t.fill, g, lo, hi)
	case []int16:
		gatherUnitsAny(d, t.src, t.fill, g, lo, hi)
	case []int32:
		gatherUnitsAny(d, t.src, t.fill, g, lo, hi)
	case []int64:
		gatherUnitsAny(d, t.src, t.fill, g, lo, hi)
	case []uint8:
		gatherUnitsAny(d, t.src, t.fill, g, lo, hi)
	case []uint16:
		gatherUnitsAny(d, t.src, t.fill, g, lo, hi)
	case []uint32:
		gatherUnitsAny(d, t.src, t.fill, g, lo, hi)
	case []uint64:
		gatherUnitsAny(d, t.src, t.fill, g, lo, hi)
	case []bool:
		gatherUnitsAny(d, t.src, t.fill, g, lo, hi)
	case []string:
		gatherUnitsAny(d, t.src, t.fill, g, lo, hi)
	}
}

// gatherUnitsAny is gatherUnits with the source and fill still untyped
// (run checks them first, so the assertion cannot fail here).
func gatherUnitsAny[T any](dst []T, srcAny, fillAny any, g *gatherPlan, lo, hi int) {
	src, fill, err := typedPair(dst, srcAny, fillAny)
	if err != nil {
		panic(err)
	}
	gatherUnits(dst, src, fill, g, lo, hi)
}

// run is gatherView(dst, src, base, maps, fill), split into contiguous
// ranges of units over the kernel pool when the output is large.
func (t *gatherTask) run(dst, src any, base int, maps []axisMap, fill any) error {
	if err := checkGatherTypes(dst, src, fill); err != nil {
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

// checkGatherTypes fails unless src (and fill, when not nil) hold dst's
// element type, which must be one a tensor may hold.
func checkGatherTypes(dst, src, fill any) error {
	switch d := dst.(type) {
	case []float32:
		return checkPair(d, src, fill)
	case []float64:
		return checkPair(d, src, fill)
	case []int8:
		return checkPair(d, src, fill)
	case []int16:
		return checkPair(d, src, fill)
	case []int32:
		return checkPair(d, src, fill)
	case []int64:
		return checkPair(d, src, fill)
	case []uint8:
		return checkPair(d, src, fill)
	case []uint16:
		return checkPair(d, src, fill)
	case []uint32:
		return checkPair(d, src, fill)
	case []uint64:
		return checkPair(d, src, fill)
	case []bool:
		return checkPair(d, src, fill)
	case []string:
		return checkPair(d, src, fill)
	}
	return fmt.Errorf("tensor data of Go type %T is not supported", dst)
}

// checkPair is typedPair's check alone.
func checkPair[T any](dst []T, src, fill any) error {
	_, _, err := typedPair(dst, src, fill)
	return err
}

// gatherIntoNode is gatherInto's copy: through the node's gatherTask.
func gatherIntoNode(n *graph.Node, dst, src any, base int, maps []axisMap, fill any) error {
	return kern.State[gatherTask](n).run(dst, src, base, maps, fill)
}
