package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// The subset of the Kubernetes API the manifests use, with yaml names as the
// API spells them; decoding with KnownFields refuses any other field, so a
// misspelt or misplaced field fails the test.
type objectMeta struct {
	Name   string            `yaml:"name"`
	Labels map[string]string `yaml:"labels"`
}

type envVar struct {
	Name  string `yaml:"name"`
	Value string `yaml:"value"`
}

type containerPort struct {
	Name          string `yaml:"name"`
	ContainerPort int    `yaml:"containerPort"`
}

type resourceRequirements struct {
	Requests map[string]string `yaml:"requests"`
	Limits   map[string]string `yaml:"limits"`
}

type volumeMount struct {
	Name      string `yaml:"name"`
	MountPath string `yaml:"mountPath"`
	ReadOnly  bool   `yaml:"readOnly"`
}

type container struct {
	Name            string               `yaml:"name"`
	Image           string               `yaml:"image"`
	ImagePullPolicy string               `yaml:"imagePullPolicy"`
	Command         []string             `yaml:"command"`
	Args            []string             `yaml:"args"`
	Env             []envVar             `yaml:"env"`
	Ports           []containerPort      `yaml:"ports"`
	Resources       resourceRequirements `yaml:"resources"`
	VolumeMounts    []volumeMount        `yaml:"volumeMounts"`
}

type volume struct {
	Name                  string    `yaml:"name"`
	EmptyDir              *struct{} `yaml:"emptyDir"`
	PersistentVolumeClaim *struct {
		ClaimName string `yaml:"claimName"`
	} `yaml:"persistentVolumeClaim"`
	Secret *struct {
		SecretName  string `yaml:"secretName"`
		DefaultMode int    `yaml:"defaultMode"`
	} `yaml:"secret"`
}

type podSpec struct {
	Subdomain     string      `yaml:"subdomain"`
	RestartPolicy string      `yaml:"restartPolicy"`
	Containers    []container `yaml:"containers"`
	Volumes       []volume    `yaml:"volumes"`
}

type podTemplate struct {
	Metadata objectMeta `yaml:"metadata"`
	Spec     podSpec    `yaml:"spec"`
}

type typeMeta struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
}

type replicaSpec struct {
	Replicas      int         `yaml:"replicas"`
	RestartPolicy string      `yaml:"restartPolicy"`
	Template      podTemplate `yaml:"template"`
}

type pytorchJob struct {
	typeMeta `yaml:",inline"`
	Metadata objectMeta `yaml:"metadata"`
	Spec     struct {
		RunPolicy struct {
			CleanPodPolicy string `yaml:"cleanPodPolicy"`
			BackoffLimit   *int   `yaml:"backoffLimit"`
		} `yaml:"runPolicy"`
		PytorchReplicaSpecs map[string]replicaSpec `yaml:"pytorchReplicaSpecs"`
	} `yaml:"spec"`
}

type servicePort struct {
	Name       string `yaml:"name"`
	Port       int    `yaml:"port"`
	TargetPort int    `yaml:"targetPort"`
}

type service struct {
	typeMeta `yaml:",inline"`
	Metadata objectMeta `yaml:"metadata"`
	Spec     struct {
		ClusterIP                string            `yaml:"clusterIP"`
		PublishNotReadyAddresses bool              `yaml:"publishNotReadyAddresses"`
		Selector                 map[string]string `yaml:"selector"`
		Ports                    []servicePort     `yaml:"ports"`
	} `yaml:"spec"`
}

type job struct {
	typeMeta `yaml:",inline"`
	Metadata objectMeta `yaml:"metadata"`
	Spec     struct {
		CompletionMode string      `yaml:"completionMode"`
		Completions    int         `yaml:"completions"`
		Parallelism    int         `yaml:"parallelism"`
		BackoffLimit   *int        `yaml:"backoffLimit"`
		Template       podTemplate `yaml:"template"`
	} `yaml:"spec"`
}

