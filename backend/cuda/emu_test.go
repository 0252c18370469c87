package cuda

// A host emulator of plans, for machines without a GPU: device memory is
// byte slices, each kernel a Go transcription of its kernels.cu semantics,
// each GEMM a row-major loop. Running a plan this way and comparing with
// the CPU backend checks the planner itself (views, strides, offsets,
// GEMM parameters, im2col layout, arena placement: a buffer overwritten
// while still live shows up as a wrong output) on real models. It does not
// check the CUDA C, which only a GPU runs (gpu_test.go).

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/models"
)

type emuMem struct {
	regions []emuRegion
	last    int
}

type emuRegion struct {
	base uint64
	b    []byte
}

func (m *emuMem) add(base uint64, n int64) {
	m.regions = append(m.regions, emuRegion{base: base, b: make([]byte, max(n, 1))})
}

// at returns the bytes from address a on.
func (m *emuMem) at(a uint64) []byte {
	if a == 0 {
		return nil
	}
	if r := m.regions[m.last]; a >= r.base && a <= r.base+uint64(len(r.b)) {
		return r.b[a-r.base:]
	}
	for i, r := range m.regions {
		if a >= r.base && a <= r.base+uint64(len(r.b)) {
			m.last = i
			return r.b[a-r.base:]
		}
	}
	panic(fmt.Sprintf("emulator: address %#x outside device memory", a))
}

func (m *emuMem) f32(a uint64, i int64) float32 {
	return math.Float32frombits(binary.LittleEndian.Uint32(m.at(a)[4*i:]))
}
func (m *emuMem) setF32(a uint64, i int64, v float32) {
	binary.LittleEndian.PutUint32(m.at(a)[4*i:], math.Float32bits(v))
}
func (m *emuMem) i64(a uint64, i int64) int64 {
	return int64(binary.LittleEndian.Uint64(m.at(a)[8*i:]))
}

type emuArgs struct {
	m    *emuMem
	args []Arg
}

func (e emuArgs) p(i int) uint64 {
	a := e.args[i]
	if a.Buf == nil {
		return 0
	}
	return uint64(a.Buf.addr()) + uint64(a.Off)
}
func (e emuArgs) l(i int) int64   { return e.args[i].I }
func (e emuArgs) f(i int) float32 { return e.args[i].F }
func (e emuArgs) x(i int) *Index  { return e.args[i].Idx }

func locate(x *Index, i int64) (a, b, c int64) {
	a, b, c = x.Offset[0], x.Offset[1], x.Offset[2]
	for d := int(x.Rank) - 1; d >= 0; d-- {
		q, r := i/x.Dims[d], i%x.Dims[d]
		a += r * x.Strides[0][d]
		b += r * x.Strides[1][d]
		c += r * x.Strides[2][d]
		i = q
	}
	return
}

func emuBinary(op int64, a, b float32) float32 {
	switch op {
	case 0:
		return a + b
	case 1:
		return a - b
	case 2:
		return a * b
	case 3:
		return a / b
	case 4:
		return float32(math.Pow(float64(a), float64(b)))
	case 5:
		if a != a || a > b {
			return a
		}
		return b
	case 6:
		if a != a || a < b {
			return a
		}
		return b
	}
	return float32(math.NaN())
}

func emuUnary(op int64, v float32) float32 {
	x := float64(v)
	switch op {
	case 0:
		return float32(math.Exp(x))
	case 1:
		return float32(math.Log(x))
	case 2:
		return float32(math.Sqrt(x))
	case 3:
		return float32(math.Tanh(x))
	case 4:
		return float32(math.Erf(x))
	case 5:
		return float32(math.Sin(x))
	case 6:
		return float32(math.Cos(x))
	case 7:
		return float32(math.Floor(x))
	case 8:
		return -v
	case 9:
		return float32(math.Abs(x))
	case 10:
		if v > 0 || v != v {
			return v
		}
		return 0
	case 11:
		return float32(1 / (1 + math.Exp(-x)))
	case 12:
		return 1 / v
	case 13:
		return float32(math.Ceil(x))
	}
	return float32(math.NaN())
}

var errEmuUnsupported = fmt.Errorf("emulator: kernel not emulated")

