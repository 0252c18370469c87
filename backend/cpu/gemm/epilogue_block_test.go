package gemm

import (
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// countingBlock is a BlockEpilogue that maps every element v of a block to
// 3v+1 in C and to v in a side array of C's layout, and counts how often
// each element was visited.
type countingBlock struct {
	mu     sync.Mutex
	visits []int
	side   []float32
	n      int
}

func (e *countingBlock) ApplyBlock(c []float32, ldc, i0, i1, j0, j1 int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := i0; i < i1; i++ {
		for j := j0; j < j1; j++ {
			v := c[i*ldc+j]
			e.side[i*e.n+j] = v
			c[i*ldc+j] = 3*v + 1
			e.visits[i*e.n+j]++
		}
	}
}

// TestSgemmEpilogueBlock: a Block epilogue sees every element of C exactly
// once, after the bias and ReLU, with the final product (so the result is
// Sgemm's, then the bias, the ReLU and the block function, bit for bit),
// on shapes that take the direct loops, one blocked product, the row and
// column splits and the shared-dimension split, with 1 and 4 workers.
func TestSgemmEpilogueBlock(t *testing.T) {
	shapes := [][3]int{{5, 7, 3}, {37, 50, 20}, {300, 301, 64}, {788, 96, 128}, {64, 3000, 100}, {40, 48, 4096}}
	forEpilogueCases(51, shapes, func(procs, m, n, k int, tb bool, a, b, bias []float32, ldb int, fill func(int) []float32) {
		for _, relu := range []bool{false, true} {
			want := make([]float32, m*n)
			Sgemm(false, tb, m, n, k, 1, a, k, b, ldb, 0, want, n)
			wantSide := make([]float32, m*n)
			for i := range want {
				v := want[i] + bias[i%n]
				if relu && v < 0 {
					v = 0
				}
				wantSide[i] = v
				want[i] = 3*v + 1
			}
			ep := &countingBlock{visits: make([]int, m*n), side: make([]float32, m*n), n: n}
			got := fill(m * n)
			SgemmEpilogue(false, tb, m, n, k, 1, a, k, b, ldb, 0, got, n, Epilogue{Bias: bias, Relu: relu, Block: ep})
			msg := []any{"procs=%d m=%d n=%d k=%d transB=%v relu=%v", procs, m, n, k, tb, relu}
			require.Equal(t, want, got, msg...)
			require.Equal(t, wantSide, ep.side, msg...)
			for i, v := range ep.visits {
				require.Equal(t, 1, v, append([]any{"element %d visited %d times; " + msg[0].(string), i, v}, msg[1:]...)...)
			}
		}
	})
}

// forEpilogueCases runs check on every shape (m, n, k) of shapes, with B
// plain and transposed, under 1 and 4 workers: fresh normal operands A
// (m×k), B (k×n, or n×k transposed, leading dimension ldb) and a row of
// n, and fill for more.
func forEpilogueCases(seed uint64, shapes [][3]int, check func(procs, m, n, k int, tb bool, a, b, row []float32, ldb int, fill func(int) []float32)) {
	rng := rand.New(rand.NewPCG(seed, seed+1))
	fill := func(n int) []float32 {
		s := make([]float32, n)
		for i := range s {
			s[i] = float32(rng.NormFloat64())
		}
		return s
	}
	for _, procs := range []int{1, 4} {
		func() {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			for _, sh := range shapes {
				m, n, k := sh[0], sh[1], sh[2]
				for _, tb := range []bool{false, true} {
					a, b, row := fill(m*k), fill(k*n), fill(n)
					ldb := n
					if tb {
						ldb = k
					}
					check(procs, m, n, k, tb, a, b, row, ldb, fill)
				}
			}
		}()
	}
}

// TestSgemmRowC: SgemmRowC gives, bit for bit, what filling every row of C
// with the row and then calling SgemmEpilogue gives (the bias added on
// the first k slice, before the later slices' sums), for beta 1, 0.5 and
// 0 (C overwritten, row unread: a NaN row must not show), alpha 1 and
// 0.75, with and without a ReLU, on shapes that take the direct loops,
// one blocked product (one and several k slices), the row and column
// splits and the shared-dimension split, with 1 and 4 workers.
func TestSgemmRowC(t *testing.T) {
	shapes := [][3]int{{5, 7, 3}, {37, 50, 20}, {300, 301, 64}, {512, 768, 768}, {64, 3000, 100}, {40, 48, 4096}}
	forEpilogueCases(53, shapes, func(procs, m, n, k int, tb bool, a, b, row []float32, ldb int, fill func(int) []float32) {
		for _, ab := range [][2]float32{{1, 1}, {0.75, 0.5}, {1, 0}} {
			alpha, beta := ab[0], ab[1]
			for _, relu := range []bool{false, true} {
				msg := []any{"procs=%d m=%d n=%d k=%d transB=%v alpha=%v beta=%v relu=%v", procs, m, n, k, tb, alpha, beta, relu}
				want := fill(m * n)
				for i := 0; i < m; i++ {
					copy(want[i*n:(i+1)*n], row)
				}
				SgemmEpilogue(false, tb, m, n, k, alpha, a, k, b, ldb, beta, want, n, Epilogue{Relu: relu})
				got := fill(m * n)
				r := row
				if beta == 0 {
					r = make([]float32, n)
					for j := range r {
						r[j] = float32(math.NaN())
					}
				}
				SgemmRowC(false, tb, m, n, k, alpha, a, k, b, ldb, beta, r, got, n, Epilogue{Relu: relu})
				require.Equal(t, want, got, msg...)
			}
		}
	})
}
