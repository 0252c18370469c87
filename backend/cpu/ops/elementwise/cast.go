package elementwise

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	// Cast and CastLike see half types as they are (raw bits).
	kern.RegisterHalf("Cast", castKernel)
	kern.RegisterHalf("CastLike", castLikeKernel)
}

// castKernel is Cast: the output has dtype `to`.
func castKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 1); err != nil {
		return nil, err
	}
	a := n.Attr("to")
	if a == nil {
		return nil, n.Errorf("attribute to is required")
	}
	to := graph.DType(a.I)
	if a.Type == graph.AttrString || (a.I == 0 && a.S != "") {
		// Opset 1 spelled the target type as a string ("FLOAT", ...).
		d, err := castParseTypeName(a.S)
		if err != nil {
			return nil, n.Errorf("%w", err)
		}
		to = d
	}
	out, err := castTensor(n, in[0], to)
	if err != nil {
		return nil, err
	}
	return kern.Results(n, out), nil
}

// castLikeKernel is CastLike: the output takes input 1's dtype.
func castLikeKernel(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	out, err := castTensor(n, in[0], in[1].DType)
	if err != nil {
		return nil, err
	}
	return kern.Results(n, out), nil
}

// castTypeNames are the TensorProto.DataType names opset-1 Cast used.
var castTypeNames = map[string]graph.DType{
	"FLOAT": graph.Float32, "UINT8": graph.Uint8, "INT8": graph.Int8, "UINT16": graph.Uint16,
	"INT16": graph.Int16, "INT32": graph.Int32, "INT64": graph.Int64, "STRING": graph.String,
	"BOOL": graph.Bool, "FLOAT16": graph.Float16, "DOUBLE": graph.Float64, "UINT32": graph.Uint32,
	"UINT64": graph.Uint64, "BFLOAT16": graph.BFloat16,
}

func castParseTypeName(s string) (graph.DType, error) {
	if d, ok := castTypeNames[strings.ToUpper(s)]; ok {
		return d, nil
	}
	return graph.Undefined, fmt.Errorf("%w: cast to type %q is not supported", graph.ErrUnsupportedOp, s)
}

// castSupported reports whether Cast handles dtype d.
func castSupported(d graph.DType) bool {
	switch d {
	case graph.Float32, graph.Float64, graph.Float16, graph.BFloat16, graph.Bool, graph.String,
		graph.Int8, graph.Int16, graph.Int32, graph.Int64,
		graph.Uint8, graph.Uint16, graph.Uint32, graph.Uint64:
		return true
	}
	return false
}

// castTensor converts x to dtype to. Numeric conversions follow ONNX:
// floats truncate toward zero into integers, integers wrap into narrower
// integers, anything nonzero is true, and float16/bfloat16 results are
// rounded to nearest even from the exact source value.
func castTensor(n *graph.Node, x *graph.Tensor, to graph.DType) (*graph.Tensor, error) {
	if !castSupported(x.DType) {
		return nil, n.Errorf("%w: cast from %v is not supported", graph.ErrUnsupportedOp, x.DType)
	}
	if !castSupported(to) {
		return nil, n.Errorf("%w: cast to %v is not supported", graph.ErrUnsupportedOp, to)
	}
	if err := x.Validate(); err != nil {
		return nil, n.Errorf("input 0: %v", err)
	}
	if x.DType == to {
		switch xs := x.Data.(type) {
		case []float32:
			out, err := newFull(n, to, x.Shape)
			if err != nil {
				return nil, err
			}
			copy(out.Data.([]float32), xs)
			return out, nil
		case []float64:
			out, err := newFull(n, to, x.Shape)
			if err != nil {
				return nil, err
			}
			copy(out.Data.([]float64), xs)
			return out, nil
		}
		return x.Clone(), nil
	}
	out, err := newLike(n, to, x.Shape)
	if err != nil {
		return nil, err
	}
	switch {
	case x.DType == graph.String:
		err = castFromString(out, x.Data.([]string))
	case to == graph.String:
		castToString(out.Data.([]string), x)
	default:
		castNumeric(out, x)
	}
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	return out, nil
}

// castNumeric converts between the numeric and bool dtypes.
func castNumeric(dst, src *graph.Tensor) {
	switch s := src.Data.(type) {
	case []float32:
		castFrom(dst, s)
	case []float64:
		castFrom(dst, s)
	case []int8:
		castFrom(dst, s)
	case []int16:
		castFrom(dst, s)
	case []int32:
		castFrom(dst, s)
	case []int64:
		castFrom(dst, s)
	case []uint8:
		castFrom(dst, s)
	case []uint32:
		castFrom(dst, s)
	case []uint64:
		castFrom(dst, s)
	case []uint16:
		switch src.DType {
		case graph.Float16:
			f := make([]float32, len(s))
			for i, v := range s {
				f[i] = graph.Float16ToFloat32(v)
			}
			castFrom(dst, f)
		case graph.BFloat16:
			f := make([]float32, len(s))
			for i, v := range s {
				f[i] = graph.BFloat16ToFloat32(v)
			}
			castFrom(dst, f)
		default:
			castFrom(dst, s)
		}
	case []bool:
		u := make([]uint8, len(s))
		for i, v := range s {
			if v {
				u[i] = 1
			}
		}
		castFrom(dst, u)
	}
}

