package backend

// StateViewer is implemented by executables whose state buffers can be
// views of other state buffers (see "State views" in the package comment).
type StateViewer interface {
	// ViewState adds to the executable's (shared) state a buffer named
	// name whose elements are the elements [offset, offset+n) of the
	// state buffer of, in row-major order, where n is the number of
	// elements of shape; the view has of's dtype and the given shape. No
	// element is copied: reading or updating the view reads or updates
	// of's memory. of may itself be a view. Declaring a view again with
	// the same base, offset and shape is a no-op; any other use of a
	// taken name is an error, as are an unknown base, a negative offset
	// or dimension and a range past the base's end.
	ViewState(name, of string, offset int, shape []int) error
}
