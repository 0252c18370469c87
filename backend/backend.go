// Package backend defines what a compute backend is (the Backend and
// Executable interfaces) and keeps the registry backends add themselves to,
// the database/sql driver way: a backend package calls Register in its init,
// and users choose one by name with Open.
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
