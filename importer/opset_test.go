package importer

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"
)

// One reader for a model's and a function's opset_import: "ai.onnx" is the
// default domain "", as in node domains.
func TestParseOpsetImport(t *testing.T) {
	msg := func(domain string, version uint64) []byte {
		b := protowire.AppendTag(nil, 1, protowire.BytesType)
		b = protowire.AppendString(b, domain)
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		return protowire.AppendVarint(b, version)
	}
	for _, c := range []struct {
		in   string
		want string
	}{{"ai.onnx", ""}, {"", ""}, {"com.microsoft", "com.microsoft"}} {
		dom, ver, err := parseOpsetImport(msg(c.in, 17))
		require.NoError(t, err)
		assert.Equal(t, c.want, dom, c.in)
		assert.Equal(t, int64(17), ver, c.in)
	}
	_, _, err := parseOpsetImport([]byte{0x0a, 0x05, 'a'}) // a string field cut short
	assert.Error(t, err)
}
