package importer

import (
	"errors"
	"fmt"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// ErrMalformed is wrapped by every error about bytes that are not a valid
// ONNX protobuf message.
var ErrMalformed = errors.New("malformed protobuf")

// field is one decoded protobuf field: varint/fixed values in u, length-
// delimited payloads in b (a sub-slice of the input, never copied).
type field struct {
	num protowire.Number
	typ protowire.Type
	u   uint64
	b   []byte
}

// walk calls fn for every field of the message encoded in b.
func walk(b []byte, fn func(f field) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: bad tag: %v", ErrMalformed, protowire.ParseError(n))
		}
		b = b[n:]
		f := field{num: num, typ: typ}
		switch typ {
		case protowire.VarintType:
			f.u, n = protowire.ConsumeVarint(b)
		case protowire.Fixed32Type:
			var v uint32
			v, n = protowire.ConsumeFixed32(b)
			f.u = uint64(v)
		case protowire.Fixed64Type:
			f.u, n = protowire.ConsumeFixed64(b)
		case protowire.BytesType:
			f.b, n = protowire.ConsumeBytes(b)
		case protowire.StartGroupType:
			_, n = protowire.ConsumeGroup(num, b)
		default:
			return fmt.Errorf("%w: field %d has unknown wire type %d", ErrMalformed, num, typ)
		}
		if n < 0 {
			return fmt.Errorf("%w: field %d: %v", ErrMalformed, num, protowire.ParseError(n))
		}
		b = b[n:]
		if err := fn(f); err != nil {
			return err
		}
	}
	return nil
}

func (f field) str() (string, error) {
	if f.typ != protowire.BytesType {
		return "", fmt.Errorf("%w: field %d should be a string", ErrMalformed, f.num)
	}
	return string(f.b), nil
}

func (f field) msg() ([]byte, error) {
	if f.typ != protowire.BytesType {
		return nil, fmt.Errorf("%w: field %d should be a message", ErrMalformed, f.num)
	}
	return f.b, nil
}

func (f field) varint() (int64, error) {
	if f.typ != protowire.VarintType {
		return 0, fmt.Errorf("%w: field %d should be a varint", ErrMalformed, f.num)
	}
	return int64(f.u), nil
}

// int64s appends a repeated int64 field, packed or not.
func (f field) int64s(dst []int64) ([]int64, error) {
	switch f.typ {
	case protowire.VarintType:
		return append(dst, int64(f.u)), nil
	case protowire.BytesType:
		b := f.b
		for len(b) > 0 {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return nil, fmt.Errorf("%w: packed field %d: %v", ErrMalformed, f.num, protowire.ParseError(n))
			}
			dst = append(dst, int64(v))
			b = b[n:]
		}
		return dst, nil
	}
	return nil, fmt.Errorf("%w: field %d should be integers", ErrMalformed, f.num)
}

// uint64s appends a repeated uint64 field, packed or not.
func (f field) uint64s(dst []uint64) ([]uint64, error) {
	v, err := f.int64s(nil)
	if err != nil {
		return nil, err
	}
	for _, x := range v {
		dst = append(dst, uint64(x))
	}
	return dst, nil
}

// float32s appends a repeated float field, packed or not.
func (f field) float32s(dst []float32) ([]float32, error) {
	switch f.typ {
	case protowire.Fixed32Type:
		return append(dst, math.Float32frombits(uint32(f.u))), nil
	case protowire.BytesType:
		if len(f.b)%4 != 0 {
			return nil, fmt.Errorf("%w: packed float field %d has %d bytes", ErrMalformed, f.num, len(f.b))
		}
		for i := 0; i < len(f.b); i += 4 {
			v, _ := protowire.ConsumeFixed32(f.b[i:])
			dst = append(dst, math.Float32frombits(v))
		}
		return dst, nil
	}
	return nil, fmt.Errorf("%w: field %d should be floats", ErrMalformed, f.num)
}

// float64s appends a repeated double field, packed or not.
func (f field) float64s(dst []float64) ([]float64, error) {
	switch f.typ {
	case protowire.Fixed64Type:
		return append(dst, math.Float64frombits(f.u)), nil
	case protowire.BytesType:
		if len(f.b)%8 != 0 {
			return nil, fmt.Errorf("%w: packed double field %d has %d bytes", ErrMalformed, f.num, len(f.b))
		}
		for i := 0; i < len(f.b); i += 8 {
			v, _ := protowire.ConsumeFixed64(f.b[i:])
			dst = append(dst, math.Float64frombits(v))
		}
		return dst, nil
	}
	return nil, fmt.Errorf("%w: field %d should be doubles", ErrMalformed, f.num)
}
