package kern

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/graph"
)

// Kernel computes a node's outputs from its inputs. in[i] is nil for an
// omitted optional input. A kernel returns one tensor per declared output
// (trailing optional outputs that the node does not name may be nil or absent).
// Kernels must not modify their inputs, except where Context.InPlace allows.
type Kernel func(ctx *Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error)

// Spec is a registered kernel and what it accepts.
type Spec struct {
	Fn Kernel
	// Half is true when the kernel handles Float16/BFloat16 tensors itself.
	// Otherwise the executor converts half inputs to float32 and the float32
	// outputs back to the input's half type.
	Half bool
	// MinOpset and MaxOpset bound the opsets the kernel implements (0 = any).
	MinOpset, MaxOpset int64
	// Overwrites lists, in the order the kernel prefers them, the inputs
	// whose storage it may write its first output over when the executor
	// donates them (Context.Donated) and they have that output's dtype and
	// shape. The executor offers only these, and its static memory plan
	// assumes the kernel takes the first it can. A kernel that runs other
	// kernels on operands of its own passes them Context.Nested.
	Overwrites []int
}

// SubgraphRunner runs a subgraph (the body of If, Loop, Scan) in the scope of
// the node that holds it: names the subgraph does not define are looked up
// in the enclosing graphs.
type SubgraphRunner interface {
	RunSubgraph(g *graph.Graph, inputs []*graph.Tensor) ([]*graph.Tensor, error)
}

// Context is what a kernel may use besides its inputs.
type Context struct {
	// Opset is the ai.onnx opset version of the model.
	Opset int64
	// Opsets maps every imported domain to its version.
	Opsets map[string]int64
	// Rand is the seeded generator for random ops.
	Rand *rand.Rand
	// Sub runs subgraphs; nil outside an executor.
	Sub SubgraphRunner
	// Ctx is the context of the Run in progress (nil while folding
	// constants): kernels that talk to other processes take their
	// collective from it (backend.CollectiveFrom).
	Ctx context.Context
	// InPlace is set by the executor for a node whose outputs may be
	// written into the inputs they replace (graph.UpdatedInput): those
	// inputs are state buffers that the outputs update and that no later
	// node reads. Kernels of the optimizer-step ops then update their
	// operands in place instead of allocating new tensors.
	InPlace bool
	// Donated has bit i set when the executor hands input i's storage
	// to the kernel: the run reads no value that lies in it after this
	// node (the input's last reader is this node, it is not a graph
	// output, input or weight, no other input of the node shares its
	// storage, and no live view of it remains). A kernel may write an
	// output of the input's dtype and shape over it and return the
	// input's tensor as that output (MayOverwrite), saving a buffer and
	// the reads for ownership of a fresh one.
	Donated uint64
	// Winograd is the executable's compile option for 3×3 convolutions
	// (backend.Tuning.Winograd; the zero value is auto).
	Winograd backend.WinogradPolicy
}

// Nested is the Context for a kernel this one runs on operands of its
// own (a fused kernel's general path through the kernels it fuses): c
// without Donated, whose bits name this node's inputs, not those.
func (c *Context) Nested() *Context {
	if c == nil || c.Donated == 0 {
		return c
	}
	cp := *c
	cp.Donated = 0
	return &cp
}

// MayOverwrite reports whether input i's storage is the kernel's to
// write over (Donated); false for a nil Context.
func (c *Context) MayOverwrite(i int) bool {
	return c != nil && i >= 0 && i < 64 && c.Donated&(1<<uint(i)) != 0
}

// RunNested runs the kernel registered for domain:op (at ctx's opset) on
// args as part of node n's kernel — a fused kernel's general path through
// the kernels it fuses — with ctx.Nested(), so that n's donated inputs
// are not taken for those operands'. Errors name n.
func RunNested(ctx *Context, n *graph.Node, domain, op string, args []*graph.Tensor) ([]*graph.Tensor, error) {
	opset := int64(0)
	if ctx != nil {
		opset = ctx.Opset
	}
	spec, ok := Lookup(domain, op, opset)
	if !ok {
		return nil, n.Errorf("%w: no %s kernel", graph.ErrUnsupportedOp, op)
	}
	return spec.Fn(ctx.Nested(), n, args)
}

var registry = map[string][]Spec{}

func key(domain, op string) string {
	if domain == "ai.onnx" {
		domain = ""
	}
	return domain + ":" + op
}

// Register adds a kernel for op in the default (ai.onnx) domain with float32
// only float handling (half types are converted by the executor).
func Register(op string, fn Kernel) { RegisterSpec("", op, Spec{Fn: fn}) }