// emuLaunch runs one launch; float kernels on float32 only.
func emuLaunch(m *emuMem, l *Launch) error {
	a := emuArgs{m, l.Args}
	switch l.Kernel {
	case "binary_fp":
		if a.l(5) != 1 {
			return errEmuUnsupported
		}
		x := a.x(6)
		for i := range a.l(3) {
			ia, ib, _ := locate(x, i)
			m.setF32(a.p(2), i, emuBinary(a.l(4), m.f32(a.p(0), ia), m.f32(a.p(1), ib)))
		}
	case "binary_i64":
		x := a.x(5)
		for i := range a.l(3) {
			ia, ib, _ := locate(x, i)
			p, q := m.i64(a.p(0), ia), m.i64(a.p(1), ib)
			var r int64
			switch a.l(4) {
			case 0:
				r = p + q
			case 1:
				r = p - q
			case 2:
				r = p * q
			case 3:
				if q != 0 {
					r = p / q
				}
			default:
				return errEmuUnsupported
			}
			binary.LittleEndian.PutUint64(m.at(a.p(2))[8*i:], uint64(r))
		}
	case "unary_fp":
		if a.l(4) != 1 {
			return errEmuUnsupported
		}
		for i := range a.l(2) {
			m.setF32(a.p(1), i, emuUnary(a.l(3), m.f32(a.p(0), i)))
		}
	case "strided_copy":
		x, elem := a.x(4), a.l(3)
		for i := range a.l(2) {
			is, io, _ := locate(x, i)
			copy(m.at(a.p(1))[io*elem:(io+1)*elem], m.at(a.p(0))[is*elem:])
		}
	case "fill":
		elem, v := a.l(2), uint64(a.l(3))
		out := m.at(a.p(0))
		for i := range a.l(1) {
			for k := range elem {
				out[i*elem+k] = byte(v >> (8 * k))
			}
		}
	case "gather":
		outer, axisLen, inner, nidx, elem, i32 := a.l(3), a.l(4), a.l(5), a.l(6), a.l(7), a.l(8)
		for i := range outer * nidx * inner {
			in, t := i%inner, i/inner
			j, o := t%nidx, t/nidx
			var k int64
			if i32 == 1 {
				k = int64(int32(binary.LittleEndian.Uint32(m.at(a.p(1))[4*j:])))
			} else {
				k = m.i64(a.p(1), j)
			}
			if k < 0 {
				k += axisLen
			}
			src := ((o*axisLen+k)*inner + in) * elem
			copy(m.at(a.p(2))[i*elem:(i+1)*elem], m.at(a.p(0))[src:])
		}
	case "reduce_fp", "reduce_rows_fp":
		var outer, r, inner, op, dt int64
		if l.Kernel == "reduce_rows_fp" {
			outer, r, inner, op, dt = a.l(2), a.l(3), 1, a.l(4), a.l(5)
		} else {
			outer, r, inner, op, dt = a.l(2), a.l(3), a.l(4), a.l(5), a.l(6)
		}
		if dt != 1 {
			return errEmuUnsupported
		}
		for i := range outer * inner {
			o, k := i/inner, i%inner
			acc := float32(0)
			if op == 1 {
				acc = float32(math.Inf(-1))
			}
			for j := range r {
				v := m.f32(a.p(0), o*r*inner+k+j*inner)
				switch op {
				case 1:
					acc = emuBinary(5, acc, v)
				case 3:
					acc += v * v
				default:
					acc += v
				}
			}
			if op == 2 {
				acc /= float32(r)
			}
			m.setF32(a.p(1), i, acc)
		}
	case "softmax_f32":
		rows, cols, logMode := a.l(2), a.l(3), a.l(4)
		for r := range rows {
			mx := math.Inf(-1)
			for j := range cols {
				mx = math.Max(mx, float64(m.f32(a.p(0), r*cols+j)))
			}
			var s float64
			for j := range cols {
				s += math.Exp(float64(m.f32(a.p(0), r*cols+j)) - mx)
			}
			for j := range cols {
				v := float64(m.f32(a.p(0), r*cols+j)) - mx
				if logMode == 1 {
					m.setF32(a.p(1), r*cols+j, float32(v-math.Log(s)))
				} else {
					m.setF32(a.p(1), r*cols+j, float32(math.Exp(v)/s))
				}
			}
		}
	case "layernorm_f32":
		rows, cols, eps := a.l(6), a.l(7), float64(a.f(8))
		for r := range rows {
			var s, v float64
			for j := range cols {
				s += float64(m.f32(a.p(0), r*cols+j))
			}
			mean := s / float64(cols)
			for j := range cols {
				d := float64(m.f32(a.p(0), r*cols+j)) - mean
				v += d * d
			}
			inv := 1 / math.Sqrt(v/float64(cols)+eps)
			for j := range cols {
				y := (float64(m.f32(a.p(0), r*cols+j)) - mean) * inv * float64(m.f32(a.p(1), j))
				if a.p(2) != 0 {
					y += float64(m.f32(a.p(2), j))
				}
				m.setF32(a.p(3), r*cols+j, float32(y))
			}
			if a.p(4) != 0 {
				m.setF32(a.p(4), r, float32(mean))
			}
			if a.p(5) != 0 {
				m.setF32(a.p(5), r, float32(inv))
			}
		}
	case "im2col":
		if a.l(15) != 4 {
			return errEmuUnsupported
		}
		C, H, W, KH, KW, OH, OW := a.l(2), a.l(3), a.l(4), a.l(5), a.l(6), a.l(7), a.l(8)
		sh, sw, ph, pw, dh, dw := a.l(9), a.l(10), a.l(11), a.l(12), a.l(13), a.l(14)
		for i := range C * KH * KW * OH * OW {
			ox, t := i%OW, i/OW
			oy := t % OH
			t /= OH
			kj := t % KW
			t /= KW
			ki, c := t%KH, t/KH
			y, x := oy*sh-ph+ki*dh, ox*sw-pw+kj*dw
			v := float32(0)
			if y >= 0 && y < H && x >= 0 && x < W {
				v = m.f32(a.p(0), (c*H+y)*W+x)
			}
			m.setF32(a.p(1), i, v)
		}
	case "pool2d_f32":
		NC, H, W, OH, OW, KH, KW := a.l(3), a.l(4), a.l(5), a.l(6), a.l(7), a.l(8), a.l(9)
		sh, sw, ph, pw, dh, dw, mode := a.l(10), a.l(11), a.l(12), a.l(13), a.l(14), a.l(15), a.l(16)
		for i := range NC * OH * OW {
			ox, t := i%OW, i/OW
			oy, nc := t%OH, t/OH
			acc, cnt, best := float32(math.Inf(-1)), int64(0), int64(-1)
			if mode != 0 {
				acc = 0
			}
			for ki := range KH {
				y := oy*sh - ph + ki*dh
				for kj := range KW {
					x := ox*sw - pw + kj*dw
					if y < 0 || y >= H || x < 0 || x >= W {
						if mode == 2 && y < H+ph && x < W+pw {
							cnt++
						}
						continue
					}
					v := m.f32(a.p(0), nc*H*W+y*W+x)
					if mode == 0 {
						if v > acc || best < 0 {
							acc, best = v, y*W+x
						}
					} else {
						acc += v
						cnt++
					}
				}
			}
			if mode != 0 {
				acc /= float32(max(cnt, 1))
			}
			m.setF32(a.p(1), i, acc)
			if mode == 0 && a.p(2) != 0 {
				binary.LittleEndian.PutUint64(m.at(a.p(2))[8*i:], uint64(nc*H*W+best))
			}
		}
	case "cast_any":
		from, to := a.l(3), a.l(4)
		for i := range a.l(2) {
			var f float64
			switch from {
			case 1:
				f = float64(m.f32(a.p(0), i))
			case 7:
				f = float64(m.i64(a.p(0), i))
			case 9:
				f = float64(m.at(a.p(0))[i])
			case 6:
				f = float64(int32(binary.LittleEndian.Uint32(m.at(a.p(0))[4*i:])))
			case 11:
				f = math.Float64frombits(binary.LittleEndian.Uint64(m.at(a.p(0))[8*i:]))
			default:
				return fmt.Errorf("cast from %d: %w", from, errEmuUnsupported)
			}
			switch to {
			case 1:
				m.setF32(a.p(1), i, float32(f))
			case 7:
				binary.LittleEndian.PutUint64(m.at(a.p(1))[8*i:], uint64(int64(f)))
			case 9:
				b := byte(0)
				if f != 0 {
					b = 1
				}
				m.at(a.p(1))[i] = b
			case 6:
				binary.LittleEndian.PutUint32(m.at(a.p(1))[4*i:], uint32(int32(f)))
			case 11:
				binary.LittleEndian.PutUint64(m.at(a.p(1))[8*i:], math.Float64bits(f))
			default:
				return fmt.Errorf("cast to %d: %w", to, errEmuUnsupported)
			}
		}
	case "compare_any":
		op, dt, x := a.l(4), a.l(5), a.x(6)
		for i := range a.l(3) {
			ia, ib, _ := locate(x, i)
			var lt, eq bool
			switch dt {
			case 1:
				p, q := m.f32(a.p(0), ia), m.f32(a.p(1), ib)
				lt, eq = p < q, p == q
				if op == 2 {
					lt = p > q
				}
			case 7:
				p, q := m.i64(a.p(0), ia), m.i64(a.p(1), ib)
				lt, eq = p < q, p == q
				if op == 2 {
					lt = p > q
				}
			case 9:
				p, q := m.at(a.p(0))[ia], m.at(a.p(1))[ib]
				lt, eq = p < q, p == q
				if op == 2 {
					lt = p > q
				}
			default:
				return errEmuUnsupported
			}
			r := lt
			if op == 0 {
				r = eq
			}
			m.at(a.p(2))[i] = b2u(r)
		}
	case "where_any":
		elem, x := a.l(5), a.x(6)
		for i := range a.l(4) {
			ic, ia, ib := locate(x, i)
			src := m.at(a.p(2))[ib*elem:]
			if m.at(a.p(0))[ic] != 0 {
				src = m.at(a.p(1))[ia*elem:]
			}
			copy(m.at(a.p(3))[i*elem:(i+1)*elem], src)
		}
	case "gather_elements_f32", "scatter_elements_f32":
		outer, idxLen, inner, dataLen := a.l(3), a.l(4), a.l(5), a.l(6)
		for i := range outer * idxLen * inner {
			in, o := i%inner, i/(idxLen*inner)
			k := m.i64(a.p(1), i)
			if k < 0 {
				k += dataLen
			}
			at := (o*dataLen+k)*inner + in
			if l.Kernel == "gather_elements_f32" {
				m.setF32(a.p(2), i, m.f32(a.p(0), at))
				continue
			}
			u := m.f32(a.p(2), i)
			switch a.l(7) {
			case 0:
				m.setF32(a.p(0), at, u)
			case 1:
				m.setF32(a.p(0), at, m.f32(a.p(0), at)+u)
			default:
				return errEmuUnsupported
			}
		}
	case "softmax_grad_f32":
		rows, cols, logMode := a.l(3), a.l(4), a.l(5)
		for r := range rows {
			var s float32
			for j := range cols {
				dy := m.f32(a.p(1), r*cols+j)
				if logMode == 1 {
					s += dy
				} else {
					s += dy * m.f32(a.p(0), r*cols+j)
				}
			}
			for j := range cols {
				y, dy := m.f32(a.p(0), r*cols+j), m.f32(a.p(1), r*cols+j)
				if logMode == 1 {
					m.setF32(a.p(2), r*cols+j, dy-float32(math.Exp(float64(y)))*s)
				} else {
					m.setF32(a.p(2), r*cols+j, y*(dy-s))
				}
			}
		}
	case "batchnorm_train_f32":
		N, C, HW, eps, mom, unbiased := a.l(8), a.l(9), a.l(10), float64(a.f(11)), a.f(12), a.l(13)
		for c := range C {
			cnt := N * HW
			at := func(k int64) int64 { return (k/HW)*C*HW + c*HW + k%HW }
			var s, v float64
			for k := range cnt {
				s += float64(m.f32(a.p(0), at(k)))
			}
			mean := s / float64(cnt)
			for k := range cnt {
				d := float64(m.f32(a.p(0), at(k))) - mean
				v += d * d
			}
			vr := v / float64(cnt)
			inv := 1 / math.Sqrt(vr+eps)
			for k := range cnt {
				m.setF32(a.p(3), at(k), float32((float64(m.f32(a.p(0), at(k)))-mean)*inv*float64(m.f32(a.p(1), c))+float64(m.f32(a.p(2), c))))
			}
			if a.p(4) != 0 {
				m.setF32(a.p(4), c, (1-mom)*m.f32(a.p(4), c)+mom*float32(mean))
			}
			if a.p(5) != 0 {
				uv := vr
				if unbiased == 1 && cnt > 1 {
					uv = vr * float64(cnt) / float64(cnt-1)
				}
				m.setF32(a.p(5), c, (1-mom)*m.f32(a.p(5), c)+mom*float32(uv))
			}
		}
	case "col2im_f32":
		C, H, W, KH, KW, OH, OW := a.l(2), a.l(3), a.l(4), a.l(5), a.l(6), a.l(7), a.l(8)
		sh, sw, ph, pw, dh, dw := a.l(9), a.l(10), a.l(11), a.l(12), a.l(13), a.l(14)
		for i := range C * H * W {
			x, t := i%W, i/W
			y, c := t%H, t/H
			var acc float32
			for ki := range KH {
				yy := y + ph - ki*dh
				if yy < 0 || yy%sh != 0 || yy/sh >= OH {
					continue
				}
				for kj := range KW {
					xx := x + pw - kj*dw
					if xx < 0 || xx%sw != 0 || xx/sw >= OW {
						continue
					}
					acc += m.f32(a.p(0), (((c*KH+ki)*KW+kj)*OH+yy/sh)*OW+xx/sw)
				}
			}
			m.setF32(a.p(1), i, m.f32(a.p(1), i)+acc)
		}
	case "adam_update_f32":
		n, cs, hy := a.l(5), a.p(6), a.p(7)
		b1, b2, omb1, omb2, eps := m.f32(cs, 0), m.f32(cs, 1), m.f32(cs, 2), m.f32(cs, 3), m.f32(cs, 4)
		negStep, bc2, wd, decay, l2 := m.f32(hy, 0), m.f32(hy, 1), m.f32(hy, 2), m.f32(hy, 3), m.f32(hy, 4) != 0
		if a.p(4) != 0 {
			return errEmuUnsupported
		}
		for i := range n {
			g, p := m.f32(a.p(1), i), m.f32(a.p(0), i)
			if a.l(8) == 1 {
				g = -g
			}
			if a.l(9) == 1 {
				p *= decay
			} else if l2 {
				g = fma32(wd, p, g)
			}
			mi := fma32(omb1, g, m.f32(a.p(2), i)*b1)
			vi := fma32(omb2*g, g, m.f32(a.p(3), i)*b2)
			m.setF32(a.p(2), i, mi)
			m.setF32(a.p(3), i, vi)
			denom := float32(math.Sqrt(float64(vi)))/bc2 + eps
			m.setF32(a.p(0), i, p+negStep*mi/denom)
		}
	case "sgd_update_f32":
		n, cs, hy := a.l(3), a.p(4), a.p(5)
		mom, damp, negLR, wd, first := m.f32(cs, 0), m.f32(cs, 1), m.f32(hy, 0), m.f32(hy, 1), m.f32(hy, 2) != 0
		for i := range n {
			d := m.f32(a.p(1), i)
			if a.l(7) == 1 {
				d = -d
			}
			if wd != 0 {
				d = fma32(wd, m.f32(a.p(0), i), d)
			}
			if a.p(2) != 0 {
				b := d
				if !first {
					b = fma32(damp, d, m.f32(a.p(2), i)*mom)
				}
				m.setF32(a.p(2), i, b)
				if a.l(6) == 1 {
					d = fma32(mom, b, d)
				} else {
					d = b
				}
			}
			m.setF32(a.p(0), i, fma32(negLR, d, m.f32(a.p(0), i)))
		}
	case "accumulate_f32":
		fresh := m.at(a.p(3))[0] != 0
		for i := range a.l(2) {
			v := m.f32(a.p(1), i)
			if !fresh {
				v += m.f32(a.p(0), i)
			}
			m.setF32(a.p(0), i, v)
		}
	case "unscale_f32":
		k := m.f32(a.p(2), 0)
		for i := range a.l(1) {
			v := m.f32(a.p(0), i)
			if v != v || math.IsInf(float64(v), 0) {
				m.at(a.p(3))[0] = 1
			}
			m.setF32(a.p(0), i, v*k)
		}
	case "clip_norm_total_f32":
		var s float32
		for i := range a.l(1) {
			v := m.f32(a.p(0), i)
			s += v * v
		}
		tot := float32(math.Sqrt(float64(s)))
		m.setF32(a.p(3), 0, tot)
		c := (1 / (tot + 1e-6)) * m.f32(a.p(2), 0)
		m.setF32(a.p(4), 0, min(c, 1))
	case "scale_by_f32":
		c := m.f32(a.p(2), 0)
		if c != 1 {
			for i := range a.l(1) {
				m.setF32(a.p(0), i, m.f32(a.p(0), i)*c)
			}
		}
	case "clip_value_f32":
		c := m.f32(a.p(2), 0)
		for i := range a.l(1) {
			v := m.f32(a.p(0), i)
			if v > c {
				v = c
			} else if v < -c {
				v = -c
			}
			m.setF32(a.p(0), i, v)
		}
	case "argmax_f32":
		outer, r, inner := a.l(2), a.l(3), a.l(4)
		for i := range outer * inner {
			o, k := i/inner, i%inner
			best, bv := int64(0), m.f32(a.p(0), o*r*inner+k)
			for j := int64(1); j < r; j++ {
				if v := m.f32(a.p(0), o*r*inner+k+j*inner); v > bv {
					best, bv = j, v
				}
			}
			binary.LittleEndian.PutUint64(m.at(a.p(1))[8*i:], uint64(best))
		}
	default:
		return errEmuUnsupported
	}
	return nil
}

