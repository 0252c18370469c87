package control

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/onnxtrain/onnxtrain/graph"
)

func TestRandomShapesAndDTypes(t *testing.T) {
	out := mustRun(t, 15, node("RandomUniform", nil, []string{"y"}, graph.IntsAttr("shape", 3, 4), graph.FloatAttr("low", 2), graph.FloatAttr("high", 3)))[0]
	assert.Equal(t, graph.Float32, out.DType)
	assert.Equal(t, []int{3, 4}, out.Shape)
	for _, v := range out.Float32s() {
		assert.True(t, v >= 2 && v < 3, "%v in [2, 3)", v)
	}

	out = mustRun(t, 15, node("RandomNormal", nil, []string{"y"}, graph.IntsAttr("shape", 5), graph.IntAttr("dtype", int64(graph.Float16))))[0]
	assert.Equal(t, graph.Float16, out.DType)
	assert.Len(t, out.Data, 5)

	x := graph.FromFloat64(make([]float64, 6), 2, 3)
	out = mustRun(t, 15, node("RandomNormalLike", []string{"x"}, []string{"y"}), x)[0]
	assert.Equal(t, graph.Float64, out.DType)
	assert.Equal(t, []int{2, 3}, out.Shape)

	_, err := run(t, 15, node("RandomUniformLike", []string{"x"}, []string{"y"}), nil, graph.FromInt64([]int64{1}, 1))
	assert.ErrorContains(t, err, "dtype attribute")
}

func TestBernoulliExtremes(t *testing.T) {
	p := graph.FromFloat32([]float32{0, 1, 0, 1}, 4)
	out := mustRun(t, 15, node("Bernoulli", []string{"p"}, []string{"y"}), p)[0]
	assert.Equal(t, []float32{0, 1, 0, 1}, out.Data)
	out = mustRun(t, 15, node("Bernoulli", []string{"p"}, []string{"y"}, graph.IntAttr("dtype", int64(graph.Bool))), p)[0]
	assert.Equal(t, []bool{false, true, false, true}, out.Data)
}

func TestMultinomialPicksOnlyLikelyClasses(t *testing.T) {
	logits := graph.FromFloat32([]float32{-1e9, 0, -1e9, 0, -1e9, -1e9}, 2, 3)
	out := mustRun(t, 15, node("Multinomial", []string{"x"}, []string{"y"}, graph.IntAttr("sample_size", 5), graph.IntAttr("dtype", int64(graph.Int64))), logits)[0]
	assert.Equal(t, []int{2, 5}, out.Shape)
	assert.Equal(t, []int64{1, 1, 1, 1, 1, 0, 0, 0, 0, 0}, out.Data)
}