// documents splits a manifest into its YAML documents, each decoded loosely
// (to read its kind) and kept as a node (to decode strictly).
func documents(t *testing.T, path string) []*yaml.Node {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var docs []*yaml.Node
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "%s: document %d", path, len(docs)+1)
		docs = append(docs, &n)
	}
	require.NotEmpty(t, docs, path)
	return docs
}

// strict decodes a document into v, refusing fields v does not have.
func strict(t *testing.T, n *yaml.Node, v any) {
	t.Helper()
	b, err := yaml.Marshal(n)
	require.NoError(t, err)
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(v))
}

func kindOf(t *testing.T, n *yaml.Node) typeMeta {
	t.Helper()
	var tm struct {
		typeMeta `yaml:",inline"`
		Metadata struct {
			Name string `yaml:"name"`
		} `yaml:"metadata"`
	}
	require.NoError(t, n.Decode(&tm))
	require.NotEmpty(t, tm.APIVersion, "a document without apiVersion")
	require.NotEmpty(t, tm.Kind, "a document without kind")
	require.NotEmpty(t, tm.Metadata.Name, "a %s without metadata.name", tm.Kind)
	return tm.typeMeta
}

var (
	dns1123Label = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	envName      = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	quantity     = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?(m|k|M|G|Ki|Mi|Gi|Ti)?$`)
)

// checkPodTemplate checks what Kubernetes would refuse in a pod template.
func checkPodTemplate(t *testing.T, where string, tpl podTemplate) {
	t.Helper()
	spec := tpl.Spec
	assert.Contains(t, []string{"Always", "OnFailure", "Never", ""}, spec.RestartPolicy, where)
	require.NotEmpty(t, spec.Containers, "%s: no containers", where)
	volumes := map[string]bool{}
	for _, v := range spec.Volumes {
		assert.Regexp(t, dns1123Label, v.Name, where)
		sources := 0
		for _, set := range []bool{v.EmptyDir != nil, v.PersistentVolumeClaim != nil, v.Secret != nil} {
			if set {
				sources++
			}
		}
		assert.Equal(t, 1, sources, "%s: volume %s needs exactly one source", where, v.Name)
		volumes[v.Name] = true
	}
	for _, c := range spec.Containers {
		w := where + ": container " + c.Name
		assert.Regexp(t, dns1123Label, c.Name, w)
		assert.Equal(t, "REGISTRY/onnxtrain:VERSION", c.Image, "%s: the documented image placeholder", w)
		assert.Contains(t, []string{"Always", "IfNotPresent", "Never"}, c.ImagePullPolicy, w)
		for _, e := range c.Env {
			assert.Regexp(t, envName, e.Name, w)
		}
		for _, p := range c.Ports {
			assert.Regexp(t, dns1123Label, p.Name, w)
			assert.LessOrEqual(t, len(p.Name), 15, "%s: port names are at most 15 characters", w)
			assert.True(t, p.ContainerPort > 0 && p.ContainerPort < 65536, w)
		}
		for name, q := range c.Resources.Requests {
			assert.Regexp(t, quantity, q, "%s: requests.%s", w, name)
		}
		for name, q := range c.Resources.Limits {
			assert.Regexp(t, quantity, q, "%s: limits.%s", w, name)
		}
		for _, m := range c.VolumeMounts {
			assert.True(t, volumes[m.Name], "%s: mounts volume %q that the pod does not define", w, m.Name)
		}
	}
}

func env(c container) map[string]string {
	m := map[string]string{}
	for _, e := range c.Env {
		m[e.Name] = e.Value
	}
	return m
}

// fakeOnnxtrain makes a folder with an `onnxtrain` that writes its
// arguments (one a line) and the variables the launchers set into out.
func fakeOnnxtrain(t *testing.T, out string) string {
	t.Helper()
	dir := t.TempDir()
	script := `#!/bin/sh
{
  echo "RANK=${RANK:-}"
  echo "WORLD_SIZE=${WORLD_SIZE:-}"
  echo "MASTER_ADDR=${MASTER_ADDR:-}"
  echo "MASTER_PORT=${MASTER_PORT:-}"
  echo "GOMAXPROCS=${GOMAXPROCS:-}"
  echo "ONNXTRAIN_DIST_SECRET=${ONNXTRAIN_DIST_SECRET:-}"
  echo "--- args"
  for a in "$@"; do echo "$a"; done
} >` + out + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "onnxtrain"), []byte(script), 0o755))
	return dir
}

// recorded reads what fakeOnnxtrain wrote: its variables and arguments.
func recorded(t *testing.T, path string) (map[string]string, []string) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err, "the fake onnxtrain never ran")
	vars := map[string]string{}
	head, args, ok := strings.Cut(string(b), "--- args\n")
	require.True(t, ok)
	for _, line := range strings.Split(strings.TrimSpace(head), "\n") {
		k, v, _ := strings.Cut(line, "=")
		vars[k] = v
	}
	return vars, strings.Split(strings.TrimSuffix(args, "\n"), "\n")
}

// runContainer runs a container's command (sh -c SCRIPT) with the
// container's environment plus extra, and the fake onnxtrain first in PATH.
func runContainer(t *testing.T, c container, extra ...string) (vars map[string]string, args []string, output string, err error) {
	t.Helper()
	require.GreaterOrEqual(t, len(c.Command), 1)
	argv := append(append([]string(nil), c.Command...), c.Args...)
	out := filepath.Join(t.TempDir(), "record")
	bin := fakeOnnxtrain(t, out)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin"}
	for _, e := range c.Env {
		cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
	}
	cmd.Env = append(cmd.Env, extra...)
	b, err := cmd.CombinedOutput()
	if err != nil {
		return nil, nil, string(b), err
	}
	vars, args = recorded(t, out)
	return vars, args, string(b), nil
}

// secretFile is where the Kubernetes pods mount the job's secret.
const secretFile = "/var/run/secrets/onnxtrain/secret"

// checkSecretMount checks that the pod mounts the Secret the manifest's
// comment tells to create, read-only and readable by its owner only, where
// --dist-secret-file reads it.
func checkSecretMount(t *testing.T, where string, spec podSpec) {
	t.Helper()
	var vol *volume
	for i := range spec.Volumes {
		if spec.Volumes[i].Secret != nil {
			vol = &spec.Volumes[i]
		}
	}
	require.NotNil(t, vol, "%s: no Secret volume", where)
	assert.Equal(t, "onnxtrain-fmnist-secret", vol.Secret.SecretName, where)
	assert.Equal(t, 0o400, vol.Secret.DefaultMode, "%s: the secret file is readable by its owner only", where)
	mounted := false
	for _, m := range spec.Containers[0].VolumeMounts {
		if m.Name == vol.Name {
			mounted = true
			assert.True(t, m.ReadOnly, where)
			assert.Equal(t, filepath.Dir(secretFile), m.MountPath, where)
		}
	}
	assert.True(t, mounted, "%s: the Secret volume is not mounted", where)
}

// k8sArgs are the example's arguments in the Kubernetes manifests, which
// read the job's secret from the mounted Secret.
func k8sArgs() []string {
	return append(exampleArgs("/opt/onnxtrain/models", "/runs/fmnist"), "--dist-secret-file", secretFile)
}

// exampleArgs are the `onnxtrain train` arguments every deployment runs,
// with the bundled example under models.
func exampleArgs(models, output string) []string {
	return []string{
		"train",
		"--model", models + "/fmnist_cnn/fmnist_cnn_train.onnx",
		"--data", models + "/fmnist_subset",
		"--val-data", models + "/fmnist_subset",
		"--optimizer", "adamw", "--lr", "2e-3", "--weight-decay", "0.01",
		"--batch-size", "32", "--epochs", "3", "--seed", "0",
		"--log-format", "json", "--output", output,
	}
}

func TestPyTorchJob(t *testing.T) {
	docs := documents(t, "kubernetes/pytorchjob.yaml")
	require.Len(t, docs, 1)
	assert.Equal(t, typeMeta{APIVersion: "kubeflow.org/v1", Kind: "PyTorchJob"}, kindOf(t, docs[0]))
	var pj pytorchJob
	strict(t, docs[0], &pj)
	assert.Regexp(t, dns1123Label, pj.Metadata.Name)
	assert.Contains(t, []string{"None", "Running", "All"}, pj.Spec.RunPolicy.CleanPodPolicy)

	specs := pj.Spec.PytorchReplicaSpecs
	require.Len(t, specs, 2, "Master and Worker")
	master, ok := specs["Master"]
	require.True(t, ok, "no Master replica spec")
	worker, ok := specs["Worker"]
	require.True(t, ok, "no Worker replica spec")
	assert.Equal(t, 1, master.Replicas, "one Master: it is rank 0")
	assert.GreaterOrEqual(t, worker.Replicas, 1)
	for role, rs := range specs {
		assert.Contains(t, []string{"Always", "OnFailure", "Never", "ExitCode"}, rs.RestartPolicy, role)
		checkPodTemplate(t, role, rs.Template)
		require.Len(t, rs.Template.Spec.Containers, 1, role)
		c := rs.Template.Spec.Containers[0]
		assert.Equal(t, "pytorch", c.Name, "%s: the operator sets its variables on the container named pytorch", role)
		require.Len(t, c.Ports, 1, role)
		assert.Equal(t, "pytorchjob-port", c.Ports[0].Name, "%s: the operator takes MASTER_PORT from this port", role)
	}
	// Master and Worker run the same thing.
	assert.Equal(t, master.Template.Spec, worker.Template.Spec)

	// The container, given what the operator sets, runs the example.
	c := master.Template.Spec.Containers[0]
	vars, args, out, err := runContainer(t, c, "RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=onnxtrain-fmnist-master-0", "MASTER_PORT=29500")
	require.NoError(t, err, out)
	assert.Equal(t, k8sArgs(), args)
	assert.Equal(t, "1", vars["RANK"])
	assert.Equal(t, "2", vars["GOMAXPROCS"])
	checkSecretMount(t, "PyTorchJob", master.Template.Spec)

	// EXTRA_ARGS adds flags.
	_, args, out, err = runContainer(t, c, "RANK=0", "EXTRA_ARGS=--steps 5")
	require.NoError(t, err, out)
	assert.Equal(t, append(k8sArgs(), "--steps", "5"), args)
}

func TestIndexedJobWithHeadlessService(t *testing.T) {
	docs := documents(t, "kubernetes/indexed-job.yaml")
	require.Len(t, docs, 2, "a Service and a Job")
	assert.Equal(t, typeMeta{APIVersion: "v1", Kind: "Service"}, kindOf(t, docs[0]))
	assert.Equal(t, typeMeta{APIVersion: "batch/v1", Kind: "Job"}, kindOf(t, docs[1]))
	var svc service
	strict(t, docs[0], &svc)
	var j job
	strict(t, docs[1], &j)

	assert.Equal(t, "None", svc.Spec.ClusterIP, "the Service must be headless")
	assert.Equal(t, map[string]string{"job-name": j.Metadata.Name}, svc.Spec.Selector, "the Service selects the Job's pods")
	assert.Equal(t, "Indexed", j.Spec.CompletionMode)
	assert.GreaterOrEqual(t, j.Spec.Completions, 1)
	assert.Equal(t, j.Spec.Completions, j.Spec.Parallelism, "every rank runs at once")
	assert.Equal(t, svc.Metadata.Name, j.Spec.Template.Spec.Subdomain, "pods get DNS names under the Service")
	checkPodTemplate(t, "Job", j.Spec.Template)
	require.Len(t, j.Spec.Template.Spec.Containers, 1)
	c := j.Spec.Template.Spec.Containers[0]
	e := env(c)
	assert.Equal(t, fmt.Sprint(j.Spec.Completions), e["WORLD_SIZE"], "WORLD_SIZE = completions")
	assert.Equal(t, j.Metadata.Name+"-0."+svc.Metadata.Name, e["MASTER_ADDR"], "MASTER_ADDR is pod 0's name in the Service's domain")
	require.Len(t, svc.Spec.Ports, 1)
	require.Len(t, c.Ports, 1)
	assert.Equal(t, e["MASTER_PORT"], fmt.Sprint(svc.Spec.Ports[0].Port))
	assert.Equal(t, e["MASTER_PORT"], fmt.Sprint(svc.Spec.Ports[0].TargetPort))
	assert.Equal(t, e["MASTER_PORT"], fmt.Sprint(c.Ports[0].ContainerPort))
	_, hasRank := e["RANK"]
	assert.False(t, hasRank, "RANK comes from the completion index, not a fixed value")

	// The wrapper turns the completion index into RANK.
	for _, index := range []string{"0", "1"} {
		vars, args, out, err := runContainer(t, c, "JOB_COMPLETION_INDEX="+index)
		require.NoError(t, err, out)
		assert.Equal(t, index, vars["RANK"])
		assert.Equal(t, "2", vars["WORLD_SIZE"])
		assert.Equal(t, "onnxtrain-fmnist-0.onnxtrain-fmnist", vars["MASTER_ADDR"])
		assert.Equal(t, "29500", vars["MASTER_PORT"])
		assert.Equal(t, k8sArgs(), args)
	}
	checkSecretMount(t, "Job", j.Spec.Template.Spec)
	_, _, out, err := runContainer(t, c)
	require.Error(t, err, "without JOB_COMPLETION_INDEX the wrapper refuses to start")
	assert.Contains(t, out, "not started by an Indexed Job")
}

const sbatch = "slurm/onnxtrain-fmnist.sbatch"

func TestSlurmScriptSyntax(t *testing.T) {
	out, err := exec.Command("bash", "-n", sbatch).CombinedOutput()
	require.NoError(t, err, string(out))
	b, err := os.ReadFile(sbatch)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(b), "#!/bin/bash\n"))
	// sbatch reads #SBATCH lines only before the first command.
	var seenCommand bool
	for _, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "#SBATCH"):
			assert.False(t, seenCommand, "#SBATCH after a command is ignored: %q", line)
		case trimmed != "" && !strings.HasPrefix(trimmed, "#"):
			seenCommand = true
		}
	}
}

// slurmRun runs the batch script with stand-ins for srun and scontrol: the
// fake scontrol expands a node list, and the fake srun records its own
// arguments and runs the task command once as task taskID on node nodeID.
func slurmRun(t *testing.T, extraEnv ...string) (srunArgs []string, vars map[string]string, args []string, output string, err error) {
	t.Helper()
	dir := t.TempDir()
	record := filepath.Join(dir, "record")
	srunRecord := filepath.Join(dir, "srun-args")
	bin := fakeOnnxtrain(t, record)
	require.NoError(t, os.WriteFile(filepath.Join(bin, "scontrol"), []byte(`#!/bin/sh
[ "$1 $2" = "show hostnames" ] || { echo "fake scontrol: unexpected $*" >&2; exit 1; }
[ "$3" = "node[07-08]" ] || { echo "fake scontrol: unexpected node list $3" >&2; exit 1; }
printf 'node07\nnode08\n'
`), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(bin, "srun"), []byte(`#!/bin/sh
: >`+srunRecord+`
while [ $# -gt 0 ]; do
  case "$1" in
  -*) echo "$1" >>`+srunRecord+`; shift ;;
  *) break ;;
  esac