func b2u(b bool) byte {
	if b {
		return 1
	}
	return 0
}

func fma32(x, y, z float32) float32 { return float32(math.FMA(float64(x), float64(y), float64(z))) }

// emuGemm is the row-major product the Gemm describes, computed directly
// from its row-major fields, and checked against the column-major call
// the GPU gets: the call's operands must be the Gemm's B and A.
func emuGemm(m *emuMem, g *Gemm) error {
	if g.DType != graph.Float32 || g.OutDType != graph.Float32 {
		return errEmuUnsupported
	}
	_, _, cm, cn, ck, first, _, _, second, _, _, _ := g.columnMajor()
	if cm != g.N || cn != g.M || ck != g.K || first.Buf != g.B.Buf || second.Buf != g.A.Buf {
		return fmt.Errorf("column-major call does not match the product")
	}
	addr := func(a Arg) uint64 { return uint64(a.Buf.addr()) + uint64(a.Off) }
	A, B, C := addr(g.A), addr(g.B), addr(g.C)
	f32s := func(a uint64) []float32 {
		b := m.at(a)
		return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
	}
	av, bv, cv := f32s(A), f32s(B), f32s(C)
	for b := range g.Batch {
		for i := range g.M {
			for j := range g.N {
				var s float32
				for k := range g.K {
					ai := i*g.K + k
					if g.TransA {
						ai = k*g.M + i
					}
					bi := k*g.N + j
					if g.TransB {
						bi = j*g.K + k
					}
					s += av[b*g.StrideA+ai] * bv[b*g.StrideB+bi]
				}
				ci := b*g.StrideC + i*g.N + j
				cv[ci] = g.Alpha*s + g.Beta*cv[ci]
			}
		}
	}
	return nil
}

