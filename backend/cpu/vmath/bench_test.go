package vmath

import "testing"

func benchInput() []float32 {
	x := make([]float32, 4096)
	for i := range x {
		x[i] = float32(i%97)*0.07 - 3.4
	}
	return x
}

func BenchmarkExp32(b *testing.B) {
	x := benchInput()
	d := make([]float32, len(x))
	b.SetBytes(int64(4 * len(x)))
	for b.Loop() {
		Exp32(d, x)
	}
}

func BenchmarkExp32PureGo(b *testing.B) {
	x := benchInput()
	d := make([]float32, len(x))
	b.SetBytes(int64(4 * len(x)))
	for b.Loop() {
		expShiftGo(d, x, 0, 0)
	}
}

func BenchmarkErf32(b *testing.B) {
	x := benchInput()
	d := make([]float32, len(x))
	b.SetBytes(int64(4 * len(x)))
	for b.Loop() {
		Erf32(d, x)
	}
}

func BenchmarkErf32PureGo(b *testing.B) {
	x := benchInput()
	d := make([]float32, len(x))
	b.SetBytes(int64(4 * len(x)))
	for b.Loop() {
		erfGo(d, x)
	}
}

func BenchmarkExpShift32(b *testing.B) {
	x := benchInput()
	d := make([]float32, len(x))
	b.SetBytes(int64(4 * len(x)))
	for b.Loop() {
		ExpShift32(d, x, 0.5)
	}
}

func BenchmarkGeluErf32(b *testing.B) {
	x := benchInput()
	y, d, a := make([]float32, len(x)), make([]float32, len(x)), make([]float32, len(x))
	b.SetBytes(int64(4 * len(x)))
	for b.Loop() {
		GeluErf32(y, d, a, x, 1.4142135, 1, 0.5)
	}
}

func BenchmarkGeluErfGrad32(b *testing.B) {
	x := benchInput()
	y, d, a := make([]float32, len(x)), make([]float32, len(x)), make([]float32, len(x))
	GeluErf32(y, d, a, x, 1.4142135, 1, 0.5)
	g := make([]float32, len(x))
	b.SetBytes(int64(4 * len(x)))
	for b.Loop() {
		GeluErfGrad32(g, y, x, d, a, 1.4142135, 0.5, 1.1283792)
	}
}

func BenchmarkErfGrad32(b *testing.B) {
	x := benchInput()
	g := make([]float32, len(x))
	b.SetBytes(int64(4 * len(x)))
	for b.Loop() {
		ErfGrad32(g, x, x, 1.1283792)
	}
}

// BenchmarkExp32SubnormalBand: every result subnormal (e^-87.4 to e^-103.9),
// where a multiply that produces one takes the x86 microcode assist.
func BenchmarkExp32SubnormalBand(b *testing.B) {
	x := benchInput()
	for i := range x {
		x[i] = -87.4 - float32(i%97)*0.17
	}
	d := make([]float32, len(x))
	b.SetBytes(int64(4 * len(x)))
	for b.Loop() {
		Exp32(d, x)
	}
}

func BenchmarkGeluErfGradX32(b *testing.B) {
	x := benchInput()
	y, dy, g := make([]float32, len(x)), make([]float32, len(x)), make([]float32, len(x))
	for i := range dy {
		dy[i] = float32(i%13)*0.1 - 0.6
	}
	b.SetBytes(int64(4 * len(x)))
	for b.Loop() {
		GeluErfGradX32(g, y, dy, x, 1.4142135, 1, 0.5, 1.1283792)
	}
}

func BenchmarkGeluErfBias32(b *testing.B) {
	x := benchInput()
	y := make([]float32, len(x))
	b.SetBytes(int64(4 * len(x)))
	for b.Loop() {
		GeluErfBias32(y, x, nil, 1.4142135, 1, 0.5)
	}
}
