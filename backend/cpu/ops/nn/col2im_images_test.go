package nn

import (
	"math/rand/v2"
	"testing"
)

// TestCol2ImAddImagesMatchesDefinition checks Col2ImAddImages (float32)
// against col2im summed from its definition in float64: for image i,
// channel c in [c0, c1), tap (a, b) and window position (oh, ow), image
// position (oh·SH + a·DH − PadTop, ow·SW + b·DW − PadLeft), when inside,
// gains col[(c, a, b), i·L + oh·OW + ow]. The images start from random
// values (it adds), channels outside [c0, c1) must keep them, and the
// column matrix has spare columns past nb·L (ld > nb·L).
func TestCol2ImAddImagesMatchesDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct {
		name                 string
		nb, ch, h, w, kh, kw int
		sh, sw, dh, dw       int
		pads                 [4]int
		c0, c1               int
	}{
		{"resnet_3x3s2", 5, 6, 8, 8, 3, 3, 2, 2, 1, 1, [4]int{1, 1, 1, 1}, 0, 6},
		{"resnet_1x1s2", 4, 5, 8, 8, 1, 1, 2, 2, 1, 1, [4]int{0, 0, 0, 0}, 1, 4},
		{"odd_uneven_pads", 3, 4, 9, 11, 3, 3, 2, 2, 1, 1, [4]int{1, 0, 2, 1}, 2, 4},
		{"stride3_dilation2", 2, 3, 13, 14, 3, 2, 3, 3, 2, 2, [4]int{2, 1, 0, 2}, 0, 3},
		{"stride1", 3, 2, 6, 7, 3, 3, 1, 1, 1, 1, [4]int{1, 1, 1, 1}, 0, 2},
		{"late_2x2", 6, 4, 4, 4, 3, 3, 2, 2, 1, 1, [4]int{1, 1, 1, 1}, 0, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			oh := (tc.h+tc.pads[0]+tc.pads[2]-(tc.kh-1)*tc.dh-1)/tc.sh + 1
			ow := (tc.w+tc.pads[1]+tc.pads[3]-(tc.kw-1)*tc.dw-1)/tc.sw + 1
			L, I := oh*ow, tc.h*tc.w
			ld := tc.nb*L + 3
			rows := tc.ch * tc.kh * tc.kw
			col := randF64(rng, rows*ld)
			img := randF64(rng, tc.nb*tc.ch*I)
			want := append([]float64(nil), img...)
			for i := 0; i < tc.nb; i++ {
				for c := tc.c0; c < tc.c1; c++ {
					for a := 0; a < tc.kh; a++ {
						for b := 0; b < tc.kw; b++ {
							r := (c*tc.kh+a)*tc.kw + b
							for y := 0; y < oh; y++ {
								for x := 0; x < ow; x++ {
									ih := y*tc.sh + a*tc.dh - tc.pads[0]
									iw := x*tc.sw + b*tc.dw - tc.pads[1]
									if ih < 0 || ih >= tc.h || iw < 0 || iw >= tc.w {
										continue
									}
									want[(i*tc.ch+c)*I+ih*tc.w+iw] += col[r*ld+i*L+y*ow+x]
								}
							}
						}
					}
				}
			}
			got := toF32(img)
			win := Window{In: []int{tc.h, tc.w}, Out: []int{oh, ow}, Kernel: []int{tc.kh, tc.kw},
				Strides: []int{tc.sh, tc.sw}, Dilations: []int{tc.dh, tc.dw},
				PadBegin: []int{tc.pads[0], tc.pads[1]}, PadEnd: []int{tc.pads[2], tc.pads[3]}}
			Col2ImAddImages(got, tc.ch*I, toF32(col), ld, tc.nb, tc.c0, tc.c1, win)
			assertClose(t, want, f32([]int{len(got)}, got...), 1e-5)
		})
	}
}
