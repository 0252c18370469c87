// Package gemm is the CPU backend's float32 matrix multiply, shared by
// MatMul, Gemm, Conv and the recurrent layers.
//
// Sgemm follows the usual blocked design (Goto/BLIS): C is split into NC-wide
// column panels, the shared dimension into KC-deep slices and the rows into
// MC-high blocks. For each (KC, NC) slice the B panel is packed into
// NR-wide column strips and for each MC block the A block into MR-high row
// strips, both laid out so that the micro-kernel reads them sequentially. The
// micro-kernel (see microKernel) computes one MR×NR tile of C from one A strip
// and one B strip; it is the only architecture-specific piece and can be
// swapped for an assembly version with different MR/NR without touching the
// packing or blocking code.
//
// On amd64 CPUs with AVX2 and FMA (checked at run time) the micro-kernel is
// kernel_amd64.s: a 6×16 tile in twelve ymm accumulators, with MC=144,
// KC=256, NC=4096 for 32 KiB L1 and 512 KiB L2 per core; the packing
// routines for its layouts are assembly too (pack_amd64.s). Elsewhere, or
// with the purego build tag, a portable 2×4 Go kernel runs. Where AVX-512F
// is available too, a pair kernel (kernel512_amd64.s) computes two adjacent
// 6×16 tiles at once in zmm registers from the same packed panels, bit for
// bit as two 6×16 calls, at about twice the FLOP rate. While one
// block computes, the source of the next packing step is prefetched, so
// packing does not stall on memory. alpha and beta are applied when the
// kernel stores its tile, so C is written once per k slice and never
// scaled in a separate pass.
//
// Edge strips of C at most nr/2 columns wide run a half-width kernel (same
// sums, bit for bit), and when a block of a row-major A is used by few B
// strips (narrow C, as in attention) the kernel reads A in place instead of
// packing it. The bias/ReLU epilogue is vectorised too.
//
// A PackedProduct that writes a large result in one pass from a short
// shared dimension (beta 0, k ≤ 128, at least 4 MiB, rows 64-byte aligned:
// ResNet-50's 1×1 convolutions at 56×56) stores its full tiles with
// non-temporal stores (stream.go), saving the read for ownership of every
// line of C; ONNXTRAIN_GEMM_NO_STREAM=1 turns that off. PackedBlock
// (Winograd's products) runs the pair kernel when k is one k block.
//
// A PackedProduct's packers may name what they read (ASourcer, BSourcer):
// the product then prefetches each next block's source as the plain GEMM
// does (a 1×1 convolution's filter gradient packs dY and X from memory).
// A BPacker that can show a block of B already laid out row-major
// (BViewer) lets a product with at most 128 rows of A skip packing B: a
// kernel reading B's rows in place (kernel512b_amd64.s, 32 columns with
// AVX-512; kernelb_amd64.s, 16 with AVX2), bit for bit the packed
// kernels, runs where a step's columns lie in one view (a 1×1
// convolution's 64-channel passes, whose every B value feeds 64 rows), on
// AMD's CPUs (viewBPays: on the Xeon measured, packing B was faster).
// The six-row tiles' stores and C prefetch are shared by the kernel files
// through tile_amd64.h.
//
// A product of 1 to 5 rows whose B is stored transposed (a few samples
// through a dense layer's weight, a head's one query row) is computed
// swapped instead, B's rows read in place as the kernel's A, so that B is
// not transposed into packed strips for so few rows (thin.go).
//
// Small problems skip packing and run a direct loop, as do single rows
// narrower than 64 columns and every single row where the kernel is the
// portable Go one (DirectLoops). Large problems are split
// over up to GOMAXPROCS workers of kern's persistent pool (kern.RunTask, no
// goroutine started and nothing allocated per product) over the rows, the
// columns or the shared dimension, whichever duplicates the least packing
// work (see run).
// Results are deterministic for a given GOMAXPROCS; a split of the shared
// dimension sums the partial products in a different order than one
// goroutine would, so the last bits can differ between GOMAXPROCS values.
package gemm
