package graph

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// ErrTooLarge is returned when a shape's element count does not fit in memory.
var ErrTooLarge = errors.New("tensor too large")

// MaxElements bounds the element count of any tensor onnxtrain allocates
// (2^40, 4 TiB of float32): past it a shape is certainly an error.
const MaxElements = 1 << 40

// Tensor is a dense, row-major array. Data holds a typed slice whose Go type
// follows DType: []float32, []float64, []int8, []int16, []int32, []int64,
// []uint8, []uint16, []uint32, []uint64, []bool, []string, and []uint16 holding
// the raw bits for Float16 and BFloat16.
type Tensor struct {
	DType DType
	Shape []int
	Data  any
}

// NumElements multiplies the dims of shape, failing on negative dims or on
// a product past MaxElements.
func NumElements(shape []int) (int, error) {
	n := 1
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension %d in shape %v", d, shape)
		}
		if d != 0 && n > MaxElements/d {
			return 0, fmt.Errorf("shape %v: %w (more than %d elements)", shape, ErrTooLarge, int64(MaxElements))
		}
		n *= d
	}
	return n, nil
}

// NewSequence makes a sequence value holding items (not copied).
func NewSequence(items []*Tensor) *Tensor {
	if items == nil {
		items = []*Tensor{}
	}
	return &Tensor{DType: SequenceOf, Shape: []int{len(items)}, Data: items}
}

// NewOptional makes an optional value: empty when v is nil.
func NewOptional(v *Tensor) *Tensor {
	if v == nil {
		return &Tensor{DType: OptionalOf, Shape: []int{0}, Data: []*Tensor{}}
	}
	return &Tensor{DType: OptionalOf, Shape: []int{1}, Data: []*Tensor{v}}
}

// Items returns the elements of a sequence or optional value (nil otherwise).
func (t *Tensor) Items() []*Tensor { s, _ := t.Data.([]*Tensor); return s }

// IsContainer reports whether t is a sequence or optional value rather than a tensor.
func (t *Tensor) IsContainer() bool { return t.DType == SequenceOf || t.DType == OptionalOf }

// Size is the number of elements in t.
func (t *Tensor) Size() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Rank is the number of dimensions.
func (t *Tensor) Rank() int { return len(t.Shape) }

// MakeSlice allocates a zeroed slice of n elements of the Go type that holds d.
func MakeSlice(d DType, n int) (any, error) {
	switch d {
	case Float32:
		return make([]float32, n), nil
	case Float64:
		return make([]float64, n), nil
	case Int8:
		return make([]int8, n), nil
	case Int16:
		return make([]int16, n), nil
	case Int32:
		return make([]int32, n), nil
	case Int64:
		return make([]int64, n), nil
	case Uint8:
		return make([]uint8, n), nil
	case Uint16, Float16, BFloat16:
		return make([]uint16, n), nil
	case Uint32:
		return make([]uint32, n), nil
	case Uint64:
		return make([]uint64, n), nil
	case Bool:
		return make([]bool, n), nil
	case String:
		return make([]string, n), nil
	case SequenceOf, OptionalOf:
		return make([]*Tensor, n), nil
	}
	return nil, fmt.Errorf("graph: dtype %v is not supported", d)
}

// NewTensor allocates a zero tensor of the given dtype and shape.
func NewTensor(d DType, shape []int) (*Tensor, error) {
	n, err := NumElements(shape)
	if err != nil {
		return nil, err
	}
	data, err := MakeSlice(d, n)
	if err != nil {
		return nil, err
	}
	return &Tensor{DType: d, Shape: append([]int{}, shape...), Data: data}, nil
}

// Zeros is NewTensor for callers that know the shape is valid; it panics on
// an impossible shape, so use it only for shapes the caller computed itself.
func Zeros(d DType, shape ...int) *Tensor {
	t, err := NewTensor(d, shape)
	if err != nil {
		panic(err)
	}
	return t
}

// FromFloat32 wraps data (not copied) as a float32 tensor.
func FromFloat32(data []float32, shape ...int) *Tensor {
	return &Tensor{DType: Float32, Shape: shape, Data: data}
}

