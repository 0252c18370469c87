// Package passes runs graph passes in one declared, checked order.
//
// Every transformation between an imported model and a compiled step is a
// Pass: a name, a function over the graph, and its order constraints
// (Requires, After, Before), declared with the pass and checked in code
// when a Pipeline is built, so that a wrong order is refused with an error
// that names both passes, never run. A fusion declares the fused ops it
// makes (Fuses); the pipeline runs it only when the backend declares all
// of them (backend.FusedOpsDeclarer, passed in Env.Fused), so a backend
// without those kernels keeps the decomposed graph.
//
// The standard compile-time passes are CompilePasses (every compile),
// SpecialisedPasses (once the input shapes are known) and SubgraphPasses
// (control-flow bodies); the training and evaluation builders of package
// train declare theirs in train/passes.go. docs/architecture.md lists them
// all with their constraints.
package passes

import (
	"errors"
	"fmt"
	"strings"

	"github.com/onnxtrain/onnxtrain/graph"
)

// Pass is one graph transformation and its place in the order.
type Pass struct {
	// Name identifies the pass in constraints and errors.
	Name string
	// Doc says in a line what the pass does.
	Doc string
	// Requires names passes that must run before this one: a pipeline
	// without them, or with them later, is refused.
	Requires []string
	// After names passes that, where a pipeline has them, must run before
	// this one.
	After []string
	// Before names passes that, where a pipeline has them, must run after
	// this one.
	Before []string
	// Fuses lists the fused ops (graph.FusedDomain) the pass makes; it runs
	// only when the backend declares every one of them (Env.Fused).
	Fuses []string
	// Run transforms g and returns how many rewrites it made.
	Run func(g *graph.Graph, env *Env) (int, error)
}

// Env is what a pipeline's passes may use besides the graph.
type Env struct {
	// Opset is the model's ai.onnx opset.
	Opset int64
	// Functions are the model's local functions (inline-functions).
	Functions map[string]*graph.Function
	// Evaluate runs one node on constant inputs; nil turns constant
	// folding off.
	Evaluate graph.Evaluator
	// Lower lowers the nodes the backend does not run with a kernel of its
	// own to primitives (the lower pass); nil lowers nothing.
	Lower func(g *graph.Graph) error
	// Fused are the fused ops the backend declares
	// (backend.DeclaredFusedOps).
	Fused map[string]bool
	// Shapes are the fed input shapes (specialize).
	Shapes map[string][]int
	// RecomputeAttention: recompute-attention-probs rewrites every
	// attention gradient, not only those over graph.RecomputeMinRatio
	// (backend.Tuning.RecomputeAttention).
	RecomputeAttention bool

	// counts are the rewrites of the passes that ran so far, by name.
	counts map[string]int
}

// Count returns how many rewrites the named pass made in this run of the
// pipeline (0 when it did not run).
func (e *Env) Count(name string) int { return e.counts[name] }

// ErrOrder is wrapped by the errors New and Continue return for passes in
// an order their constraints refuse.
var ErrOrder = errors.New("passes out of order")

// Pipeline is an ordered list of passes whose constraints hold.
type Pipeline struct {
	name   string
	prior  *Pipeline
	passes []Pass
}

// New checks the passes' order constraints and returns the pipeline that
// runs them in the given order.
func New(name string, passes ...Pass) (*Pipeline, error) {
	return Continue(nil, name, passes...)
}

// Continue is New for a pipeline that runs on the result of prior (for
// example once the input shapes are known): the passes of prior count as
// having run before these.
func Continue(prior *Pipeline, name string, passes ...Pass) (*Pipeline, error) {
	p := &Pipeline{name: name, prior: prior, passes: passes}
	if err := p.check(); err != nil {
		return nil, err
	}
	return p, nil
}

// Names lists the pipeline's passes in order (not those of a prior one).
func (p *Pipeline) Names() []string {
	out := make([]string, len(p.passes))
	for i, ps := range p.passes {
		out[i] = ps.Name
	}
	return out
}

// String is the pipeline's name and its passes in order.
func (p *Pipeline) String() string {
	return p.name + ": " + strings.Join(p.Names(), " → ")
}

// earlier reports whether a prior pipeline runs the named pass.
func (p *Pipeline) earlier(name string) bool {
	for q := p.prior; q != nil; q = q.prior {
		for _, ps := range q.passes {
			if ps.Name == name {
				return true
			}
		}
	}
	return false
}

// check refuses duplicate names, missing or later requirements, and
// After/Before constraints the order breaks.
func (p *Pipeline) check() error {
	at := map[string]int{}
	for i, ps := range p.passes {
		if ps.Name == "" {
			return fmt.Errorf("passes: pipeline %q: pass %d has no name", p.name, i+1)
		}
		if ps.Run == nil {
			return fmt.Errorf("passes: pipeline %q: pass %q has no Run function", p.name, ps.Name)
		}
		if j, dup := at[ps.Name]; dup {
			return fmt.Errorf("passes: pipeline %q: %w: pass %q appears twice (positions %d and %d)", p.name, ErrOrder, ps.Name, j+1, i+1)
		}
		at[ps.Name] = i
	}
	for i, ps := range p.passes {
		for _, r := range ps.Requires {
			j, ok := at[r]
			switch {
			case !ok && !p.earlier(r):
				return fmt.Errorf("passes: pipeline %q: %w: pass %q requires %q, which the pipeline does not run", p.name, ErrOrder, ps.Name, r)
			case ok && j > i:
				return fmt.Errorf("passes: pipeline %q: %w: pass %q (position %d) requires %q to run first, but it comes later (position %d)", p.name, ErrOrder, ps.Name, i+1, r, j+1)
			}
		}
		for _, a := range ps.After {
			if j, ok := at[a]; ok && j > i {
				return fmt.Errorf("passes: pipeline %q: %w: pass %q (position %d) must run after %q, which comes later (position %d)", p.name, ErrOrder, ps.Name, i+1, a, j+1)
			}
		}
		for _, b := range ps.Before {
			if j, ok := at[b]; ok && j < i {
				return fmt.Errorf("passes: pipeline %q: %w: pass %q (position %d) must run before %q, which comes earlier (position %d)", p.name, ErrOrder, ps.Name, i+1, b, j+1)
			}
			if p.earlier(b) {
				return fmt.Errorf("passes: pipeline %q: %w: pass %q must run before %q, which an earlier pipeline ran", p.name, ErrOrder, ps.Name, b)
			}
		}
	}
	return nil
}

// Stats are the rewrites each pass made (skipped passes are absent).
type Stats map[string]int

// Run runs the passes in order on g. A fusion whose fused ops env.Fused
// does not declare is skipped. An error names the pipeline and the pass.
func (p *Pipeline) Run(g *graph.Graph, env *Env) (Stats, error) {
	if env == nil {
		env = &Env{}
	}
	env.counts = map[string]int{}
	for _, ps := range p.passes {
		if !declared(env.Fused, ps.Fuses) {
			continue
		}
		n, err := ps.Run(g, env)
		if err != nil {
			return env.counts, fmt.Errorf("%s: %s: %w", p.name, ps.Name, err)
		}
		env.counts[ps.Name] = n
	}
	return env.counts, nil
}

// declared reports whether every op is in fused.
func declared(fused map[string]bool, ops []string) bool {
	for _, op := range ops {
		if !fused[op] {
			return false
		}
	}
	return true
}
