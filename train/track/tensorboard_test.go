package track

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onnxtrain/onnxtrain/internal/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"
)

// Reference bytes from testdata/tfevents.py, which encodes with the protobuf package and
// computes CRC-32C bit by bit: `/usr/bin/python3 testdata/tfevents.py golden`.
const (
	goldenEvent  = "0900001040fc54d94110032a180a0b0a046c6f7373150000003f0a090a026c72156f12833a"
	goldenRecord = "2500000000000000eabc36f3" + goldenEvent + "ee8b0b3d"
)

func TestMaskedCRC(t *testing.T) {
	// CRC-32C of "123456789" is 0xe3069283 (the standard check value); masked by
	// testdata/tfevents.py.
	assert.Equal(t, uint32(0xe3069283), crc32.Checksum([]byte("123456789"), castagnoli))
	assert.Equal(t, uint32(0xc78ab0e5), maskedCRC([]byte("123456789")))
}

func TestEventEncodingMatchesReference(t *testing.T) {
	wall := time.Unix(1700000000, 250_000_000)
	event := appendEvent(nil, wall, 3, "", map[string]float64{MetricLR: 0.001, MetricLoss: 0.5})
	assert.Equal(t, goldenEvent, hex.EncodeToString(event))
	assert.Equal(t, goldenRecord, hex.EncodeToString(appendTFRecord(nil, event)))
}

// tbEvent is a decoded Event.
type tbEvent struct {
	WallTime    float64
	Step        int64
	FileVersion string
	Values      [][2]any // tag, simple_value (float32)
}

// readEvents decodes an event file with Go's own CRC-32C table and protowire's consumers.
func readEvents(t *testing.T, path string) []tbEvent {
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	table := crc32.MakeTable(crc32.Castagnoli)
	mask := func(b []byte) uint32 {
		c := crc32.Checksum(b, table)
		return (c>>15 | c<<17) + 0xa282ead8
	}
	var events []tbEvent
	for len(data) > 0 {
		require.GreaterOrEqual(t, len(data), 12, "record header")
		length := binary.LittleEndian.Uint64(data)
		require.Equal(t, mask(data[:8]), binary.LittleEndian.Uint32(data[8:]), "length CRC")
		require.GreaterOrEqual(t, uint64(len(data)), 16+length, "record body")
		body := data[12 : 12+length]
		require.Equal(t, mask(body), binary.LittleEndian.Uint32(data[12+length:]), "data CRC")
		data = data[16+length:]

		var ev tbEvent
		for len(body) > 0 {
			num, typ, n := protowire.ConsumeTag(body)
			require.Positive(t, n)
			body = body[n:]
			switch {
			case num == 1 && typ == protowire.Fixed64Type:
				v, n := protowire.ConsumeFixed64(body)
				require.Positive(t, n)
				ev.WallTime, body = math.Float64frombits(v), body[n:]
			case num == 2 && typ == protowire.VarintType:
				v, n := protowire.ConsumeVarint(body)
				require.Positive(t, n)
				ev.Step, body = int64(v), body[n:]
			case num == 3 && typ == protowire.BytesType:
				v, n := protowire.ConsumeString(body)
				require.Positive(t, n)
				ev.FileVersion, body = v, body[n:]
			case num == 5 && typ == protowire.BytesType:
				summary, n := protowire.ConsumeBytes(body)
				require.Positive(t, n)
				body = body[n:]
				for len(summary) > 0 {
					num, typ, n := protowire.ConsumeTag(summary)
					require.Equal(t, protowire.Number(1), num)
					require.Equal(t, protowire.BytesType, typ)
					value, m := protowire.ConsumeBytes(summary[n:])
					require.Positive(t, m)
					summary = summary[n+m:]
					var tag string
					var simple float32
					for len(value) > 0 {
						num, typ, n := protowire.ConsumeTag(value)
						value = value[n:]
						switch {
						case num == 1 && typ == protowire.BytesType:
							s, n := protowire.ConsumeString(value)
							require.Positive(t, n)
							tag, value = s, value[n:]
						case num == 2 && typ == protowire.Fixed32Type:
							v, n := protowire.ConsumeFixed32(value)
							require.Positive(t, n)
							simple, value = math.Float32frombits(v), value[n:]
						default:
							t.Fatalf("unexpected Summary.Value field %d", num)
						}
					}
					ev.Values = append(ev.Values, [2]any{tag, simple})
				}
			default:
				t.Fatalf("unexpected Event field %d (wire type %d)", num, typ)
			}
		}
		events = append(events, ev)
	}
	return events
}

