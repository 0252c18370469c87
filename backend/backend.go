package backend

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/onnxtrain/onnxtrain/graph"
)

// Backend compiles graphs into executables for one kind of device.
type Backend interface {
	// Name is the name the backend is registered under ("cpu", "cuda").
	Name() string
	// Compile prepares a model for repeated execution.
	Compile(m *graph.Model, opts CompileOptions) (Executable, error)
	// Supports reports whether the backend can run the op at the given
	// opset, either with a kernel of its own or by lowering it to primitives.
	Supports(domain, opType string, opset int64) bool
}

// CompileOptions tune compilation.
type CompileOptions struct {
	// Seed seeds the random ops (Dropout, RandomNormal, ...).
	Seed int64
	// NoFold disables constant folding (for debugging and tests).
	NoFold bool
	// StaticShapes promises that every input is fed with the shape the
	// graph declares for it (every dimension known): a backend may then
	// run the graph as compiled instead of keeping a copy specialised to
	// the fed shapes (optim's step programs, built for their tensors).
	StaticShapes bool
	// DisableFused makes the backend run the lowered (primitive) form of
	// every op that has one, even where it has a fused kernel. Tests use it
	// to check that lowerings agree with the fused kernels.
	DisableFused bool
	// PrimitivesOnly restricts the backend to its kernels for the
	// primitive and extended sets (graph.PrimitiveOps, graph.ExtendedOps):
	// every other op runs in its lowered form and no fused or direct
	// kernel is used. Conformance and golden tests use it to check that
	// the primitive set is enough (docs/primitives.md).
	PrimitivesOnly bool
	// State declares the graph inputs that are state buffers the
	// executable owns (see the package comment).
	State []StateSpec
	// ShareState, when set, is an executable of the same backend whose
	// state buffers this one uses (by name) and adds its own to.
	ShareState Executable
	// Repeated says the executable will run many times (a training
	// step): a backend may then set up for its steady state at the end of
	// the first run rather than on the second (the CPU allocates and
	// faults in its memory plan's storage then), so that the second run
	// is as fast as the later ones. Without it, an executable run once
	// never pays for that storage.
	Repeated bool
	// Tuning chooses between equivalent computations (options.go).
	Tuning
}

// StateSpec declares one state buffer of a compiled program.
type StateSpec struct {
	// Name is the graph input bound to the buffer.
	Name string
	// Init is the initial value. Backends whose memory is the host's may
	// adopt it as the buffer itself.
	Init *graph.Tensor
	// UpdatedBy is the graph output whose value replaces the state's after
	// each Run ("" when this executable only reads it).
	UpdatedBy string
}

// Stateful is implemented by executables compiled with state.
type Stateful interface {
	// StateNames lists the state buffers the executable can reach (its
	// own and the shared ones), sorted.
	StateNames() []string
	// ReadState copies the named buffer into dst (same dtype and size).
	ReadState(name string, dst *graph.Tensor) error
	// WriteState copies src into the named buffer (same dtype and size).
	WriteState(name string, src *graph.Tensor) error
	// HostState returns the buffer itself when it lives in host memory
	// (reads and writes of it need no ReadState/WriteState), or nil.
	HostState(name string) *graph.Tensor
	// StateTraffic reports the bytes moved so far, over the whole shared
	// set of state.
	StateTraffic() StateTraffic
}

// StateTraffic counts bytes moved between state buffers and elsewhere.
type StateTraffic struct {
	// ReadBytes and WriteBytes crossed between the backend and the host
	// through ReadState and WriteState (zero for a copy a host-memory
	// backend could skip because dst or src is the buffer itself).
	ReadBytes, WriteBytes int64
	// UpdateCopyBytes were copied inside the backend's memory after runs,
	// for state updates that could not be made in place.
	UpdateCopyBytes int64
}

// Executable runs a compiled model.
type Executable interface {
	// Run feeds the named inputs and returns every graph output by name.
	Run(ctx context.Context, inputs map[string]*graph.Tensor) (map[string]*graph.Tensor, error)
}

// RandomState is implemented by executables whose random ops (Dropout,
// RandomNormal, ...) draw from a generator that checkpoints can save and
// restore, so that a resumed run draws the same numbers.
type RandomState interface {
	RandomState() ([]byte, error)
	SetRandomState([]byte) error
}

var (
	mu       sync.RWMutex
	registry = map[string]func() (Backend, error){}
)

// Register makes a backend available under name. It panics when called
// twice with the same name: that is a programming error in an init function.
func Register(name string, open func() (Backend, error)) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := registry[name]; dup {
		panic("backend: Register called twice for " + name)
	}
	registry[name] = open
}

// Open returns the backend registered under name.
func Open(name string) (Backend, error) {
	mu.RLock()
	open, ok := registry[name]
	mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("backend: no backend named %q (have %v); is its package imported?", name, Names())
	}
	return open()
}

// Names lists the registered backends.
func Names() []string {
	mu.RLock()
	defer mu.RUnlock()
	var out []string
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
