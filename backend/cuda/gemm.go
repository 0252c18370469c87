package cuda

import (
	"fmt"
	"unsafe"

	"github.com/onnxtrain/onnxtrain/graph"
)

// Gemm is one strided-batched cuBLAS GEMM in row-major terms:
// C[b] = alpha * op(A[b]) x op(B[b]) + beta * C[b], with op a transpose
// when TransA/TransB, C [M, N]. Batch strides are in elements (0
// broadcasts an operand over the batch).
type Gemm struct {
	TransA, TransB            bool
	M, N, K                   int64
	A, B, C                   Arg
	StrideA, StrideB, StrideC int64
	Batch                     int64
	Alpha, Beta               float32
	// DType is the operands' (float32, or bfloat16/float16 under mixed
	// precision: cublasGemmStridedBatchedEx with float32 accumulation);
	// OutDType is C's.
	DType, OutDType graph.DType
}

func (g Gemm) String() string {
	return fmt.Sprintf("gemm[%s] %dx%dx%d batch %d trans %v/%v", g.DType, g.M, g.N, g.K, g.Batch, g.TransA, g.TransB)
}

// cuBLAS constants (cublas_api.h, library_types.h).
const (
	cublasOpN         = 0
	cublasOpT         = 1
	cudaR32F          = 0
	cudaR16F          = 2
	cudaR16BF         = 14
	cublasCompute32F  = 68
	cublasComputeTF32 = 77
	cublasGemmDefault = -1
)

// columnMajor turns the row-major product into cuBLAS's column-major
// call: C^T = op(B)^T op(A)^T, so B goes first and M, N swap. It returns
// the call's (transa, transb, m, n, k, first, lda, second, ldb, ldc).
func (g *Gemm) columnMajor() (ta, tb int, m, n, k int64, first Arg, lda int64, strideFirst int64, second Arg, ldb, strideSecond, ldc int64) {
	// Row-major A is [M,K] (or [K,M] transposed): as column-major it is
	// A^T with leading dimension its row length.
	ldA := g.K
	if g.TransA {
		ldA = g.M
	}
	ldB := g.N
	if g.TransB {
		ldB = g.K
	}
	ta, tb = cublasOpN, cublasOpN
	if g.TransB {
		ta = cublasOpT
	}
	if g.TransA {
		tb = cublasOpT
	}
	return ta, tb, g.N, g.M, g.K, g.B, ldB, g.StrideB, g.A, ldA, g.StrideA, g.N
}

func cudaDataType(dt graph.DType) (int, error) {
	switch dt {
	case graph.Float32:
		return cudaR32F, nil
	case graph.Float16:
		return cudaR16F, nil
	case graph.BFloat16:
		return cudaR16BF, nil
	}
	return 0, fmt.Errorf("cuda: no GEMM for dtype %v", dt)
}

// runGemm issues the GEMM on the context's stream.
func (c *Context) runGemm(g *Gemm, allowTF32 bool) error {
	ta, tb, m, n, k, first, lda, sf, second, ldb, ss, ldc := g.columnMajor()
	alpha, beta := g.Alpha, g.Beta
	addr := func(a Arg) uintptr { return uintptr(a.Buf.addr()) + uintptr(a.Off) }
	if g.DType == graph.Float32 && g.OutDType == graph.Float32 {
		return c.d.blas("cublasSgemmStridedBatched", c.d.bl.sgemmStridedBatched, c.blas, uintptr(ta), uintptr(tb),
			uintptr(m), uintptr(n), uintptr(k), uintptr(unsafe.Pointer(&alpha)),
			addr(first), uintptr(lda), uintptr(sf), addr(second), uintptr(ldb), uintptr(ss),
			uintptr(unsafe.Pointer(&beta)), addr(g.C), uintptr(ldc), uintptr(g.StrideC), uintptr(g.Batch))
	}
	in, err := cudaDataType(g.DType)
	if err != nil {
		return err
	}
	out, err := cudaDataType(g.OutDType)
	if err != nil {
		return err
	}
	compute := cublasCompute32F
	if allowTF32 && g.DType == graph.Float32 {
		compute = cublasComputeTF32
	}
	algo := uintptr(uint32(0xffffffff)) // CUBLAS_GEMM_DEFAULT (-1) as a C int
	return c.d.blas("cublasGemmStridedBatchedEx", c.d.bl.gemmStridedBatchedEx, c.blas, uintptr(ta), uintptr(tb),
		uintptr(m), uintptr(n), uintptr(k), uintptr(unsafe.Pointer(&alpha)),
		addr(first), uintptr(in), uintptr(lda), uintptr(sf), addr(second), uintptr(in), uintptr(ldb), uintptr(ss),
		uintptr(unsafe.Pointer(&beta)), addr(g.C), uintptr(out), uintptr(ldc), uintptr(g.StrideC), uintptr(g.Batch),
		uintptr(compute), algo)
}
