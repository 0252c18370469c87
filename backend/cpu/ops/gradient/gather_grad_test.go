package gradient

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// TestGatherGradScattersIntoZeros: GatherGrad's output comes unzeroed
// (kern.NewUninit) and is cleared by the cores together, so on storage
// full of NaN it must equal the definition — zeros with each slice of dY
// added at its index, repeated and negative indices included, in index
// order — for an embedding-like axis 0 and an inner axis, float32 and
// float64, on 1 and 2 cores.
func TestGatherGradScattersIntoZeros(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	for _, tc := range []struct {
		name  string
		data  []int
		ind   []int64
		axis  int
		dtype graph.DType
	}{
		{"embedding", []int{301, 24}, []int64{5, 17, 5, -1, 0, 300, 17, 5}, 0, graph.Float32},
		{"embedding f64", []int{301, 24}, []int64{5, 17, 5, -1, 0, 300, 17, 5}, 0, graph.Float64},
		{"inner axis", []int{3, 7, 5}, []int64{6, 1, 1, -7}, 1, graph.Float32},
	} {
		for _, procs := range []int{1, 2} {
			t.Run(tc.name, func(t *testing.T) {
				r := len(tc.data)
				dyShape := append(append(append([]int{}, tc.data[:tc.axis]...), len(tc.ind)), tc.data[tc.axis+1:]...)
				outer, inner := 1, 1
				for a, d := range tc.data {
					if a < tc.axis {
						outer *= d
					} else if a > tc.axis {
						inner *= d
					}
				}
				dim := tc.data[tc.axis]
				dy := make([]float64, outer*len(tc.ind)*inner)
				for i := range dy {
					dy[i] = float64(float32(rng.NormFloat64()))
				}
				want := make([]float64, outer*dim*inner)
				for o := 0; o < outer; o++ {
					for j, k := range tc.ind {
						row := int(k)
						if row < 0 {
							row += dim
						}
						for i := 0; i < inner; i++ {
							want[(o*dim+row)*inner+i] += dy[(o*len(tc.ind)+j)*inner+i]
						}
					}
				}
				var dyT, dataT *graph.Tensor
				if tc.dtype == graph.Float32 {
					d32 := make([]float32, len(dy))
					for i, v := range dy {
						d32[i] = float32(v)
					}
					dyT, dataT = graph.FromFloat32(d32, dyShape...), graph.Zeros(graph.Float32, tc.data...)
				} else {
					dyT, dataT = &graph.Tensor{DType: graph.Float64, Shape: dyShape, Data: dy}, graph.Zeros(graph.Float64, tc.data...)
				}
				n := &graph.Node{Name: "gg", OpType: "GatherGrad", Domain: graph.InternalDomain, Outputs: []string{"dx"},
					Attrs: map[string]*graph.Attr{"axis": graph.IntAttr("axis", int64(tc.axis))}}
				// kern.Bind holds the Binding weakly: keep it alive, or a
				// GC would leave the kernel a fresh, zeroed output.
				bind := &kern.Binding{Allocator: dirtyAlloc{}}
				kern.Bind(n, bind)
				defer kern.Unbind(n)
				defer runtime.KeepAlive(bind)
				var out []*graph.Tensor
				var err error
				withProcs(procs, func() {
					out, err = gatherGrad(nil, n, []*graph.Tensor{dyT, dataT, graph.FromInt64(tc.ind, len(tc.ind))})
				})
				require.NoError(t, err)
				require.Equal(t, tc.data, out[0].Shape)
				require.Equal(t, r, out[0].Rank())
				for i, w := range want {
					var g float64
					if tc.dtype == graph.Float32 {
						// float32 sums in index order, as the kernel adds
						g = float64(out[0].Data.([]float32)[i])
						w = float64(float32(w))
					} else {
						g = out[0].Data.([]float64)[i]
					}
					require.False(t, math.IsNaN(g), "element %d left unwritten", i)
					require.InDelta(t, w, g, 1e-6, "element %d", i)
				}
			})
		}
	}
}