done
export SLURM_PROCID=1 SLURM_NODEID=1 SLURM_LOCALID=0
exec "$@"
`), 0o755))
	cmd := exec.Command("bash", sbatch)
	cmd.Env = append([]string{
		"PATH=" + bin + ":/usr/bin:/bin",
		"SLURM_JOB_ID=1234", "SLURM_JOB_NODELIST=node[07-08]", "SLURM_JOB_NUM_NODES=2",
		"SLURM_NTASKS_PER_NODE=2", "SLURM_CPUS_PER_TASK=3", "MODELS=/shared/onnxtrain/models",
		"OUTPUT=/shared/runs/x",
	}, extraEnv...)
	b, err := cmd.CombinedOutput()
	if err != nil {
		return nil, nil, nil, string(b), err
	}
	sb, rerr := os.ReadFile(srunRecord)
	require.NoError(t, rerr)
	vars, args = recorded(t, record)
	return strings.Fields(string(sb)), vars, args, string(b), nil
}

func TestSlurmScriptOneProcessPerTask(t *testing.T) {
	srunArgs, vars, args, out, err := slurmRun(t)
	require.NoError(t, err, out)
	assert.Equal(t, []string{"--kill-on-bad-exit=1", "--cpus-per-task=3"}, srunArgs)
	assert.Equal(t, "node07", vars["MASTER_ADDR"], "the first host of the node list")
	assert.Equal(t, "21234", vars["MASTER_PORT"], "20000 + job id mod 20000")
	assert.Equal(t, "3", vars["GOMAXPROCS"], "the task's CPUs")
	assert.Empty(t, vars["RANK"], "srun's SLURM_PROCID gives the rank")
	assert.Equal(t, exampleArgs("/shared/onnxtrain/models", "/shared/runs/x"), args)
	assert.Contains(t, out, "2 node(s), 2 process(es) each, master node07:21234, mode tasks")
	assert.Regexp(t, `^[0-9a-f]{64}$`, vars["ONNXTRAIN_DIST_SECRET"], "without one, the script draws the job's secret")

	_, vars, args, out, err = slurmRun(t, "TRAIN_EXTRA_ARGS=--steps 7  --grad-accum 2", "MASTER_PORT=4000", "ONNXTRAIN_DIST_SECRET=the-users-own-secret-value")
	require.NoError(t, err, out)
	assert.Equal(t, "the-users-own-secret-value", vars["ONNXTRAIN_DIST_SECRET"], "the user's secret is kept")
	assert.Equal(t, append(exampleArgs("/shared/onnxtrain/models", "/shared/runs/x"), "--steps", "7", "--grad-accum", "2"), args)
	assert.Contains(t, out, "master node07:4000")
}

func TestSlurmScriptOneLauncherPerNode(t *testing.T) {
	srunArgs, vars, args, out, err := slurmRun(t, "MODE=launcher", "MAX_RESTARTS=2")
	require.NoError(t, err, out)
	assert.Equal(t, []string{"--kill-on-bad-exit=1", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--cpus-per-task=6"}, srunArgs)
	assert.Equal(t, "3", vars["GOMAXPROCS"], "each worker's share, passed through by the launcher")
	assert.Regexp(t, `^[0-9a-f]{64}$`, vars["ONNXTRAIN_DIST_SECRET"], "the launchers of every node get the same drawn secret")
	require.GreaterOrEqual(t, len(args), 1)
	self := args[slices.Index(args, "--")+1]
	assert.True(t, strings.HasSuffix(self, "/onnxtrain"), "the workers run the same binary: %q", self)
	want := append([]string{"launch", "--nnodes", "2", "--node-rank", "1", "--nproc-per-node", "2",
		"--master-addr", "node07", "--master-port", "21234", "--max-restarts", "2", "--", self},
		exampleArgs("/shared/onnxtrain/models", "/shared/runs/x")...)
	assert.Equal(t, want, args)
}

func TestSlurmScriptRefusesUnknownMode(t *testing.T) {
	_, _, _, out, err := slurmRun(t, "MODE=mpi")
	require.Error(t, err)
	assert.Contains(t, out, "MODE=mpi: want tasks or launcher")
}

func TestDockerfileShipsWhatTheManifestsRun(t *testing.T) {
	b, err := os.ReadFile("Dockerfile")
	require.NoError(t, err)
	df := string(b)
	// The manifests run /opt/onnxtrain/models/... and `onnxtrain` from PATH
	// with /bin/sh; the image must provide them, from files that exist.
	assert.Contains(t, df, "/usr/local/bin/onnxtrain")
	for _, src := range []string{"models/fmnist_cnn/fmnist_cnn_train.onnx", "models/fmnist_subset/"} {
		assert.Contains(t, df, "COPY "+src+" /opt/onnxtrain/"+src)
		_, err := os.Stat(filepath.Join("..", src))
		assert.NoError(t, err, "the Dockerfile copies %s", src)
	}
	assert.Contains(t, df, "FROM debian:bookworm-slim", "the runtime image needs a shell")
}
