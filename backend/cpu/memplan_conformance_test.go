package cpu

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"path/filepath"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/conformance"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/internal/testutil"
)

// planTally sums what the memory plans of a suite did.
type planTally struct {
	mu                     sync.Mutex
	runs, planned          int
	tensors                int
	misses, rescues        int64
	arenaBytes, totalBytes int64
	differing              []string
}

// twiceBackend compiles with the cpu backend; its executables run every
// input set twice with the same random state: the first run records the
// memory plan and allocates from the heap, the second runs in the arena.
// The second run's outputs are returned (the harness compares them with
// the expected ones) after checking that they equal the first run's bit
// for bit.
type twiceBackend struct {
	Backend
	tally *planTally
}

func (b *twiceBackend) Compile(m *graph.Model, opts backend.CompileOptions) (backend.Executable, error) {
	exe, err := b.Backend.Compile(m, opts)
	if err != nil {
		return nil, err
	}
	return &twiceExe{e: exe.(*Executable), tally: b.tally}, nil
}

type twiceExe struct {
	e     *Executable
	tally *planTally
}

func (x *twiceExe) Run(ctx context.Context, inputs map[string]*graph.Tensor) (map[string]*graph.Tensor, error) {
	x.e.reseed()
	first, err := x.e.Run(ctx, inputs)
	if err != nil {
		return nil, err
	}
	x.e.reseed()
	second, err := x.e.Run(ctx, inputs)
	if err != nil {
		return nil, fmt.Errorf("second run (in the arena): %w", err)
	}
	st := x.e.MemoryStats()
	x.tally.mu.Lock()
	defer x.tally.mu.Unlock()
	x.tally.runs++
	if st.Planned {
		x.tally.planned++
		x.tally.tensors += st.Tensors
		x.tally.misses += st.Misses
		x.tally.rescues += st.Rescues
		x.tally.arenaBytes += st.ArenaBytes
		x.tally.totalBytes += st.TotalBytes
	}
	for name, want := range first {
		if !sameBits(want, second[name]) {
			return nil, fmt.Errorf("output %q differs between the heap run and the arena run", name)
		}
	}
	return second, nil
}

// sameBits compares two values exactly (NaN payloads included).
func sameBits(a, b *graph.Tensor) bool {
	if a == nil || b == nil {
		return a == b
	}
	if a.DType != b.DType || !graph.SameShape(a.Shape, b.Shape) {
		return false
	}
	if ba, ok := rawBytes(a); ok {
		bb, ok := rawBytes(b)
		return ok && bytes.Equal(ba, bb)
	}
	if sa, ok := a.Data.([]*graph.Tensor); ok {
		sb, ok := b.Data.([]*graph.Tensor)
		if !ok || len(sa) != len(sb) {
			return false
		}
		for i := range sa {
			if !sameBits(sa[i], sb[i]) {
				return false
			}
		}
		return true
	}
	return fmt.Sprint(a.Data) == fmt.Sprint(b.Data)
}

// rawBytes returns the bytes of a plain numeric tensor.
func rawBytes(t *graph.Tensor) ([]byte, bool) {
	switch s := t.Data.(type) {
	case []float32:
		return asBytes(s), true
	case []float64:
		return asBytes(s), true
	case []int64:
		return asBytes(s), true
	case []int32:
		return asBytes(s), true
	case []int16:
		return asBytes(s), true
	case []int8:
		return asBytes(s), true
	case []uint8:
		return s, true
	case []uint16:
		return asBytes(s), true
	case []uint32:
		return asBytes(s), true
	case []uint64:
		return asBytes(s), true
	case []bool:
		return asBytes(s), true
	}
	return nil, false
}

func asBytes[T any](s []T) []byte {
	var zero T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(zero)))
}

// conformanceGaps mirrors conformance_test.go's known gaps (cases the
// backend does not pass with or without the plan).
var conformanceGaps = map[string]string{
	`^test_bernoulli`:                            "random: numpy's generator",
	`^test_adam_multiple$`:                       "the ONNX 1.12 model omits Adam's epsilon",
	`^test_training_dropout(_default)?(_mask)?$`: "random: numpy's generator",
}

// TestConformanceInArena runs the ONNX conformance suites with every case
// run twice: the arena run must give the heap run's outputs bit for bit,
// and pass the suite's own comparison.
func TestConformanceInArena(t *testing.T) {
	root := testutil.ONNXTestdata(t)
	// Storage that kernels declare they overwrite comes poisoned.
	poisonUninit.Store(true)
	defer poisonUninit.Store(false)
	suites := []string{"node", "simple", "pytorch-converted", "pytorch-operator"}
	if !testing.Short() {
		suites = append(suites, "light")
	}
	for _, suite := range suites {
		t.Run(suite, func(t *testing.T) {
			tally := &planTally{}
			b := &twiceBackend{tally: tally}
			results, err := conformance.Run(b, filepath.Join(root, suite), conformance.Options{Skip: conformanceGaps}, func(r conformance.Result) {
				if r.Status == conformance.Fail {
					t.Log(r.String())
				}
			})
			require.NoError(t, err)
			pass, fail, skip := conformance.Summary(results)
			t.Logf("%s: %d passed, %d failed, %d skipped; %d runs, %d planned, %d tensors placed, %d misses, %d rescues; arenas %.1f MiB against %.1f MiB without reuse",
				suite, pass, fail, skip, tally.runs, tally.planned, tally.tensors, tally.misses, tally.rescues,
				float64(tally.arenaBytes)/(1<<20), float64(tally.totalBytes)/(1<<20))
			for _, r := range results {
				assert.NotEqual(t, conformance.Fail, r.Status, "%s", r)
			}
			assert.Greater(t, tally.planned, 0, "some cases ran in an arena")
			assert.Greater(t, pass, 0)
			assert.False(t, math.IsNaN(float64(tally.arenaBytes)))
		})
	}
}