// FromFloat64 wraps data (not copied) as a float64 tensor.
func FromFloat64(data []float64, shape ...int) *Tensor {
	return &Tensor{DType: Float64, Shape: shape, Data: data}
}

// FromInt64 wraps data (not copied) as an int64 tensor.
func FromInt64(data []int64, shape ...int) *Tensor {
	return &Tensor{DType: Int64, Shape: shape, Data: data}
}

// FromInt32 wraps data (not copied) as an int32 tensor.
func FromInt32(data []int32, shape ...int) *Tensor {
	return &Tensor{DType: Int32, Shape: shape, Data: data}
}

// FromBool wraps data (not copied) as a bool tensor.
func FromBool(data []bool, shape ...int) *Tensor {
	return &Tensor{DType: Bool, Shape: shape, Data: data}
}

// Scalar returns a rank-0 tensor of dtype d holding v.
func Scalar(d DType, v float64) *Tensor {
	t := Zeros(d)
	t.SetFloat(0, v)
	return t
}

// Float32s returns the data as []float32, or nil if the dtype differs.
func (t *Tensor) Float32s() []float32 { s, _ := t.Data.([]float32); return s }

// Float64s returns the data as []float64, or nil if the dtype differs.
func (t *Tensor) Float64s() []float64 { s, _ := t.Data.([]float64); return s }

// Int64s returns the data as []int64, or nil if the dtype differs.
func (t *Tensor) Int64s() []int64 { s, _ := t.Data.([]int64); return s }

// Bools returns the data as []bool, or nil if the dtype differs.
func (t *Tensor) Bools() []bool { s, _ := t.Data.([]bool); return s }

// Clone returns a deep copy.
func (t *Tensor) Clone() *Tensor {
	c := &Tensor{DType: t.DType, Shape: append([]int{}, t.Shape...)}
	switch s := t.Data.(type) {
	case []float32:
		c.Data = append([]float32{}, s...)
	case []float64:
		c.Data = append([]float64{}, s...)
	case []int8:
		c.Data = append([]int8{}, s...)
	case []int16:
		c.Data = append([]int16{}, s...)
	case []int32:
		c.Data = append([]int32{}, s...)
	case []int64:
		c.Data = append([]int64{}, s...)
	case []uint8:
		c.Data = append([]uint8{}, s...)
	case []uint16:
		c.Data = append([]uint16{}, s...)
	case []uint32:
		c.Data = append([]uint32{}, s...)
	case []uint64:
		c.Data = append([]uint64{}, s...)
	case []bool:
		c.Data = append([]bool{}, s...)
	case []string:
		c.Data = append([]string{}, s...)
	case []*Tensor:
		items := make([]*Tensor, len(s))
		for i, it := range s {
			items[i] = it.Clone()
		}
		c.Data = items
	}
	return c
}

// Float returns element i converted to float64 (bool as 0/1).
func (t *Tensor) Float(i int) float64 {
	switch s := t.Data.(type) {
	case []float32:
		return float64(s[i])
	case []float64:
		return s[i]
	case []int8:
		return float64(s[i])
	case []int16:
		return float64(s[i])
	case []int32:
		return float64(s[i])
	case []int64:
		return float64(s[i])
	case []uint8:
		return float64(s[i])
	case []uint16:
		switch t.DType {
		case Float16:
			return float64(Float16ToFloat32(s[i]))
		case BFloat16:
			return float64(BFloat16ToFloat32(s[i]))
		}
		return float64(s[i])
	case []uint32:
		return float64(s[i])
	case []uint64:
		return float64(s[i])
	case []bool:
		if s[i] {
			return 1
		}
		return 0
	}
	return math.NaN()
}

// Int returns element i converted to int64 (floats truncated toward zero).
func (t *Tensor) Int(i int) int64 {
	switch s := t.Data.(type) {
	case []int64:
		return s[i]
	case []int32:
		return int64(s[i])
	case []int8:
		return int64(s[i])
	case []int16:
		return int64(s[i])
	case []uint8:
		return int64(s[i])
	case []uint32:
		return int64(s[i])
	case []uint64:
		return int64(s[i])
	case []uint16:
		if t.DType == Uint16 {
			return int64(s[i])
		}
	}
	return int64(t.Float(i))
}

