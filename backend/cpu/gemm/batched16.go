package gemm

// PackedBlock computes C = A·B + beta·C for one block whose operands the
// caller has already packed in the micro-kernel's layouts (see
// KernelShape and PackedProduct), each strip packed over the whole shared
// dimension k: A is ms strips of MR rows, strip s at ap[s·MR·k:] with
// element (i, q) at ap[s·MR·k + q·MR + i]; B is ns strips of NR columns,
// strip s at bp[s·NR·k:] with element (q, j) at bp[s·NR·k + q·NR + j].
// C is the MR·ms × NR·ns row-major block whose top-left element is c[0],
// rows ldc apart, stored in whole tiles: the caller pads its rows and
// columns to whole strips (zero rows of A, zero columns of B). With beta
// 0, C is written without being read.
//
// A batch of small products that share nothing but their shapes (the 16
// products of a Winograd transform) packs its operands once and runs each
// through it. The shared dimension runs in the kernel's k blocks; within
// one, each B strip stays in L1 while every A strip passes over it.
// PackedBlockPairs reports whether PackedBlock runs a shared dimension of
// k through the pair kernel, two B strips at a time (so that a caller
// sizing its blocks in whole strips gains by an even count).
func PackedBlockPairs(k int) bool { return kernel.pair != nil && k <= kernel.kc }

func PackedBlock(ms, ns, k int, ap, bp, c []float32, ldc int, beta float32) {
	if ms <= 0 || ns <= 0 {
		return
	}
	mk := kernel
	mr, nr := mk.mr, mk.nr
	if ldc < nr*ns || len(ap) < ms*mr*k || len(bp) < ns*nr*k || len(c) < (ms*mr-1)*ldc+ns*nr {
		panic("gemm: PackedBlock operand out of range")
	}
	if k <= 0 {
		scaleC(ms*mr, ns*nr, beta, c, ldc)
		return
	}
	if PackedBlockPairs(k) {
		// One k block: consecutive B strips are adjacent (strip s+1
		// starts NR·k after strip s), as the pair kernel reads them, so
		// two strips run together, bit for bit as two single tiles.
		js := 0
		for ; js+2 <= ns; js += 2 {
			bs := bp[js*nr*k : (js+2)*nr*k]
			for is := 0; is < ms; is++ {
				mk.pair(k, ap[is*mr*k:(is+1)*mr*k], bs, c[is*mr*ldc+js*nr:], ldc, 1, beta)
			}
		}
		for ; js < ns; js++ {
			bs := bp[js*nr*k : (js+1)*nr*k]
			for is := 0; is < ms; is++ {
				mk.fn(k, ap[is*mr*k:(is+1)*mr*k], bs, c[is*mr*ldc+js*nr:], ldc, 1, beta)
			}
		}
		return
	}
	for pc := 0; pc < k; pc += mk.kc {
		kcur := min(mk.kc, k-pc)
		b := beta
		if pc > 0 {
			b = 1
		}
		for js := 0; js < ns; js++ {
			bs := bp[js*nr*k+pc*nr : js*nr*k+(pc+kcur)*nr]
			for is := 0; is < ms; is++ {
				as := ap[is*mr*k+pc*mr : is*mr*k+(pc+kcur)*mr]
				mk.fn(kcur, as, bs, c[is*mr*ldc+js*nr:], ldc, 1, b)
			}
		}
	}
}
