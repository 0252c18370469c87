package train

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"reflect"
	"strings"
)

// writeJSONLine writes a log record (a struct of numbers, strings and
// booleans) as one line of JSON. Unlike encoding/json, which refuses the
// whole record, a NaN or infinite number is written as null: a validation
// pass with a NaN loss is still one record of the log.
func writeJSONLine(w io.Writer, v any) error {
	b, err := marshalFinite(v)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	_, err = w.Write(b)
	return err
}

// marshalFinite is json.Marshal for a struct (or pointer to one) whose
// non-finite float fields become null; fields follow their json tags.
func marshalFinite(v any) ([]byte, error) {
	rv := reflect.ValueOf(v)
	for rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return []byte("null"), nil
		}
		rv = rv.Elem()
	}
	if rv.Kind() != reflect.Struct {
		return json.Marshal(v)
	}
	var buf bytes.Buffer
	buf.WriteByte('{')
	ty := rv.Type()
	first := true
	for i := 0; i < ty.NumField(); i++ {
		f := ty.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fv := rv.Field(i)
		if strings.Contains(opts, "omitempty") && fv.IsZero() {
			continue
		}
		var val []byte
		if (fv.Kind() == reflect.Float64 || fv.Kind() == reflect.Float32) && (math.IsNaN(fv.Float()) || math.IsInf(fv.Float(), 0)) {
			val = []byte("null")
		} else {
			var err error
			if val, err = json.Marshal(fv.Interface()); err != nil {
				return nil, fmt.Errorf("train: log record field %s: %w", name, err)
			}
		}
		if !first {
			buf.WriteByte(',')
		}
		first = false
		key, _ := json.Marshal(name)
		buf.Write(key)
		buf.WriteByte(':')
		buf.Write(val)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}
