package optim

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
)

func TestClipGradNormMatchesTorch(t *testing.T) {
	gold := loadNPZ(t, "testdata/clip_golden.npz")
	for ci := 0; ci < 2; ci++ {
		var ps []*Param
		for _, n := range paramNames {
			in := gold[fmt.Sprintf("%d/in/%s", ci, n)]
			require.NotNil(t, in)
			ps = append(ps, &Param{Name: n, Value: graph.Zeros(graph.Float32, in.Shape...), Grad: in.Clone()})
		}
		ps = append(ps, &Param{Name: "frozen", Value: graph.Zeros(graph.Float32, 2)}) // nil grad: ignored
		maxNorm := gold[fmt.Sprintf("%d/max_norm", ci)].Float(0)
		wantTotal := gold[fmt.Sprintf("%d/total", ci)].Float(0)
		total, err := ClipGradNorm(ps, maxNorm)
		require.NoError(t, err)
		assert.InDelta(t, wantTotal, total, 1e-6*wantTotal, "case %d", ci)
		clipped := false
		for _, p := range ps[:len(paramNames)] {
			want := gold[fmt.Sprintf("%d/out/%s", ci, p.Name)]
			rel, _ := maxRelDiff(p.Grad.Float32s(), want.Float32s())
			assert.LessOrEqual(t, rel, 1e-6, "case %d param %s", ci, p.Name)
			in := gold[fmt.Sprintf("%d/in/%s", ci, p.Name)]
			if p.Grad.Float32s()[0] != in.Float32s()[0] {
				clipped = true
			}
		}
		assert.Equal(t, total > maxNorm, clipped, "case %d: clipped only when the norm exceeds max", ci)
	}
}

func TestClipGradValue(t *testing.T) {
	p := &Param{Name: "p", Value: graph.Zeros(graph.Float32, 5),
		Grad: graph.FromFloat32([]float32{-3, -0.5, 0, 0.7, float32(math.Inf(1))}, 5)}
	require.NoError(t, ClipGradValue([]*Param{p, {Name: "none"}}, 0.6))
	assert.Equal(t, []float32{-0.6, -0.5, 0, 0.6, 0.6}, p.Grad.Float32s())
	assert.ErrorContains(t, ClipGradValue([]*Param{p}, -1), "invalid clip value")
	bad := &Param{Name: "h", Grad: graph.FromFloat64([]float64{1}, 1)}
	_, err := ClipGradNorm([]*Param{bad}, 1)
	assert.ErrorContains(t, err, `param 0 ("h"): gradient must be float32`)
}
