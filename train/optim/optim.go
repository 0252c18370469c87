package optim

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"sort"
	"strings"

	"github.com/onnxtrain/onnxtrain/graph"
)

// Param is one trainable tensor as the optimizer sees it.
type Param struct {
	// Name identifies the parameter, and its state, across checkpoints.
	Name string
	// Value is updated in place; float32.
	Value *graph.Tensor
	// Grad has Value's shape and dtype; a nil Grad skips the parameter.
	Grad *graph.Tensor
	// Group indexes the optimizer's groups (0: decay, 1: no decay by default).
	Group int
}

// Group holds the hyperparameters that differ between parameter groups.
type Group struct {
	// LR is the group's current learning rate: SetLR sets it to lr*LRScale.
	LR float64
	// LRScale multiplies the optimizer-wide learning rate; 0 means 1.
	LRScale float64
	// WeightDecay is the group's L2 (SGD, Adam) or decoupled (AdamW) decay.
	WeightDecay float64
}

// Optimizer updates parameters from their gradients.
type Optimizer interface {
	// Step applies one update using p.Grad, skipping params with a nil Grad.
	// On error nothing has been updated.
	Step(params []*Param) error
	// SetLR sets the learning rate of every group (times its LRScale).
	SetLR(lr float64)
	// LR is the optimizer-wide learning rate last set.
	LR() float64
	// State returns copies of every state tensor, named "<param>/<slot>",
	// plus "step" (int64, Step calls so far) and "lr" (float64).
	State() map[string]*graph.Tensor
	// LoadState replaces the state with (copies of) st, as State returned it.
	LoadState(st map[string]*graph.Tensor) error
}

// ErrState is wrapped by LoadState's errors about a malformed state.
var ErrState = errors.New("optimizer state")

// DecayGroup and NoDecayGroup are the groups GroupByDecay assigns.
const (
	DecayGroup   = 0
	NoDecayGroup = 1
)

// GroupByDecay puts each param in NoDecayGroup if it has rank 0 or 1
// (biases, and the scales of BatchNorm/LayerNorm) or noDecay reports true
// for it, and in DecayGroup otherwise. noDecay may be nil.
func GroupByDecay(params []*Param, noDecay func(p *Param) bool) {
	for _, p := range params {
		if (p.Value != nil && p.Value.Rank() <= 1) || (noDecay != nil && noDecay(p)) {
			p.Group = NoDecayGroup
		} else {
			p.Group = DecayGroup
		}
	}
}

// NameContains returns a GroupByDecay predicate that is true for params
// whose name contains any of subs (e.g. "norm", "bn", "ln_").
func NameContains(subs ...string) func(p *Param) bool {
	return func(p *Param) bool {
		for _, s := range subs {
			if strings.Contains(p.Name, s) {
				return true
			}
		}
		return false
	}
}

// makeGroups returns the configured groups, or the default pair (decay
// with wd, no decay), with LR set from lr.
func makeGroups(lr, wd float64, groups []Group) ([]Group, error) {
	if groups == nil {
		groups = []Group{{LRScale: 1, WeightDecay: wd}, {LRScale: 1}}
	} else {
		groups = append([]Group(nil), groups...)
	}
	if len(groups) == 0 {
		return nil, errors.New("optim: Groups is empty (leave it nil for the default groups)")
	}
	for i := range groups {
		if groups[i].LRScale == 0 {
			groups[i].LRScale = 1
		}
		if groups[i].LRScale < 0 || math.IsNaN(groups[i].LRScale) {
			return nil, fmt.Errorf("optim: group %d: invalid LRScale %v", i, groups[i].LRScale)
		}
		if groups[i].WeightDecay < 0 || math.IsNaN(groups[i].WeightDecay) {
			return nil, fmt.Errorf("optim: group %d: invalid weight decay %v", i, groups[i].WeightDecay)
		}
	}
	setGroupLR(groups, lr)
	return groups, nil
}

func setGroupLR(groups []Group, lr float64) {
	for i := range groups {
		if groups[i].LRScale == 1 {
			groups[i].LR = lr
		} else {
			groups[i].LR = lr * groups[i].LRScale
		}
	}
}

// checkParams validates params before any of them is updated. seen is
// the caller's set of names, kept between steps and cleared here, so that
// a step allocates no map (a fresh one of more than 8 entries would).
func checkParams(params []*Param, ngroups int, seen map[string]bool) error {
	clear(seen)
	for i, p := range params {
		if p == nil {
			return fmt.Errorf("optim: param %d is nil", i)
		}
		if p.Name == "" {
			return fmt.Errorf("optim: param %d has no name", i)
		}
		if seen[p.Name] {
			return fmt.Errorf("optim: param %q appears twice", p.Name)
		}
		seen[p.Name] = true
		if p.Group < 0 || p.Group >= ngroups {
			return fmt.Errorf("optim: param %q: group %d out of range (%d groups)", p.Name, p.Group, ngroups)
		}
		if p.Value == nil {
			return fmt.Errorf("optim: param %q has no value", p.Name)
		}
		if p.Value.DType != graph.Float32 || len(p.Value.Float32s()) != p.Value.Size() {
			return fmt.Errorf("optim: param %q: value must be float32 with %d elements, got %v", p.Name, p.Value.Size(), p.Value.DType)
		}
		if p.Grad == nil {
			continue
		}
		if p.Grad.DType != graph.Float32 || len(p.Grad.Float32s()) != p.Value.Size() {
			return fmt.Errorf("optim: param %q: gradient must be float32, got %v", p.Name, p.Grad.DType)
		}
		if !graph.SameShape(p.Grad.Shape, p.Value.Shape) {
			return fmt.Errorf("optim: param %q: gradient shape %v differs from value shape %v", p.Name, p.Grad.Shape, p.Value.Shape)
		}
	}
	return nil
}

