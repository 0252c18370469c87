package distrib

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func mapLookup(env map[string]string) lookupFunc {
	return func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}
}

func TestFromEnvLaunchers(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		want Config
	}{
		{
			name: "torchrun",
			env: map[string]string{"MASTER_ADDR": "10.0.0.7", "MASTER_PORT": "29400", "RANK": "5", "WORLD_SIZE": "8",
				"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4", "TORCHELASTIC_RUN_ID": "abc"},
			want: Config{Rank: 5, WorldSize: 8, LocalRank: 1, MasterAddr: "10.0.0.7", MasterPort: 29400, Launcher: LauncherTorchrun},
		},
		{
			// A Kubeflow PyTorchJob worker pod: one process per pod, no LOCAL_RANK.
			name: "kubeflow",
			env: map[string]string{"MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456", "RANK": "2", "WORLD_SIZE": "3",
				"PYTHONUNBUFFERED": "1"},
			want: Config{Rank: 2, WorldSize: 3, LocalRank: 0, MasterAddr: "job-master-0", MasterPort: 23456, Launcher: LauncherEnv},
		},
		{
			name: "torchrun with a listen host",
			env: map[string]string{"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29400", "RANK": "1", "WORLD_SIZE": "2",
				"ONNXTRAIN_LISTEN_HOST": "127.0.0.2"},
			want: Config{Rank: 1, WorldSize: 2, MasterAddr: "127.0.0.1", MasterPort: 29400, Launcher: LauncherEnv, ListenHost: "127.0.0.2"},
		},
		{
			name: "slurm",
			env: map[string]string{"SLURM_PROCID": "6", "SLURM_NTASKS": "8", "SLURM_LOCALID": "2",
				"SLURM_JOB_NODELIST": "gpu[07-08,11],login1", "SLURMD_NODENAME": "gpu08"},
			want: Config{Rank: 6, WorldSize: 8, LocalRank: 2, MasterAddr: "gpu07", MasterPort: DefaultMasterPort, Launcher: LauncherSlurm},
		},
		{
			name: "slurm step node list wins, MASTER_PORT honoured",
			env: map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "MASTER_PORT": "12345",
				"SLURM_JOB_NODELIST": "n[1-9]", "SLURM_STEP_NODELIST": "n[3-4]", "SLURMD_NODENAME": "n3"},
			want: Config{Rank: 0, WorldSize: 2, MasterAddr: "n3", MasterPort: 12345, Launcher: LauncherSlurm},
		},
		{
			name: "slurm with MASTER_ADDR",
			env: map[string]string{"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "1",
				"SLURM_JOB_NODELIST": "a1", "MASTER_ADDR": "192.168.1.2"},
			want: Config{Rank: 1, WorldSize: 2, LocalRank: 1, MasterAddr: "192.168.1.2", MasterPort: DefaultMasterPort, Launcher: LauncherSlurm},
		},
		{
			name: "open mpi on one machine",
			env: map[string]string{"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "3",
				"OMPI_COMM_WORLD_LOCAL_SIZE": "4"},
			want: Config{Rank: 3, WorldSize: 4, LocalRank: 3, MasterAddr: "127.0.0.1", MasterPort: DefaultMasterPort, Launcher: LauncherOpenMPI},
		},
		{
			name: "open mpi across machines with MASTER_ADDR",
			env: map[string]string{"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
				"OMPI_COMM_WORLD_LOCAL_SIZE": "2", "MASTER_ADDR": "node1", "MASTER_PORT": "3000"},
			want: Config{Rank: 3, WorldSize: 4, LocalRank: 1, MasterAddr: "node1", MasterPort: 3000, Launcher: LauncherOpenMPI},
		},
		{
			// torchrun started by srun: torchrun's variables win over Slurm's.
			name: "torchrun inside slurm",
			env: map[string]string{"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "MASTER_ADDR": "n1", "RANK": "7", "WORLD_SIZE": "8",
				"LOCAL_RANK": "3"},
			want: Config{Rank: 7, WorldSize: 8, LocalRank: 3, MasterAddr: "n1", MasterPort: DefaultMasterPort, Launcher: LauncherTorchrun},
		},
		{
			name: "no launcher",
			env:  map[string]string{"HOME": "/root"},
			want: Config{Rank: 0, WorldSize: 1, MasterAddr: "127.0.0.1", MasterPort: DefaultMasterPort, Launcher: LauncherNone},
		},
		{
			name: "timeout and debug",
			env: map[string]string{"RANK": "0", "WORLD_SIZE": "1", "ONNXTRAIN_DIST_TIMEOUT": "90s",
				"ONNXTRAIN_DIST_DEBUG": "true"},
			want: Config{Rank: 0, WorldSize: 1, MasterAddr: "127.0.0.1", MasterPort: DefaultMasterPort, Launcher: LauncherEnv,
				Timeout: 90 * time.Second, Debug: true},
		},
		{
			name: "timeout in seconds",
			env:  map[string]string{"ONNXTRAIN_DIST_TIMEOUT": "2.5"},
			want: Config{Rank: 0, WorldSize: 1, MasterAddr: "127.0.0.1", MasterPort: DefaultMasterPort, Launcher: LauncherNone,
				Timeout: 2500 * time.Millisecond},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := configFromEnv(mapLookup(tc.env))
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestFromEnvErrors(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"rank without world size", map[string]string{"RANK": "1", "MASTER_ADDR": "h"}, "WORLD_SIZE is not set"},
		{"world size without rank", map[string]string{"WORLD_SIZE": "2", "MASTER_ADDR": "h"}, "RANK is not set"},
		{"rank not below world size", map[string]string{"RANK": "4", "WORLD_SIZE": "4", "MASTER_ADDR": "h"}, "rank 4 is not below the world size 4"},
		{"negative rank", map[string]string{"RANK": "-1", "WORLD_SIZE": "4", "MASTER_ADDR": "h"}, "RANK=-1: want at least 0"},
		{"zero world", map[string]string{"RANK": "0", "WORLD_SIZE": "0", "MASTER_ADDR": "h"}, "WORLD_SIZE=0: want at least 1"},
		{"not a number", map[string]string{"RANK": "one", "WORLD_SIZE": "4", "MASTER_ADDR": "h"}, `RANK="one" is not an integer`},
		{"no master address", map[string]string{"RANK": "1", "WORLD_SIZE": "2"}, "MASTER_ADDR is not set"},
		{"bad port", map[string]string{"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "70000"}, "MASTER_PORT=70000 is outside 1..65535"},
		{"local rank too big", map[string]string{"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2"}, "LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2"},
		{"local rank above rank", map[string]string{"RANK": "1", "WORLD_SIZE": "4", "MASTER_ADDR": "h", "LOCAL_RANK": "3"}, "LOCAL_RANK=3 is above RANK=1"},
		{"slurm without ntasks", map[string]string{"SLURM_PROCID": "0", "SLURM_JOB_NODELIST": "n1"}, "SLURM_NTASKS is not set"},
		{"slurm rank out of range", map[string]string{"SLURM_PROCID": "2", "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "n1"}, "rank 2 is not below the world size 2"},
		{"slurm without node list", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2"}, "without a node list"},
		{"slurm bad node list", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "n[3-1]"}, `SLURM_JOB_NODELIST: node list "n[3-1]": range "3-1" runs backwards`},
		{"slurm rank 0 elsewhere", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "n[1-2]", "SLURMD_NODENAME": "n2"}, "rank 0 runs on n2 but the first node"},
		{"mpi without size", map[string]string{"OMPI_COMM_WORLD_RANK": "0"}, "OMPI_COMM_WORLD_SIZE is not set"},
		{"mpi several machines without master", map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, "set MASTER_ADDR"},
		{"bad timeout", map[string]string{"ONNXTRAIN_DIST_TIMEOUT": "soon"}, "ONNXTRAIN_DIST_TIMEOUT"},
		{"bad debug", map[string]string{"ONNXTRAIN_DIST_DEBUG": "maybe"}, "ONNXTRAIN_DIST_DEBUG"},
		{"bad listen host", map[string]string{"ONNXTRAIN_LISTEN_HOST": "10.0.0.1/24"}, `ONNXTRAIN_LISTEN_HOST="10.0.0.1/24" is not a host`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := configFromEnv(mapLookup(tc.env))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestFromEnvReadsProcessEnvironment(t *testing.T) {
	t.Setenv("RANK", "1")
	t.Setenv("WORLD_SIZE", "3")
	t.Setenv("MASTER_ADDR", "example.internal")
	t.Setenv("MASTER_PORT", "4242")
	cfg, err := FromEnv()
	require.NoError(t, err)
	assert.Equal(t, 1, cfg.Rank)
	assert.Equal(t, 3, cfg.WorldSize)
	assert.Equal(t, "example.internal:4242", cfg.MasterAddr+":4242")
	assert.Equal(t, 4242, cfg.MasterPort)
}

func TestConfigValidate(t *testing.T) {
	assert.ErrorContains(t, Config{Rank: 0, WorldSize: 0}.validate(), "world size 0")
	assert.ErrorContains(t, Config{Rank: 3, WorldSize: 2}.validate(), "rank 3 is outside 0..1")
	assert.ErrorContains(t, Config{Rank: 1, WorldSize: 2, MasterPort: 1}.validate(), "no master address")
	assert.ErrorContains(t, Config{Rank: 1, WorldSize: 2, MasterAddr: "h"}.validate(), "master port 0")
	assert.NoError(t, Config{Rank: 0, WorldSize: 1}.validate())
}
