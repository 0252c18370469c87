//go:build !amd64 || purego

package gemm

// AVX512 reports whether the GEMM uses its AVX-512 kernel: never off amd64.
func AVX512() bool { return false }

// storeFence orders non-temporal stores; without assembly there are none.
func storeFence() {}

// NextOperandsPrefetchHelps reports whether SgemmSerialNext's prefetch of
// the next product's operands pays on this CPU: it is not measured off
// amd64's assembly kernels, so no.
func NextOperandsPrefetchHelps() bool { return false }

// CPUTuning: no vendor-chosen paths off amd64's assembly.
func CPUTuning() string { return "" }

// viewBPays: there is no kernel reading B in place off amd64's assembly.
var viewBPays = false

// pairATransposed: no in-place pair kernel off amd64's assembly.
const pairATransposed = false