// checkSlot validates a state tensor against the param's shape.
func checkSlot(name, slot string, t *graph.Tensor, shape []int) error {
	if t != nil && !graph.SameShape(t.Shape, shape) {
		return fmt.Errorf("optim: state %s/%s has shape %v, parameter has shape %v", name, slot, t.Shape, shape)
	}
	return nil
}

// splitKey splits "<param>/<slot>" at the last slash.
func splitKey(k string) (name, slot string, ok bool) {
	i := strings.LastIndexByte(k, '/')
	if i <= 0 || i == len(k)-1 {
		return "", "", false
	}
	return k[:i], k[i+1:], true
}

// sortedKeys lists m's keys in order, for deterministic error messages.
func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func float32State(key string, t *graph.Tensor) (*graph.Tensor, error) {
	if t == nil {
		return nil, fmt.Errorf("optim: %w: %s is nil", ErrState, key)
	}
	if t.DType != graph.Float32 || len(t.Float32s()) != t.Size() {
		return nil, fmt.Errorf("optim: %w: %s must be float32, got %v%v", ErrState, key, t.DType, t.Shape)
	}
	return t.Clone(), nil
}

// scalarState reads a 0-d (or 1-element) tensor of an integer or float dtype.
func scalarState(key string, t *graph.Tensor, wantInt bool) (float64, error) {
	if t == nil {
		return 0, fmt.Errorf("optim: %w: %s is nil", ErrState, key)
	}
	if t.Size() != 1 || t.Rank() > 1 {
		return 0, fmt.Errorf("optim: %w: %s must be a scalar, got shape %v", ErrState, key, t.Shape)
	}
	if wantInt && !t.DType.IsInt() {
		return 0, fmt.Errorf("optim: %w: %s must be an integer, got %v", ErrState, key, t.DType)
	}
	if !wantInt && !t.DType.IsFloat() {
		return 0, fmt.Errorf("optim: %w: %s must be a float, got %v", ErrState, key, t.DType)
	}
	if wantInt {
		v := t.Int(0)
		if v < 0 {
			return 0, fmt.Errorf("optim: %w: %s is negative (%d)", ErrState, key, v)
		}
		return float64(v), nil
	}
	return t.Float(0), nil
}

func int64Scalar(v int64) *graph.Tensor { return graph.FromInt64([]int64{v}) }

func float64Scalar(v float64) *graph.Tensor { return graph.FromFloat64([]float64{v}) }

// powInt returns x**n correctly rounded (or nearly: 256 bits of
// intermediate precision), as C's pow, which Python's ** calls, does for
// an integral exponent; Go's math.Pow is off by an ulp for about a third of
// the (β, step) pairs Adam needs.
func powInt(x float64, n int64) float64 {
	var w powWork
	return w.pow(x, n)
}

// powWork holds powInt's big floats, so that an optimizer that keeps one
// computes its bias corrections every step without allocating: each
// product goes to a third float (a product into one of its own operands
// would need a new mantissa), and the mantissas keep their capacity.
type powWork struct{ f [4]big.Float }

// pow is powInt in w's storage.
func (w *powWork) pow(x float64, n int64) float64 {
	if n == 0 {
		return 1
	}
	const prec = 256
	result, base, tmp := &w.f[0], &w.f[1], &w.f[2]
	result.SetPrec(prec).SetFloat64(1)
	base.SetPrec(prec).SetFloat64(x)
	tmp.SetPrec(prec)
	for n > 0 {
		if n&1 == 1 {
			tmp.Mul(result, base)
			result, tmp = tmp, result
		}
		n >>= 1
		if n > 0 {
			tmp.Mul(base, base)
			base, tmp = tmp, base
		}
	}
	return w.float64(result)
}

// float64 is x.Float64() (nearest, ties to even) without the temporary
// Float that allocates: x rounded to 53 bits in w's fourth float, then
// read as an integer mantissa and scaled. Zero and values far from 1
// (subnormal results among them) take x.Float64().
func (w *powWork) float64(x *big.Float) float64 {
	r := &w.f[3]
	r.SetPrec(53).Set(x)
	e := r.MantExp(nil) // r = m * 2**e, 0.5 <= |m| < 1
	if r.Sign() == 0 || e < -1000 || e > 1000 {
		f, _ := x.Float64()
		return f
	}
	r.SetMantExp(r, 53-e) // an integer of 53 bits
	if r.Sign() < 0 {
		r.Neg(r)
		u, _ := r.Uint64()
		return -math.Ldexp(float64(u), e-53)
	}
	u, _ := r.Uint64()
	return math.Ldexp(float64(u), e-53)
}