// emuBind places p's arena and constants in m at fresh addresses from
// *next on and uploads the constants.
func emuBind(p *Plan, m *emuMem, next *uint64) {
	arenaBase := *next
	constBase := arenaBase + uint64(alignUp(p.ArenaBytes+1, 1<<20))
	*next = constBase + uint64(alignUp(p.ConstBytes+1, 1<<20))
	m.add(arenaBase, p.ArenaBytes)
	m.add(constBase, p.ConstBytes)
	for _, b := range p.arena {
		b.Addr = DevicePtr(arenaBase + uint64(b.Offset))
	}
	for _, b := range p.Consts {
		b.Addr = DevicePtr(constBase + uint64(b.Offset))
		copy(m.at(uint64(b.Addr)), hostBytes(b.Const))
	}
}

// emuExec uploads the inputs, runs every step and returns the outputs.
func emuExec(p *Plan, m *emuMem, in map[string]*graph.Tensor) (map[string]*graph.Tensor, error) {
	for name, b := range p.Inputs {
		t, ok := in[name]
		if !ok {
			return nil, fmt.Errorf("input %q not fed", name)
		}
		copy(m.at(uint64(b.Addr)), hostBytes(t))
	}
	for _, s := range p.Steps {
		var err error
		switch {
		case s.Launch != nil:
			err = emuLaunch(m, s.Launch)
		case s.Gemm != nil:
			err = emuGemm(m, s.Gemm)
		case s.Zero != nil:
			clear(m.at(uint64(s.Zero.addr()))[:s.Zero.Bytes])
		default:
			copy(m.at(uint64(s.CopyDst.addr()))[:s.CopyBytes], m.at(uint64(s.CopySrc.addr()))[:s.CopyBytes])
		}
		if err != nil {
			name := s.Node
			if s.Launch != nil {
				name += " " + s.Launch.Kernel
			}
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	out := map[string]*graph.Tensor{}
	for i, b := range p.Outputs {
		t, err := emuDownload(m, b)
		if err != nil {
			return nil, err
		}
		out[p.OutputNames[i]] = t
	}
	return out, nil
}

func emuDownload(m *emuMem, b *Buffer) (*graph.Tensor, error) {
	t, err := graph.NewTensor(b.DType, append([]int{}, b.Shape...))
	if err != nil {
		return nil, err
	}
	if bs, ok := t.Data.([]bool); ok {
		for i := range bs {
			bs[i] = m.at(uint64(b.addr()))[i] != 0
		}
		return t, nil
	}
	copy(graph.ElementBytes(t.Data), m.at(uint64(b.addr())))
	return t, nil
}

func emuRun(p *Plan, in map[string]*graph.Tensor) (map[string]*graph.Tensor, error) {
	m := &emuMem{}
	next := uint64(1 << 32)
	emuBind(p, m, &next)
	return emuExec(p, m, in)
}

// TestEmulatedPlansMatchCPU runs the inference exports of the fixture
// models through the planner and the emulator and compares every output
// with the CPU backend's, on the fixtures' golden inputs.
func TestEmulatedPlansMatchCPU(t *testing.T) {
	cpu, err := backend.Open("cpu")
	require.NoError(t, err)
	ran := 0
	for _, name := range []string{"mlp", "fmnist_cnn", "resnet18_small", "cifar_resnet", "vit_tiny"} {
		t.Run(name, func(t *testing.T) {
			f := filepath.Join("../../models", name, name+"_eval.onnx")
			m, err := importer.Load(f)
			require.NoError(t, err)
			golden, err := models.LoadGolden(filepath.Join(filepath.Dir(f), "golden.npz"))
			require.NoError(t, err)
			in := map[string]*graph.Tensor{}
			shapes := map[string][]int{}
			for _, vi := range m.Graph.Inputs {
				if _, init := m.Graph.Initializers[vi.Name]; init {
					continue
				}
				require.Contains(t, golden, vi.Name)
				in[vi.Name] = golden[vi.Name]
				shapes[vi.Name] = golden[vi.Name].Shape
			}
			g, err := prepareGraph(m)
			require.NoError(t, err)
			sg, types, err := specialise(g, m.Opset(), shapes, false)
			require.NoError(t, err)
			p, err := buildPlan(sg, m.Opset(), types, nil, true)
			require.NoError(t, err)
			got, err := emuRun(p, in)
			require.NoError(t, err)
			ce, err := cpu.Compile(m, backend.CompileOptions{})
			require.NoError(t, err)
			want, err := ce.Run(context.Background(), in)
			require.NoError(t, err)
			for k, w := range want {
				require.Contains(t, got, k)
				require.Equal(t, w.Shape, got[k].Shape, k)
				wv, gv := w.Float32s(), got[k].Float32s()
				var scale float64
				for _, v := range wv {
					scale = math.Max(scale, math.Abs(float64(v)))
				}
				for i := range wv {
					if !assert.InDelta(t, wv[i], gv[i], 1e-4*math.Max(scale, 1), "%s[%d]", k, i) {
						break
					}
				}
			}
			ran++
		})
	}
	assert.Equal(t, 5, ran, "every model ran in the emulator")
}
