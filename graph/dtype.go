package graph

import (
	"fmt"
	"math"
)

// DType is an element type. The numeric values are ONNX's TensorProto.DataType
// codes, so a DType read from a file needs no translation table.
type DType int32

// The element types onnxtrain knows. Codes follow TensorProto.DataType.
const (
	Undefined  DType = 0
	Float32    DType = 1
	Uint8      DType = 2
	Int8       DType = 3
	Uint16     DType = 4
	Int16      DType = 5
	Int32      DType = 6
	Int64      DType = 7
	String     DType = 8
	Bool       DType = 9
	Float16    DType = 10
	Float64    DType = 11
	Uint32     DType = 12
	Uint64     DType = 13
	Complex64  DType = 14
	Complex128 DType = 15
	BFloat16   DType = 16

	// SequenceOf and OptionalOf are not tensor element types: a Tensor of
	// this DType is an ONNX sequence (Data is []*Tensor) or optional (Data
	// is []*Tensor of length 0 or 1). They let sequence and optional values
	// flow through the same executor as tensors. The codes are outside
	// ONNX's range.
	SequenceOf DType = 1000
	OptionalOf DType = 1001
)

var dtypeNames = map[DType]string{
	Undefined: "undefined", Float32: "float32", Uint8: "uint8", Int8: "int8",
	Uint16: "uint16", Int16: "int16", Int32: "int32", Int64: "int64",
	String: "string", Bool: "bool", Float16: "float16", Float64: "float64",
	Uint32: "uint32", Uint64: "uint64", Complex64: "complex64",
	Complex128: "complex128", BFloat16: "bfloat16",
	SequenceOf: "sequence", OptionalOf: "optional",
}

func (d DType) String() string {
	if s, ok := dtypeNames[d]; ok {
		return s
	}
	return fmt.Sprintf("dtype(%d)", int32(d))
}

// ParseDType turns a name such as "float32" back into a DType.
func ParseDType(s string) (DType, error) {
	for d, n := range dtypeNames {
		if n == s {
			return d, nil
		}
	}
	return Undefined, fmt.Errorf("graph: unknown dtype %q", s)
}

// Size is the number of bytes one element occupies in memory (and in ONNX
// raw_data). It is 0 for types without a fixed size.
func (d DType) Size() int {
	switch d {
	case Float32, Int32, Uint32:
		return 4
	case Float64, Int64, Uint64, Complex64:
		return 8
	case Complex128:
		return 16
	case Uint8, Int8, Bool:
		return 1
	case Uint16, Int16, Float16, BFloat16:
		return 2
	}
	return 0
}

// IsFloat reports whether d is a floating-point type.
func (d DType) IsFloat() bool {
	return d == Float32 || d == Float64 || d == Float16 || d == BFloat16
}

// IsInt reports whether d is a signed or unsigned integer type.
func (d DType) IsInt() bool {
	switch d {
	case Int8, Int16, Int32, Int64, Uint8, Uint16, Uint32, Uint64:
		return true
	}
	return false
}

// IsSigned reports whether d can hold negative values.
func (d DType) IsSigned() bool {
	switch d {
	case Int8, Int16, Int32, Int64, Float32, Float64, Float16, BFloat16:
		return true
	}
	return false
}

// Float16ToFloat32 converts IEEE 754 half-precision bits to float32.
func Float16ToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		// Subnormal: normalise.
		e := uint32(127 - 15 + 1)
		for mant&0x400 == 0 {
			mant <<= 1
			e--
		}
		mant &= 0x3ff
		return math.Float32frombits(sign | e<<23 | mant<<13)
	case exp == 0x1f:
		return math.Float32frombits(sign | 0xff<<23 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// Float32ToFloat16 converts to IEEE 754 half precision, rounding to nearest even.
func Float32ToFloat16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff { // Inf or NaN
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign
		}
		mant |= 0x800000
		shift := uint32(14 - e)
		half := uint32(1) << (shift - 1)
		r := mant >> shift
		rem := mant & (1<<shift - 1)
		if rem > half || (rem == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++ // may carry into the exponent, which is the right result
	}
	return sign | uint16(r)
}

// BFloat16ToFloat32 converts bfloat16 bits to float32.
func BFloat16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// Float32ToBFloat16 converts to bfloat16, rounding to nearest even.
func Float32ToBFloat16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}
