// Package shape holds the CPU kernels that move data without computing on
// it: Reshape, Flatten, Squeeze, Unsqueeze, Shape, Size, Transpose, Concat,
// Split, Slice, Gather, GatherElements, GatherND, Scatter, ScatterElements,
// ScatterND, Expand, Tile, Pad, ConstantOfShape, Range, OneHot, NonZero,
// Unique, Trilu, DepthToSpace, SpaceToDepth, Compress, ReverseSequence and
// EyeLike. They register themselves with kern from init.
//
// Every kernel handles every dtype itself (they are registered with
// kern.RegisterHalf, so float16 and bfloat16 stay raw bits). Most of them
// describe their output as a view of the input, one axisMap per output axis
// giving the source offset each index contributes, and let gatherView do
// the copy: it merges axes, copies contiguous runs with copy(), and tiles
// transposes so both sides stay in cache.
package shape
