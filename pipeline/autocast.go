package pipeline

import (
	"fmt"
	"maps"
	"sync"

	"github.com/onnxtrain/onnxtrain/graph"
)

// castTypes are the value types of the whole graph after lowering and
// StageConfig.AutoCast, computed once per plan: a tensor crossing a cut
// keeps the type it has in the one-process program (a bfloat16 product
// crosses as bfloat16), so that every stage's own autocast makes the
// choices the whole graph's did.
type castTypes struct {
	once  sync.Once
	types map[string]*graph.Type
	err   error
}

// castTypesFor returns the plan's whole-graph types under autoCast.
func (p *Plan) castTypesFor(autoCast func(*graph.Graph, int64) error) (map[string]*graph.Type, error) {
	p.cast.once.Do(func() {
		g := cloneGraph(p.g)
		for _, n := range g.Nodes {
			n.Attrs = maps.Clone(n.Attrs)
		}
		g.ValueInfo = maps.Clone(g.ValueInfo)
		opset := p.model.Opset()
		if err := graph.LowerForAutodiff(g, opset); err != nil {
			p.cast.err = err
			return
		}
		if err := autoCast(g, opset); err != nil {
			p.cast.err = err
			return
		}
		p.cast.types, p.cast.err = graph.InferShapes(g, opset, p.known)
	})
	if p.cast.err != nil {
		return nil, fmt.Errorf("mixed precision over the whole graph: %w", p.cast.err)
	}
	return p.cast.types, nil
}
