package distrib

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestExpandNodeList(t *testing.T) {
	cases := []struct {
		in   string
		want []string
	}{
		{"node1", []string{"node1"}},
		{"node[01-04],other", []string{"node01", "node02", "node03", "node04", "other"}},
		{"gpu[7,9-11]", []string{"gpu7", "gpu9", "gpu10", "gpu11"}},
		{"n[08-11]", []string{"n08", "n09", "n10", "n11"}},
		{"a[1-2],b[3],c", []string{"a1", "a2", "b3", "c"}},
		{"rack[1-2]-n[1-2]", []string{"rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"}},
		{"x[9-10]y", []string{"x9y", "x10y"}},
		{" host-a , host-b ", []string{"host-a", "host-b"}},
	}
	for _, tc := range cases {
		got, err := ExpandNodeList(tc.in)
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
		first, err := FirstNode(tc.in)
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want[0], first, tc.in)
	}
}

func TestExpandNodeListErrors(t *testing.T) {
	cases := map[string]string{
		"":                       "empty node list",
		"node[1-2":               "never closed",
		"node1-2]":               "']' without '['",
		"node[[1]]":              "nested",
		"node[]":                 "empty brackets",
		"node[a-b]":              `"a-b" in brackets is not a number`,
		"node[5-3]":              "runs backwards",
		"a,,b":                   "empty host name",
		"n[0-99999999]":          "more than",
		"m[1-99999],n[1-999999]": "more than",
	}
	for in, want := range cases {
		_, err := ExpandNodeList(in)
		require.Error(t, err, in)
		assert.Contains(t, err.Error(), want, in)
	}
	_, err := FirstNode("node[1-2")
	assert.ErrorContains(t, err, "never closed")
}
