//go:build unix

package launch

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/distrib"
)

// withoutSecret drops any secret the test's own environment carries.
func withoutSecret(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !regexp.MustCompile(`^` + distrib.SecretVar + `(_FILE)?=`).MatchString(kv) {
			out = append(out, kv)
		}
	}
	return out
}

// TestLaunchSecret: how the workers get the job's secret.
func TestLaunchSecret(t *testing.T) {
	t.Run("one node without one: drawn, the same for every worker, fresh per launcher", func(t *testing.T) {
		var seen []string
		for range 2 {
			cfg, stdout, _ := testConfig(t, "env", 2)
			cfg.Env = withoutSecret(cfg.Env)
			require.NoError(t, Run(safetyContext(t), cfg))
			vars := rankVars(t, stdout.String())
			require.Len(t, vars, 2)
			assert.Regexp(t, `^[0-9a-f]{64}$`, vars[0][distrib.SecretVar])
			assert.Equal(t, vars[0][distrib.SecretVar], vars[1][distrib.SecretVar])
			assert.Empty(t, vars[0][distrib.SecretFileVar])
			seen = append(seen, vars[0][distrib.SecretVar])
		}
		assert.NotEqual(t, seen[0], seen[1], "each launcher draws its own")
	})
	t.Run("from the environment: passed on unchanged", func(t *testing.T) {
		cfg, stdout, _ := testConfig(t, "env", 2)
		cfg.Env = append(withoutSecret(cfg.Env), distrib.SecretVar+"=the-users-own-secret-value")
		require.NoError(t, Run(safetyContext(t), cfg))
		vars := rankVars(t, stdout.String())
		for r := range 2 {
			assert.Equal(t, "the-users-own-secret-value", vars[r][distrib.SecretVar])
		}
	})
	t.Run("from --dist-secret-file: the workers get the file, not the secret", func(t *testing.T) {
		dir := t.TempDir()
		file := filepath.Join(dir, "secret")
		require.NoError(t, os.WriteFile(file, []byte("a-mounted-kubernetes-secret\n"), 0o600))
		cfg, stdout, _ := testConfig(t, "env", 2)
		cfg.Env = append(withoutSecret(cfg.Env), distrib.SecretVar+"=overridden-by-the-flag-value")
		cfg.SecretFile = file
		cfg.NNodes, cfg.MasterAddr = 2, "node0.example" // several nodes accept a file
		require.NoError(t, Run(safetyContext(t), cfg))
		vars := rankVars(t, stdout.String())
		for r := range 2 {
			assert.Equal(t, file, vars[r][distrib.SecretFileVar])
			assert.Empty(t, vars[r][distrib.SecretVar])
		}
	})
	for _, tc := range []struct {
		name string
		mod  func(c *Config)
		want string
	}{
		{"several nodes need one", func(c *Config) { c.NNodes, c.MasterAddr = 2, "node0.example" },
			"--nnodes 2 needs the job's secret, the same on every node: set ONNXTRAIN_DIST_SECRET"},
		{"too short", func(c *Config) { c.Env = append(c.Env, distrib.SecretVar+"=short") },
			"ONNXTRAIN_DIST_SECRET holds 5 bytes; a secret needs at least 16"},
		{"empty", func(c *Config) { c.Env = append(c.Env, distrib.SecretVar+"=") }, "ONNXTRAIN_DIST_SECRET is empty"},
		{"both variables", func(c *Config) {
			c.Env = append(c.Env, distrib.SecretVar+"=0123456789abcdef0123", distrib.SecretFileVar+"=/x")
		}, "both ONNXTRAIN_DIST_SECRET and ONNXTRAIN_DIST_SECRET_FILE are set"},
		{"missing file", func(c *Config) { c.SecretFile = "/no/such/secret" }, "--dist-secret-file: distrib: reading the job's secret: open /no/such/secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, _, _ := testConfig(t, "env", 1)
			cfg.Env = withoutSecret(cfg.Env)
			tc.mod(&cfg)
			err := cfg.Validate()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
