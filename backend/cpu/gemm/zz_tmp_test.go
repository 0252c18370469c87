package gemm

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func BenchmarkTmpPackA(b *testing.B) {
	for _, ld := range []int{768, 3072} {
		for _, hot := range []bool{true, false} {
			b.Run(fmt.Sprintf("ld%d_hot%v", ld, hot), func(b *testing.B) {
				r := rand.New(rand.NewPCG(1, 1))
				const mc, kc = 144, 256
				rows := mc
				if !hot {
					rows = 8192 // 8192 rows: 25-100 MB, cycled through
				}
				src := randSlice(r, rows*ld)
				dst := make([]float32, mc*kc)
				off := 0
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					for s := 0; s < mc; s += 6 {
						packRows6Fn(dst[s*kc:], src[(off+s)*ld:], ld, kc)
					}
					if !hot {
						off += mc
						if off+mc > rows {
							off = 0
						}
					}
				}
				b.ReportMetric(float64(mc*kc*4)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
			})
		}
	}
}
