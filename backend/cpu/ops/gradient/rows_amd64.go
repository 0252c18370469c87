//go:build amd64 && !purego

package gradient

import "golang.org/x/sys/cpu"

// rowAsm selects the assembly row kernels (rows_amd64.s); tests switch it
// off to check the pure-Go fallbacks.
var rowAsm = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// The assembly row kernels; rows_amd64.s states the multiple n must be.

//go:noescape
func colSumAVX2(acc *float64, src *float32, n int, pf int)

//go:noescape
func colSumRoundAVX2(dst, src *float32, n, rows, stride int)

//go:noescape
func softmaxGradRowAVX2(dy, y, dx *float32, n int, pf int) float64

//go:noescape
func lnGradStatsAVX2(x, dy *float32, scale *float64, n int, x0 float64, out *[4]float64)

//go:noescape
func lnGradApplyAVX2(x, dy, scale, dx, ds, db, r *float32, n int, c *[5]float32, pf int)
