package graph

import (
	"encoding/binary"
	"fmt"
	"math"
)

// DecodeElements fills data, a typed slice as a Tensor's Data holds
// ([]float32, []int64, []uint16 for float16 and bfloat16, []bool, ...),
// from raw, its elements packed in byte order order. raw must hold at least
// len(data) elements; bytes past them are ignored. The ONNX importer
// (raw_data, external data) and tensorio (.npy, safetensors) share it.
func DecodeElements(data any, raw []byte, order binary.ByteOrder) error {
	need := func(n, size int) error {
		if len(raw) < n*size {
			return fmt.Errorf("graph: %d bytes hold fewer than %d elements of %d bytes", len(raw), n, size)
		}
		return nil
	}
	switch s := data.(type) {
	case []float32:
		if err := need(len(s), 4); err != nil {
			return err
		}
		for i := range s {
			s[i] = math.Float32frombits(order.Uint32(raw[4*i:]))
		}
	case []float64:
		if err := need(len(s), 8); err != nil {
			return err
		}
		for i := range s {
			s[i] = math.Float64frombits(order.Uint64(raw[8*i:]))
		}
	case []int64:
		if err := need(len(s), 8); err != nil {
			return err
		}
		for i := range s {
			s[i] = int64(order.Uint64(raw[8*i:]))
		}
	case []uint64:
		if err := need(len(s), 8); err != nil {
			return err
		}
		for i := range s {
			s[i] = order.Uint64(raw[8*i:])
		}
	case []int32:
		if err := need(len(s), 4); err != nil {
			return err
		}
		for i := range s {
			s[i] = int32(order.Uint32(raw[4*i:]))
		}
	case []uint32:
		if err := need(len(s), 4); err != nil {
			return err
		}
		for i := range s {
			s[i] = order.Uint32(raw[4*i:])
		}
	case []int16:
		if err := need(len(s), 2); err != nil {
			return err
		}
		for i := range s {
			s[i] = int16(order.Uint16(raw[2*i:]))
		}
	case []uint16:
		if err := need(len(s), 2); err != nil {
			return err
		}
		for i := range s {
			s[i] = order.Uint16(raw[2*i:])
		}
	case []int8:
		if err := need(len(s), 1); err != nil {
			return err
		}
		for i := range s {
			s[i] = int8(raw[i])
		}
	case []uint8:
		if err := need(len(s), 1); err != nil {
			return err
		}
		copy(s, raw)
	case []bool:
		if err := need(len(s), 1); err != nil {
			return err
		}
		for i := range s {
			s[i] = raw[i] != 0
		}
	default:
		return fmt.Errorf("graph: cannot decode bytes into %T", data)
	}
	return nil
}
