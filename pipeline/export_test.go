package pipeline

import (
	"io"

	"github.com/onnxtrain/onnxtrain/graph"
)

// SetListenHook makes NewTCPTransport call f with each rank's listener
// address as soon as it listens; the returned function removes it.
func SetListenHook(f func(rank int, addr string)) func() {
	listenHook = f
	return func() { listenHook = nil }
}

// DeviceWorkers is deviceWorkers.
var DeviceWorkers = deviceWorkers

// DecodeTensorsInto is DecodeTensors with alloc serving float32 storage,
// as TCPTransport's receive does with recycled buffers.
func DecodeTensorsInto(b []byte, alloc func(n int) []float32) (map[string]*graph.Tensor, error) {
	_, out, err := decodeMessage(&bytesReader{b: b}, alloc)
	return out, err
}

// DecodeStream decodes one message from r as a connection delivers it
// (not a message in memory), with streamChunk set to chunk bytes.
func DecodeStream(r io.Reader, chunk int64) (map[string]*graph.Tensor, error) {
	old := streamChunk
	streamChunk = chunk
	defer func() { streamChunk = old }()
	_, out, err := decodeMessage(r, nil)
	return out, err
}
