package cuda

import "unsafe"

// CUDA-graph capture of a plan's steps: a training step has static shapes
// and fixed buffer addresses, so after one eager run its launches, GEMMs,
// copies and memsets are recorded once and replayed with one
// cuGraphLaunch per step (no per-kernel launch cost from Go).

// CU_STREAM_CAPTURE_MODE_THREAD_LOCAL: only this thread's unsafe calls
// are refused while capturing.
const captureModeThreadLocal = 1

// capture records fn's work on the context's stream into an executable
// graph.
func (c *Context) capture(fn func() error) (uintptr, error) {
	if err := c.d.check("cuStreamBeginCapture", c.d.call(c.d.sym.cuStreamBeginCapture, c.stream, captureModeThreadLocal)); err != nil {
		return 0, err
	}
	runErr := fn()
	var g uintptr
	endErr := c.d.check("cuStreamEndCapture", c.d.call(c.d.sym.cuStreamEndCapture, c.stream, uintptr(unsafe.Pointer(&g))))
	if runErr != nil {
		if g != 0 {
			c.d.call(c.d.sym.cuGraphDestroy, g)
		}
		return 0, runErr
	}
	if endErr != nil {
		return 0, endErr
	}
	var exec uintptr
	err := c.d.check("cuGraphInstantiateWithFlags", c.d.call(c.d.sym.cuGraphInstantiate, uintptr(unsafe.Pointer(&exec)), g, 0))
	c.d.call(c.d.sym.cuGraphDestroy, g)
	return exec, err
}

// replay launches a captured graph on the stream.
func (c *Context) replay(exec uintptr) error {
	return c.d.check("cuGraphLaunch", c.d.call(c.d.sym.cuGraphLaunch, exec, c.stream))
}

func (c *Context) destroyGraph(exec uintptr) {
	if exec != 0 {
		c.d.call(c.d.sym.cuGraphExecDestroy, exec)
	}
}