// RegisterHalf adds a kernel that handles every float dtype itself
// (typically a dtype-agnostic data movement op).
func RegisterHalf(op string, fn Kernel) { RegisterSpec("", op, Spec{Fn: fn, Half: true}) }

// RegisterSpec adds a kernel for op in domain.
func RegisterSpec(domain, op string, s Spec) {
	k := key(domain, op)
	registry[k] = append(registry[k], s)
}

// Lookup returns the kernel for op at opset, if any.
func Lookup(domain, op string, opset int64) (Spec, bool) {
	for _, s := range registry[key(domain, op)] {
		if (s.MinOpset == 0 || opset >= s.MinOpset) && (s.MaxOpset == 0 || opset <= s.MaxOpset) {
			return s, true
		}
	}
	return Spec{}, false
}

// Ops lists the registered op names (domain:op).
func Ops() []string {
	var out []string
	for k := range registry {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Errorf wraps an error with the node it concerns.
func Errorf(n *graph.Node, format string, args ...any) error { return n.Errorf(format, args...) }

// NormAxis maps a possibly negative axis into [0, rank).
func NormAxis(n *graph.Node, axis, rank int) (int, error) {
	if axis < -rank || axis >= rank {
		if rank == 0 && (axis == 0 || axis == -1) {
			return 0, nil
		}
		return 0, n.Errorf("axis %d is out of range for rank %d", axis, rank)
	}
	if axis < 0 {
		axis += rank
	}
	return axis, nil
}

// BroadcastShape computes the numpy-style broadcast of shapes.
func BroadcastShape(shapes ...[]int) ([]int, error) {
	rank := 0
	for _, s := range shapes {
		if len(s) > rank {
			rank = len(s)
		}
	}
	out := make([]int, rank)
	for i := range out {
		out[i] = 1
	}
	for _, s := range shapes {
		off := rank - len(s)
		for i, d := range s {
			o := out[off+i]
			switch {
			case o == d || d == 1:
			case o == 1:
				out[off+i] = d
			default:
				// (a copy: shapes itself stays on the caller's stack)
				return nil, fmt.Errorf("shapes %v cannot be broadcast together", append([][]int(nil), shapes...))
			}
		}
	}
	return out, nil
}

// BroadcastStrides returns strides for reading a tensor of shape `shape` as
// if it had shape `out` (0 on broadcast dimensions).
func BroadcastStrides(shape, out []int) []int {
	st := make([]int, len(out))
	off := len(out) - len(shape)
	acc := 1
	for i := len(shape) - 1; i >= 0; i-- {
		if shape[i] != 1 {
			st[off+i] = acc
		}
		acc *= shape[i]
	}
	return st
}

// BroadcastIndex returns, for each element of out (row-major), the flat index
// into a tensor of the given shape broadcast to out. Used by kernels that
// need a gather map; elementwise fast paths avoid it. The map is read-only:
// for a scalar out (no dims, the batch of a plain matrix product) it is a
// shared one.
func BroadcastIndex(shape, out []int) []int {
	if len(out) == 0 {
		return scalarIndex[:1:1]
	}
	key, cacheable := indexKeyOf(shape, out)
	if cacheable {
		indexCache.mu.Lock()
		idx, ok := indexCache.m[key]
		indexCache.mu.Unlock()
		if ok {
			return idx
		}
	}
	idx := broadcastIndex(shape, out)
	if cacheable && len(idx) <= maxCachedIndex {
		idx = idx[:len(idx):len(idx)]
		indexCache.mu.Lock()
		if indexCache.m == nil || len(indexCache.m) >= maxCachedIndexes {
			indexCache.m = map[indexKey][]int{}
		}
		indexCache.m[key] = idx
		indexCache.mu.Unlock()
	}
	return idx
}

// BroadcastIndex keeps the maps of small shapes (the batch dims of matrix
// products, a norm's scale), which kernels ask for on every call: a
// bounded cache by shape pair, emptied when full.
const (
	maxIndexRank     = 8
	maxCachedIndex   = 4096 // elements
	maxCachedIndexes = 256
)

type indexKey struct {
	rs, ro int
	s, o   [maxIndexRank]int
}

var indexCache struct {
	mu sync.Mutex
	m  map[indexKey][]int
}

func indexKeyOf(shape, out []int) (indexKey, bool) {
	var k indexKey
	if len(shape) > maxIndexRank || len(out) > maxIndexRank {
		return k, false
	}
	k.rs, k.ro = len(shape), len(out)
	copy(k.s[:], shape)
	copy(k.o[:], out)
	return k, true
}

// broadcastIndex builds BroadcastIndex's map.
func broadcastIndex(shape, out []int) []int {
	n := 1
	for _, d := range out {
		n *= d
	}
	idx := make([]int, n)
	st := BroadcastStrides(shape, out)
	counter := make([]int, len(out))
	cur := 0
	for i := 0; i < n; i++ {
		idx[i] = cur
		for d := len(out) - 1; d >= 0; d-- {
			counter[d]++
			cur += st[d]
			if counter[d] < out[d] {
				break
			}
			cur -= st[d] * counter[d]
			counter[d] = 0
		}
	}
	return idx
}

// scalarIndex is BroadcastIndex's map for a scalar out.
var scalarIndex = []int{0}

// New allocates a zeroed output tensor; it fails (rather than panics) on
// shapes that are negative or too large. When the executor has bound an
// Allocator to n (see Bind), the storage comes from its memory plan.
func New(n *graph.Node, d graph.DType, shape []int) (*graph.Tensor, error) {
	if boundNodes.Load() != 0 {
		if t := boundAlloc(n, d, shape, false); t != nil {
			return t, nil
		}
	}
	t, err := graph.NewTensor(d, shape)
	if err != nil {
		return nil, n.Errorf("output of shape %v: %w", shape, err)
	}
	return t, nil
}

// NewUninit is New for a kernel that writes every element of the tensor
// before it returns: storage from the executor's memory plan then comes
// without being zeroed first (storage from the heap is zeroed anyway). A
// kernel that accumulates into its output, or leaves some elements
// unwritten, must use New.
func NewUninit(n *graph.Node, d graph.DType, shape []int) (*graph.Tensor, error) {
	if boundNodes.Load() != 0 {
		if t := boundAlloc(n, d, shape, true); t != nil {
			return t, nil
		}
	}
	t, err := graph.NewTensor(d, shape)
	if err != nil {
		return nil, n.Errorf("output of shape %v: %w", shape, err)
	}
	return t, nil
}

// Need checks that inputs [0, count) are present.
func Need(n *graph.Node, in []*graph.Tensor, count int) error {
	if len(in) < count {
		return n.Errorf("needs %d inputs, has %d", count, len(in))
	}
	for i := 0; i < count; i++ {
		if in[i] == nil {
			return n.Errorf("input %d is required", i)
		}
	}
	return nil
}

// Opt returns in[i] or nil when absent.
func Opt(in []*graph.Tensor, i int) *graph.Tensor {
	if i < len(in) {
		return in[i]
	}
	return nil
}

// Cast converts t to dtype d (a new tensor; t itself when it already has d).
// Float to integer conversion truncates toward zero, as ONNX Cast does.
func Cast(t *graph.Tensor, d graph.DType) (*graph.Tensor, error) {
	if t.DType == d {
		return t, nil
	}
	out, err := graph.NewTensor(d, t.Shape)
	if err != nil {
		return nil, err
	}
	n := t.Size()
	switch dst := out.Data.(type) {
	case []float32:
		if src, ok := t.Data.([]uint16); ok && t.DType == graph.Float16 {
			for i, v := range src {
				dst[i] = graph.Float16ToFloat32(v)
			}
			return out, nil
		}
		for i := 0; i < n; i++ {
			dst[i] = float32(t.Float(i))
		}
	case []float64:
		for i := 0; i < n; i++ {
			dst[i] = t.Float(i)
		}
	case []bool:
		for i := 0; i < n; i++ {
			dst[i] = t.Float(i) != 0
		}
	case []string:
		return nil, fmt.Errorf("cast to string is not supported")
	default:
		if t.DType.IsInt() || t.DType == graph.Bool {
			for i := 0; i < n; i++ {
				setInt(out, i, t.Int(i))
			}
		} else {
			for i := 0; i < n; i++ {
				out.SetFloat(i, t.Float(i))
			}
		}
	}
	return out, nil
}

func setInt(t *graph.Tensor, i int, v int64) {
	switch s := t.Data.(type) {
	case []int64:
		s[i] = v
	case []int32:
		s[i] = int32(v)
	case []int16:
		s[i] = int16(v)
	case []int8:
		s[i] = int8(v)
	case []uint8:
		s[i] = uint8(v)
	case []uint16:
		if t.DType == graph.Uint16 {
			s[i] = uint16(v)
		} else {
			t.SetFloat(i, float64(v))
		}
	case []uint32:
		s[i] = uint32(v)
	case []uint64:
		s[i] = uint64(v)
	default:
		t.SetFloat(i, float64(v))
	}
}

// SetInt stores an integer at element i, converting to t's dtype.
func SetInt(t *graph.Tensor, i int, v int64) { setInt(t, i, v) }

// Reshape returns a tensor sharing t's data with a new shape.
func Reshape(t *graph.Tensor, shape []int) *graph.Tensor {
	return &graph.Tensor{DType: t.DType, Shape: append([]int{}, shape...), Data: t.Data}
}