// SetFloat stores v (converted to the tensor's dtype) at element i.
func (t *Tensor) SetFloat(i int, v float64) {
	switch s := t.Data.(type) {
	case []float32:
		s[i] = float32(v)
	case []float64:
		s[i] = v
	case []int8:
		s[i] = int8(v)
	case []int16:
		s[i] = int16(v)
	case []int32:
		s[i] = int32(v)
	case []int64:
		s[i] = int64(v)
	case []uint8:
		s[i] = uint8(v)
	case []uint16:
		switch t.DType {
		case Float16:
			s[i] = Float32ToFloat16(float32(v))
		case BFloat16:
			s[i] = Float32ToBFloat16(float32(v))
		default:
			s[i] = uint16(v)
		}
	case []uint32:
		s[i] = uint32(v)
	case []uint64:
		s[i] = uint64(v)
	case []bool:
		s[i] = v != 0
	}
}

// Ints returns the tensor's elements as []int (for shapes, axes, indices).
func (t *Tensor) Ints() []int {
	n := t.Size()
	out := make([]int, n)
	for i := range out {
		out[i] = int(t.Int(i))
	}
	return out
}

// Validate checks that Data has the Go type DType asks for and the length the
// shape asks for.
func (t *Tensor) Validate() error {
	n, err := NumElements(t.Shape)
	if err != nil {
		return err
	}
	l := -1
	ok := false
	switch s := t.Data.(type) {
	case []float32:
		l, ok = len(s), t.DType == Float32
	case []float64:
		l, ok = len(s), t.DType == Float64
	case []int8:
		l, ok = len(s), t.DType == Int8
	case []int16:
		l, ok = len(s), t.DType == Int16
	case []int32:
		l, ok = len(s), t.DType == Int32
	case []int64:
		l, ok = len(s), t.DType == Int64
	case []uint8:
		l, ok = len(s), t.DType == Uint8
	case []uint16:
		l, ok = len(s), t.DType == Uint16 || t.DType == Float16 || t.DType == BFloat16
	case []uint32:
		l, ok = len(s), t.DType == Uint32
	case []uint64:
		l, ok = len(s), t.DType == Uint64
	case []bool:
		l, ok = len(s), t.DType == Bool
	case []string:
		l, ok = len(s), t.DType == String
	case []*Tensor:
		if !t.IsContainer() || len(t.Shape) != 1 || t.Shape[0] != len(s) {
			return fmt.Errorf("container of dtype %v and shape %v holds %d items", t.DType, t.Shape, len(s))
		}
		for i, it := range s {
			if it == nil {
				return fmt.Errorf("item %d is nil", i)
			}
			if err := it.Validate(); err != nil {
				return fmt.Errorf("item %d: %w", i, err)
			}
		}
		return nil
	}
	if !ok {
		return fmt.Errorf("tensor of dtype %v holds %T", t.DType, t.Data)
	}
	if l != n {
		return fmt.Errorf("tensor of shape %v holds %d elements, want %d", t.Shape, l, n)
	}
	return nil
}

// String prints dtype, shape and the first few elements.
func (t *Tensor) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v%v[", t.DType, t.Shape)
	n := t.Size()
	for i := 0; i < n && i < 8; i++ {
		if i > 0 {
			b.WriteString(" ")
		}
		if t.DType == String {
			b.WriteString(t.Data.([]string)[i])
		} else {
			fmt.Fprintf(&b, "%g", t.Float(i))
		}
	}
	if n > 8 {
		b.WriteString(" ...")
	}
	b.WriteString("]")
	return b.String()
}

// Strides returns row-major strides (in elements) for shape.
func Strides(shape []int) []int {
	s := make([]int, len(shape))
	acc := 1
	for i := len(shape) - 1; i >= 0; i-- {
		s[i] = acc
		acc *= shape[i]
	}
	return s
}

// SameShape reports whether a and b are equal.
func SameShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