func writeTestEvents(t *testing.T, dir string) *TensorBoard {
	tb, err := newTensorBoard(dir, time.Unix(1700000000, 0))
	require.NoError(t, err)
	base := time.Unix(1700000010, 500_000_000)
	for step := 1; step <= 3; step++ {
		tb.Step(Record{Step: step, Epoch: 0, Time: base.Add(time.Duration(step) * time.Second),
			Metrics: map[string]float64{MetricLoss: 1 / float64(step), MetricLR: 0.01}})
	}
	tb.Eval(Record{Step: 3, Time: base.Add(4 * time.Second),
		Metrics: map[string]float64{MetricValLoss: 0.375, MetricValAccuracy: 0.75}})
	tb.Step(Record{Step: 4}) // no metrics: no event
	require.NoError(t, tb.Close())
	return tb
}

func TestTensorBoardFileReadsBack(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "runs", "exp1")
	tb := writeTestEvents(t, dir)
	host, _ := os.Hostname()
	assert.Equal(t, filepath.Join(dir, "events.out.tfevents.1700000000."+host), tb.Path())

	events := readEvents(t, tb.Path())
	require.Len(t, events, 5)
	assert.Equal(t, tbEvent{WallTime: 1700000000, FileVersion: "brain.Event:2"}, events[0])
	assert.Equal(t, tbEvent{WallTime: 1700000011.5, Step: 1,
		Values: [][2]any{{"loss", float32(1)}, {"lr", float32(0.01)}}}, events[1])
	assert.Equal(t, [][2]any{{"loss", float32(1.0 / 3)}, {"lr", float32(0.01)}}, events[3].Values)
	assert.Equal(t, tbEvent{WallTime: 1700000014.5, Step: 3,
		Values: [][2]any{{"val_loss", float32(0.375)}, {"val_accuracy", float32(0.75)}}}, events[4])
}

// TestTensorBoardIndependentReader reads the file with testdata/tfevents.py (bitwise CRC-32C,
// the protobuf package's decoder), where Python and its protobuf package are installed.
func TestTensorBoardIndependentReader(t *testing.T) {
	python := testutil.Python(t, "google.protobuf")
	tb := writeTestEvents(t, t.TempDir())
	out, err := exec.Command(python, "testdata/tfevents.py", "read", tb.Path()).CombinedOutput()
	require.NoError(t, err, string(out))
	var events []struct {
		WallTime    float64  `json:"wall_time"`
		Step        int64    `json:"step"`
		FileVersion string   `json:"file_version"`
		Values      [][2]any `json:"values"`
	}
	require.NoError(t, json.Unmarshal(out, &events), string(out))
	require.Len(t, events, 5)
	assert.Equal(t, "brain.Event:2", events[0].FileVersion)
	assert.Equal(t, 1700000000.0, events[0].WallTime)
	for i, step := range []int64{0, 1, 2, 3, 3} {
		assert.Equal(t, step, events[i].Step, "event %d", i)
	}
	assert.Equal(t, 1700000012.5, events[2].WallTime)
	// Python widens the float32 values to float64.
	assert.Equal(t, [][2]any{{"loss", float64(float32(0.5))}, {"lr", float64(float32(0.01))}}, events[2].Values)
	assert.Equal(t, [][2]any{{"val_loss", 0.375}, {"val_accuracy", 0.75}}, events[4].Values)
}

func TestTensorBoardTwoFilesInOneSecond(t *testing.T) {
	dir := t.TempDir()
	now := time.Unix(1700000000, 0)
	a, err := newTensorBoard(dir, now)
	require.NoError(t, err)
	b, err := newTensorBoard(dir, now)
	require.NoError(t, err)
	assert.NotEqual(t, a.Path(), b.Path())
	assert.True(t, strings.HasPrefix(filepath.Base(b.Path()), filepath.Base(a.Path())+"."), b.Path())
	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
	assert.Len(t, readEvents(t, b.Path()), 1, "just the file version")
}

func TestTensorBoardBadDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	_, err := NewTensorBoard(filepath.Join(file, "logs"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "TensorBoard log dir")
	assert.Contains(t, err.Error(), fmt.Sprint(file))
}
