//go:build amd64 && !purego

package gemm

//go:noescape
func epilogueRows8(c *float32, ldc, rows, n8 int, bias *float32, relu bool)

func init() {
	if hasAVX2FMA {
		epilogueRowsFn = epilogueRowsAVX
	}
}

// epilogueRowsAVX is epilogueRowsGo with the columns in multiples of 8 in
// assembly.
func epilogueRowsAVX(c []float32, ldc, rows, n int, bias []float32, relu bool) {
	if rows <= 0 || n <= 0 {
		return
	}
	_ = c[(rows-1)*ldc+n-1]
	var bp *float32
	if bias != nil {
		_ = bias[n-1]
		bp = &bias[0]
	}
	n8 := n &^ 7
	if n8 > 0 {
		epilogueRows8(&c[0], ldc, rows, n8, bp, relu)
	}
	if n8 < n {
		var tail []float32
		if bias != nil {
			tail = bias[n8:n]
		}
		epilogueRowsGo(c[n8:], ldc, rows, n-n8, tail, relu)
	}
}
