// The 6-row tiles' shared pieces of the micro-kernels (kernel_amd64.s,
// kernelb_amd64.s with ymm accumulators Y0–Y11; kernel512_amd64.s,
// kernel512a_amd64.s, kernel512b_amd64.s with zmm Z0–Z11): row i of the
// tile in Y(2i), Y(2i+1) or Z(2i), Z(2i+1); C's rows at DI, DI+SI,
// DI+2·SI, R8, R8+SI, R8+2·SI (SI the row stride in bytes, R8 row 3).

// Stores one row of the tile (two accumulators, already scaled by alpha):
// STOREROW overwrites C, UPDATEROW adds beta*C (beta in Y15) first; the Z
// forms likewise with beta in Z15.
#define STOREROW(lo, hi, addr, addr2) \
	VMOVUPS lo, addr;  \
	VMOVUPS hi, addr2

#define UPDATEROW(lo, hi, addr, addr2) \
	VFMADD231PS addr, Y15, lo;  \
	VFMADD231PS addr2, Y15, hi; \
	VMOVUPS     lo, addr;       \
	VMOVUPS     hi, addr2

#define ZSTOREROW(lo, hi, addr, addr2) \
	VMOVUPS lo, addr;  \
	VMOVUPS hi, addr2

#define ZUPDATEROW(lo, hi, addr, addr2) \
	VFMADD231PS addr, Z15, lo;  \
	VFMADD231PS addr2, Z15, hi; \
	VMOVUPS     lo, addr;       \
	VMOVUPS     hi, addr2

// SCALE12 and ZSCALE12 multiply the twelve accumulators by the float32 at
// alpha (through Y14 or Z14).
#define SCALE12(alpha) \
	VBROADCASTSS alpha, Y14; \
	VMULPS       Y14, Y0, Y0;   \
	VMULPS       Y14, Y1, Y1;   \
	VMULPS       Y14, Y2, Y2;   \
	VMULPS       Y14, Y3, Y3;   \
	VMULPS       Y14, Y4, Y4;   \
	VMULPS       Y14, Y5, Y5;   \
	VMULPS       Y14, Y6, Y6;   \
	VMULPS       Y14, Y7, Y7;   \
	VMULPS       Y14, Y8, Y8;   \
	VMULPS       Y14, Y9, Y9;   \
	VMULPS       Y14, Y10, Y10; \
	VMULPS       Y14, Y11, Y11

#define ZSCALE12(alpha) \
	VBROADCASTSS alpha, Z14; \
	VMULPS       Z14, Z0, Z0;   \
	VMULPS       Z14, Z1, Z1;   \
	VMULPS       Z14, Z2, Z2;   \
	VMULPS       Z14, Z3, Z3;   \
	VMULPS       Z14, Z4, Z4;   \
	VMULPS       Z14, Z5, Z5;   \
	VMULPS       Z14, Z6, Z6;   \
	VMULPS       Z14, Z7, Z7;   \
	VMULPS       Z14, Z8, Z8;   \
	VMULPS       Z14, Z9, Z9;   \
	VMULPS       Z14, Z10, Z10; \
	VMULPS       Z14, Z11, Z11

// UPDATE6/STORE6 (16-column tiles) and ZUPDATE6/ZSTORE6 (32-column
// tiles) write the six rows: adding beta*C (beta already in Y15 or Z15),
// or over C.
#define UPDATE6 \
	UPDATEROW(Y0, Y1, (DI), 32(DI));                   \
	UPDATEROW(Y2, Y3, (DI)(SI*1), 32(DI)(SI*1));       \
	UPDATEROW(Y4, Y5, (DI)(SI*2), 32(DI)(SI*2));       \
	UPDATEROW(Y6, Y7, (R8), 32(R8));                   \
	UPDATEROW(Y8, Y9, (R8)(SI*1), 32(R8)(SI*1));       \
	UPDATEROW(Y10, Y11, (R8)(SI*2), 32(R8)(SI*2))

#define STORE6 \
	STOREROW(Y0, Y1, (DI), 32(DI));                    \
	STOREROW(Y2, Y3, (DI)(SI*1), 32(DI)(SI*1));        \
	STOREROW(Y4, Y5, (DI)(SI*2), 32(DI)(SI*2));        \
	STOREROW(Y6, Y7, (R8), 32(R8));                    \
	STOREROW(Y8, Y9, (R8)(SI*1), 32(R8)(SI*1));        \
	STOREROW(Y10, Y11, (R8)(SI*2), 32(R8)(SI*2))

#define ZUPDATE6 \
	ZUPDATEROW(Z0, Z1, (DI), 64(DI));                  \
	ZUPDATEROW(Z2, Z3, (DI)(SI*1), 64(DI)(SI*1));      \
	ZUPDATEROW(Z4, Z5, (DI)(SI*2), 64(DI)(SI*2));      \
	ZUPDATEROW(Z6, Z7, (R8), 64(R8));                  \
	ZUPDATEROW(Z8, Z9, (R8)(SI*1), 64(R8)(SI*1));      \
	ZUPDATEROW(Z10, Z11, (R8)(SI*2), 64(R8)(SI*2))

#define ZSTORE6 \
	ZSTOREROW(Z0, Z1, (DI), 64(DI));                   \
	ZSTOREROW(Z2, Z3, (DI)(SI*1), 64(DI)(SI*1));       \
	ZSTOREROW(Z4, Z5, (DI)(SI*2), 64(DI)(SI*2));       \
	ZSTOREROW(Z6, Z7, (R8), 64(R8));                   \
	ZSTOREROW(Z8, Z9, (R8)(SI*1), 64(R8)(SI*1));       \
	ZSTOREROW(Z10, Z11, (R8)(SI*2), 64(R8)(SI*2))

// PREFETCHC and ZPREFETCHC bring the 6×16 or 6×32 tile of C towards L1
// while the products run.
#define PREFETCHC \
	PREFETCHT0 (DI);          \
	PREFETCHT0 60(DI);        \
	PREFETCHT0 (DI)(SI*1);    \
	PREFETCHT0 60(DI)(SI*1);  \
	PREFETCHT0 (DI)(SI*2);    \
	PREFETCHT0 60(DI)(SI*2);  \
	PREFETCHT0 (R8);          \
	PREFETCHT0 60(R8);        \
	PREFETCHT0 (R8)(SI*1);    \
	PREFETCHT0 60(R8)(SI*1);  \
	PREFETCHT0 (R8)(SI*2);    \
	PREFETCHT0 60(R8)(SI*2)

#define ZPREFETCHC \
	PREFETCHT0 (DI);          \
	PREFETCHT0 64(DI);        \
	PREFETCHT0 124(DI);       \
	PREFETCHT0 (DI)(SI*1);    \
	PREFETCHT0 64(DI)(SI*1);  \
	PREFETCHT0 124(DI)(SI*1); \
	PREFETCHT0 (DI)(SI*2);    \
	PREFETCHT0 64(DI)(SI*2);  \
	PREFETCHT0 124(DI)(SI*2); \
	PREFETCHT0 (R8);          \
	PREFETCHT0 64(R8);        \
	PREFETCHT0 124(R8);       \
	PREFETCHT0 (R8)(SI*1);    \
	PREFETCHT0 64(R8)(SI*1);  \
	PREFETCHT0 124(R8)(SI*1); \
	PREFETCHT0 (R8)(SI*2);    \
	PREFETCHT0 64(R8)(SI*2);  \
	PREFETCHT0 124(R8)(SI*2)