// castConvert is Go's numeric conversion, element by element.
func castConvert[D, S number](dst []D, src []S) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = D(v)
	}
}

// castFrom converts src into dst, whatever dst's dtype.
func castFrom[S number](dst *graph.Tensor, src []S) {
	switch d := dst.Data.(type) {
	case []float32:
		castConvert(d, src)
	case []float64:
		castConvert(d, src)
	case []int8:
		castConvert(d, src)
	case []int16:
		castConvert(d, src)
	case []int32:
		castConvert(d, src)
	case []int64:
		castConvert(d, src)
	case []uint8:
		castConvert(d, src)
	case []uint32:
		castConvert(d, src)
	case []uint64:
		castConvert(d, src)
	case []bool:
		d = d[:len(src)]
		for i, v := range src {
			d[i] = v != 0 // NaN is true
		}
	case []uint16:
		switch dst.DType {
		case graph.Float16:
			castToHalf(d, src, graph.Float32ToFloat16)
		case graph.BFloat16:
			castToHalf(d, src, graph.Float32ToBFloat16)
		default:
			castConvert(d, src)
		}
	}
}

// castToHalf rounds src to a 16-bit float format given its float32
// rounding function. Float32 sources round directly; wider sources are first
// rounded to float32 with round-to-odd, which makes the second rounding
// exact (no double-rounding error).
func castToHalf[S number](dst []uint16, src []S, round func(float32) uint16) {
	dst = dst[:len(src)]
	if f, ok := any(src).([]float32); ok {
		for i, v := range f {
			dst[i] = round(v)
		}
		return
	}
	for i, v := range src {
		dst[i] = round(castRoundToOdd32(float64(v)))
	}
}

// castRoundToOdd32 rounds v to float32 with round-to-odd: exact values stay,
// inexact ones take the neighbour whose last mantissa bit is 1.
func castRoundToOdd32(v float64) float32 {
	f := float32(v)
	if float64(f) == v || math.IsNaN(v) || math.IsInf(float64(f), 0) {
		return f
	}
	if math.Float32bits(f)&1 == 1 {
		return f
	}
	if float64(f) > v {
		return math.Nextafter32(f, float32(math.Inf(-1)))
	}
	return math.Nextafter32(f, float32(math.Inf(1)))
}

// castToString formats numbers the way ONNX prints them: shortest
// round-trip decimal for floats, "INF", "-INF" and "NaN" for the special
// values, "1"/"0" for bools.
func castToString(dst []string, src *graph.Tensor) {
	format := func(v float64, bits int) string {
		switch {
		case math.IsNaN(v):
			return "NaN"
		case math.IsInf(v, 1):
			return "INF"
		case math.IsInf(v, -1):
			return "-INF"
		}
		return strconv.FormatFloat(v, 'g', -1, bits)
	}
	switch s := src.Data.(type) {
	case []float32:
		for i, v := range s {
			dst[i] = format(float64(v), 32)
		}
	case []float64:
		for i, v := range s {
			dst[i] = format(v, 64)
		}
	case []bool:
		for i, v := range s {
			dst[i] = "0"
			if v {
				dst[i] = "1"
			}
		}
	case []uint64:
		for i, v := range s {
			dst[i] = strconv.FormatUint(v, 10)
		}
	default:
		if src.DType.IsInt() {
			for i := range dst {
				dst[i] = strconv.FormatInt(src.Int(i), 10)
			}
			return
		}
		// Float16 and BFloat16: print the float32 value with 32-bit precision.
		for i := range dst {
			dst[i] = format(src.Float(i), 32)
		}
	}
}

// castFromString parses decimal or scientific numbers (and the literals
// INF, +INF, -INF and NaN in any case) into dst.
func castFromString(dst *graph.Tensor, src []string) error {
	bits := 64
	if dst.DType == graph.Float32 {
		bits = 32 // parse straight to float32: one rounding
	}
	for i, s := range src {
		s = strings.TrimSpace(s)
		if dst.DType.IsInt() {
			if v, err := strconv.ParseInt(s, 10, 64); err == nil {
				kern.SetInt(dst, i, v)
				continue
			}
			if v, err := strconv.ParseUint(s, 10, 64); err == nil {
				if u, ok := dst.Data.([]uint64); ok {
					u[i] = v
					continue
				}
				kern.SetInt(dst, i, int64(v))
				continue
			}
		}
		if dst.DType == graph.Bool {
			if b, err := strconv.ParseBool(s); err == nil {
				dst.Data.([]bool)[i] = b
				continue
			}
		}
		v, err := strconv.ParseFloat(s, bits)
		if err != nil && !castRangeErr(err) {
			return castStringErr(i, src[i], dst.DType)
		}
		switch d := dst.Data.(type) {
		case []float32:
			d[i] = float32(v)
		case []float64:
			d[i] = v
		case []bool:
			d[i] = v != 0
		default:
			if dst.DType.IsInt() {
				kern.SetInt(dst, i, int64(v))
			} else {
				dst.SetFloat(i, float64(castRoundToOdd32(v)))
			}
		}
	}
	return nil
}

// castRangeErr reports whether err is ParseFloat's out-of-range error, for
// which it still returns the right ±Inf or 0.
func castRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

func castStringErr(i int, s string, to graph.DType) error {
	return fmt.Errorf("element %d is %q, which is not a number to cast to %v", i, s, to)
}
