package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// triZero reports whether tri makes element (r, c) of its structured
// operand (op(A) for the A kinds, op(B) for the B kinds) an exact zero.
func triZero(tri Tri, r, c int) bool {
	switch tri {
	case TriALower, TriBUpper: // op(A)[i, l], l > i; op(B)[l, j], l > j
		return c > r && tri == TriALower || r > c && tri == TriBUpper
	case TriAUpper, TriBLower: // op(A)[i, l], l < i; op(B)[l, j], j > l
		return c < r && tri == TriAUpper || c > r && tri == TriBLower
	}
	return false
}

// triRead reports whether tri lets a reader see element (i, j) of C.
func triRead(tri Tri, i, j int) bool {
	switch tri {
	case TriCLower:
		return j <= i
	case TriCUpper:
		return j >= i
	}
	return true
}

// TestSgemmSerialTri: every structure, both layouts of each operand, sizes
// around the kernel's strips and steps, against SgemmSerial on the same
// operands: bit for bit wherever C is read, the fill (or a computed value,
// in a tile the diagonal crosses) elsewhere; at least a quarter of a C
// structure's unread half skipped. The C structures again without a fill:
// the skipped elements keep what C held.
func TestSgemmSerialTri(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	kinds := []Tri{TriALower, TriAUpper, TriBLower, TriBUpper, TriCLower, TriCUpper}
	for _, tri := range kinds {
		for _, size := range []int{64, 96, 128, 131, 197, 256} {
			for _, other := range []int{16, 64, 70} {
				for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
					m, n, k := size, size, other // C kinds: square C
					switch tri {
					case TriALower, TriAUpper:
						m, n, k = size, other, size
					case TriBLower, TriBUpper:
						m, n, k = other, size, size
					}
					alpha := float32(0.125)
					if size%2 == 1 {
						alpha = -0.5
					}
					name := fmt.Sprintf("%d/m%d_n%d_k%d_t%v", tri, m, n, k, tr)
					fill := float32(-7)
					checkTri(t, r, name, tri, tr[0], tr[1], m, n, k, alpha, &fill)
					if tri == TriCLower || tri == TriCUpper {
						checkTri(t, r, name+"/unfilled", tri, tr[0], tr[1], m, n, k, alpha, nil)
					}
				}
			}
		}
	}
}

func checkTri(t *testing.T, r *rand.Rand, name string, tri Tri, transA, transB bool, m, n, k int, alpha float32, fill *float32) {
	t.Helper()
	// op(A) is m×k, op(B) k×n; stored with a padded leading dimension.
	lda, ldb, ldc := k+3, n+5, n+7
	if transA {
		lda = m + 3
	}
	if transB {
		ldb = k + 5
	}
	a := randSlice(r, max(m, k)*lda)
	b := randSlice(r, max(n, k)*ldb)
	at := func(i, l int) *float32 {
		if transA {
			return &a[l*lda+i]
		}
		return &a[i*lda+l]
	}
	bt := func(l, j int) *float32 {
		if transB {
			return &b[j*ldb+l]
		}
		return &b[l*ldb+j]
	}
	for i := 0; i < m; i++ {
		for l := 0; l < k; l++ {
			if (tri == TriALower || tri == TriAUpper) && triZero(tri, i, l) {
				*at(i, l) = 0
			}
		}
	}
	for l := 0; l < k; l++ {
		for j := 0; j < n; j++ {
			if (tri == TriBLower || tri == TriBUpper) && triZero(tri, l, j) {
				*bt(l, j) = 0
			}
		}
	}
	want := make([]float32, m*ldc)
	SgemmSerial(transA, transB, m, n, k, alpha, a, lda, b, ldb, 0, want, ldc)
	got := randSlice(r, m*ldc)
	before := slices.Clone(got)
	if !SgemmSerialTri(tri, transA, transB, m, n, k, alpha, a, lda, b, ldb, got, ldc, fill, nil) {
		t.Fatalf("%s: not applied", name)
	}
	skipped := 0
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			w, g := want[i*ldc+j], got[i*ldc+j]
			if !triRead(tri, i, j) {
				if fill != nil && g == *fill || fill == nil && math.Float32bits(g) == math.Float32bits(before[i*ldc+j]) {
					skipped++
					continue
				}
			}
			if math.Float32bits(w) != math.Float32bits(g) {
				t.Fatalf("%s: C[%d, %d] = %v, want %v (bit for bit)", name, i, j, g, w)
			}
		}
	}
	if (tri == TriCLower || tri == TriCUpper) && skipped < m*(m-1)/2/4 {
		t.Errorf("%s: %d elements skipped, want at least a quarter of the unread half", name, skipped)
	}
}

// TestSgemmSerialTriSkipsZeros: a NaN in the part of the structured
// operand that the structure says is zero, outside every tile's range of
// shared indices, does not reach C (the kernel never reads it), where the
// whole product would spread it.
func TestSgemmSerialTriSkipsZeros(t *testing.T) {
	const m, n, k = 128, 64, 128
	r := rand.New(rand.NewPCG(13, 14))
	a := randSlice(r, m*k)
	for i := 0; i < m; i++ {
		for l := i + 1; l < k; l++ {
			a[i*k+l] = 0
		}
	}
	a[0*k+100] = float32(math.NaN()) // far above the diagonal: no tile sums it
	b := randSlice(r, k*n)
	c := make([]float32, m*n)
	if !SgemmSerialTri(TriALower, false, false, m, n, k, 1, a, k, b, n, c, n, nil, nil) {
		t.Fatal("not applied")
	}
	for i, v := range c {
		if v != v {
			t.Fatalf("C[%d, %d] is NaN: the skipped zero was read", i/n, i%n)
		}
	}
}

// TestSgemmSerialTriDeclines: a shared dimension deeper than the kernel's
// k block, TriNone, and a product SgemmSerialNext would not pack are left
// to the caller, with C untouched.
func TestSgemmSerialTriDeclines(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	for _, c := range []struct {
		name    string
		tri     Tri
		m, n, k int
	}{
		{"deep", TriALower, kernel.kc + 1, 32, kernel.kc + 1},
		{"none", TriNone, 64, 64, 64},
		{"small", TriCLower, 4, 4, 4},
	} {
		a, b := randSlice(r, c.m*c.k), randSlice(r, c.k*c.n)
		out := make([]float32, c.m*c.n)
		out[0] = 42
		if SgemmSerialTri(c.tri, false, false, c.m, c.n, c.k, 1, a, c.k, b, c.n, out, c.n, nil, nil) {
			t.Errorf("%s: applied", c.name)
		}
		if out[0] != 42 {
			t.Errorf("%s: wrote C", c.name)
		}
	}
}
