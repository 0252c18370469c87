package distrib

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	logtest "github.com/sirupsen/logrus/hooks/test"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRankList(t *testing.T) {
	for _, tc := range []struct {
		ranks []int
		want  string
	}{
		{[]int{1}, "rank 1"},
		{[]int{0, 2}, "ranks 0,2"},
		{[]int{0, 1}, "ranks 0,1"},
		{[]int{0, 1, 2, 3, 5}, "ranks 0-3,5"},
		{[]int{4, 6, 7, 8, 9, 11}, "ranks 4,6-9,11"},
	} {
		assert.Equal(t, tc.want, rankList(tc.ranks), "%v", tc.ranks)
	}
}

func TestCompareSettings(t *testing.T) {
	lr := func(v string) []Setting {
		return []Setting{{"--model (SHA-256)", "abc"}, {"--lr", v}, {"--grad-accum", "1"}}
	}
	assert.Empty(t, compareSettings([][]Setting{lr("0.001"), lr("0.001")}))
	assert.Equal(t, "--lr: ranks 0,2 = 0.001, rank 1 = 0.002",
		compareSettings([][]Setting{lr("0.001"), lr("0.002"), lr("0.001")}))
	// Each differing field is named once, in rank 0's order; a field one
	// rank lacks shows as not given.
	a := []Setting{{"--lr", "1"}, {"--seed", "0"}, {"--zero", "1"}}
	b := []Setting{{"--lr", "2"}, {"--seed", "0"}}
	assert.Equal(t, `--lr: rank 0 = 1, rank 1 = 2; --zero: rank 0 = 1, rank 1 = (not given)`, compareSettings([][]Setting{a, b}))
	assert.Equal(t, `--data: rank 0 = "", rank 1 = x`, compareSettings([][]Setting{{{"--data", ""}}, {{"--data", "x"}}}))
}

// TestSettingsMismatchFailsEveryRank: ranks that were started with
// different settings all fail Init at once, each with the same message
// naming every differing field and the ranks holding each value.
func TestSettingsMismatchFailsEveryRank(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	settings := [][]Setting{
		{{"--lr", "0.001"}, {"--grad-accum", "2"}, {"--seed", "1"}},
		{{"--lr", "0.002"}, {"--grad-accum", "2"}, {"--seed", "1"}},
		{{"--lr", "0.001"}, {"--grad-accum", "4"}, {"--seed", "1"}},
	}
	errs := make([]error, len(settings))
	var wg sync.WaitGroup
	start := time.Now()
	for r := range settings {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := Config{Rank: r, WorldSize: 3, MasterAddr: "127.0.0.1", MasterPort: port, Timeout: time.Minute,
				Secret: []byte("settings-test-secret-0123"), Settings: settings[r]}
			if r == 0 {
				cfg.Listener = l
			}
			_, errs[r] = Init(context.Background(), cfg)
		}()
	}
	wg.Wait()
	assert.Less(t, time.Since(start), 30*time.Second, "the ranks stop at the check, not at the rendezvous timeout")
	want := "the ranks were not started alike (every rank must run the same model and settings): " +
		"--lr: ranks 0,2 = 0.001, rank 1 = 0.002; --grad-accum: ranks 0,1 = 2, rank 2 = 4"
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
		assert.ErrorIs(t, err, ErrSettingsMismatch)
		var se *SettingsError
		require.True(t, errors.As(err, &se))
		assert.Equal(t, r, se.Rank)
		assert.Contains(t, err.Error(), want, "rank %d", r)
	}
}

// TestNoSecretWarnsOnce: a group without a secret still forms, and the
// process warns once that any process reaching its ports may join.
func TestNoSecretWarnsOnce(t *testing.T) {
	noSecretWarning = sync.Once{}
	log, hook := logtest.NewNullLogger()
	for range 2 {
		groups := startGroups(t, 2, func(c *Config) { c.Logger = log })
		requireAllOK(t, onAll(groups, func(g *Group) error { return g.Barrier(context.Background()) }))
	}
	var warnings int
	for _, e := range hook.AllEntries() {
		if strings.Contains(e.Message, "no job secret is set") {
			warnings++
			assert.Contains(t, e.Message, "this job accepts any process that reaches its ports")
		}
	}
	assert.Equal(t, 1, warnings, "two groups of two ranks, one warning")
}
