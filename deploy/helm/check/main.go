// chart-check reads what `helm template` rendered from the order-worker
// chart and checks it the way a cluster and an operator would:
//
//   - every object is decoded strictly (an unknown or duplicated field, or
//     a field in the wrong case, fails) into the Kubernetes API's own Go
//     types (k8s.io/api), ServiceMonitor and PrometheusRule into the
//     prometheus-operator's types, and a KEDA ScaledObject is validated
//     against the openAPIV3Schema of KEDA's published CRD, unknown fields
//     refused;
//   - the checks that keep the worker's guarantees: each worker pod's
//     worker.replica_id and group.instance.id come from its own name, the
//     grace period exceeds shutdown.timeout_ms + 2 s, the pods run as
//     non-root with a read-only root, no capability and seccomp
//     RuntimeDefault, secrets are files and never variables, and the
//     PrometheusRule carries exactly the rules of config/prometheus.
//
// Usage: chart-check --rules config/prometheus/order-worker.rules.yml
//
//	[--keda-crd keda.sh_scaledobjects.yaml] < rendered.yaml
//
// Exit 0 with one summary line, or 1 with one line per finding.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

type rendered struct {
	configMaps      []*corev1.ConfigMap
	services        []*corev1.Service
	statefulSets    []*appsv1.StatefulSet
	deployments     []*appsv1.Deployment
	jobs            []*batchv1.Job
	pdbs            []*policyv1.PodDisruptionBudget
	serviceMonitors []*monitoringv1.ServiceMonitor
	rules           []*monitoringv1.PrometheusRule
	scaledObjects   []map[string]interface{}
	kinds           map[string]int
}

var findings []string

func fail(format string, args ...interface{}) {
	findings = append(findings, fmt.Sprintf(format, args...))
}

// decodeStrict fills obj from json, refusing unknown, duplicated and
// wrongly cased fields, as the API server's strict field validation does.
func decodeStrict(name string, data []byte, obj interface{}) bool {
	strictErrs, err := kjson.UnmarshalStrict(data, obj)
	if err != nil {
		fail("%s: %v", name, err)
		return false
	}
	for _, e := range strictErrs {
		fail("%s: %v", name, e)
	}
	return len(strictErrs) == 0
}

func load(r io.Reader, kedaSchema map[string]interface{}) (*rendered, error) {
	out := &rendered{kinds: map[string]int{}}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(r))
	for n := 1; ; n++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", n, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		data, err := yaml.YAMLToJSONStrict(doc)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", n, err)
		}
		var tm metav1.TypeMeta
		var meta struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := kjson.UnmarshalCaseSensitivePreserveInts(data, &tm); err != nil {
			return nil, fmt.Errorf("document %d: %w", n, err)
		}
		_ = kjson.UnmarshalCaseSensitivePreserveInts(data, &meta)
		key := tm.APIVersion + " " + tm.Kind
		name := fmt.Sprintf("%s %s", tm.Kind, meta.Metadata.Name)
		out.kinds[tm.Kind]++
		switch key {
		case "v1 ConfigMap":
			o := &corev1.ConfigMap{}
			if decodeStrict(name, data, o) {
				out.configMaps = append(out.configMaps, o)
			}
		case "v1 Service":
			o := &corev1.Service{}
			if decodeStrict(name, data, o) {
				out.services = append(out.services, o)
			}
		case "apps/v1 StatefulSet":
			o := &appsv1.StatefulSet{}
			if decodeStrict(name, data, o) {
				out.statefulSets = append(out.statefulSets, o)
			}
		case "apps/v1 Deployment":
			o := &appsv1.Deployment{}
			if decodeStrict(name, data, o) {
				out.deployments = append(out.deployments, o)
			}
		case "batch/v1 Job":
			o := &batchv1.Job{}
			if decodeStrict(name, data, o) {
				out.jobs = append(out.jobs, o)
			}
		case "policy/v1 PodDisruptionBudget":
			o := &policyv1.PodDisruptionBudget{}
			if decodeStrict(name, data, o) {
				out.pdbs = append(out.pdbs, o)
			}
		case "monitoring.coreos.com/v1 ServiceMonitor":
			o := &monitoringv1.ServiceMonitor{}
			if decodeStrict(name, data, o) {
				out.serviceMonitors = append(out.serviceMonitors, o)
			}
		case "monitoring.coreos.com/v1 PrometheusRule":
			o := &monitoringv1.PrometheusRule{}
			if decodeStrict(name, data, o) {
				out.rules = append(out.rules, o)
			}
		case "keda.sh/v1alpha1 ScaledObject":
			if kedaSchema == nil {
				fail("%s: no KEDA CRD schema given (--keda-crd)", name)
				continue
			}
			var o map[string]interface{}
			if err := kjson.UnmarshalCaseSensitivePreserveInts(data, &o); err != nil {
				fail("%s: %v", name, err)
				continue
			}
			before := len(findings)
			validateObject(name, kedaSchema, o)
			if len(findings) == before {
				out.scaledObjects = append(out.scaledObjects, o)
			}
		default:
			fail("%s: %s is not a kind this chart should render", name, key)
		}
	}
	return out, nil
}

// stripComments drops whole-line comments, so that a document holding only
// helm's "# Source:" line counts as empty.
func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, l := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

func envOf(c *corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

func configValue(r *rendered, name string) (string, bool) {
	for _, cm := range r.configMaps {
		if v, ok := cm.Data[name]; ok {
			return v, true
		}
	}
	return "", false
}

// A secret must reach the worker as a file: a variable holding one, in the
// ConfigMap or a container's env, fails.
func secretName(name string) bool {
	u := strings.ToUpper(name)
	if strings.HasSuffix(u, "_FILE") || strings.HasSuffix(u, "_FILES") || strings.HasSuffix(u, "_LOCATION") {
		return false
	}
	return strings.Contains(u, "PASSWORD") || strings.Contains(u, "SECRET") || strings.Contains(u, "TOKEN")
}

func checkPod(what string, r *rendered, spec *corev1.PodSpec) {
	psc := spec.SecurityContext
	for i := range spec.Containers {
		c := &spec.Containers[i]
		name := what + " container " + c.Name
		sc := c.SecurityContext
		nonRoot := (psc != nil && psc.RunAsNonRoot != nil && *psc.RunAsNonRoot) ||
			(sc != nil && sc.RunAsNonRoot != nil && *sc.RunAsNonRoot)
		if !nonRoot {
			fail("%s: runAsNonRoot is not true", name)
		}
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			fail("%s: readOnlyRootFilesystem is not true", name)
		}
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			fail("%s: allowPrivilegeEscalation is not false", name)
		}
		if sc == nil || sc.Capabilities == nil || !reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
			len(sc.Capabilities.Add) > 0 {
			fail("%s: capabilities are not drop [ALL] with none added", name)
		}
		seccomp := (sc != nil && sc.SeccompProfile != nil && sc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault) ||
			(psc != nil && psc.SeccompProfile != nil && psc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault)
		if !seccomp {
			fail("%s: seccomp profile is not RuntimeDefault", name)
		}
		for _, e := range c.Env {
			if secretName(e.Name) && e.Value != "" {
				fail("%s: %s holds a secret in a variable (use a file)", name, e.Name)
			}
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				fail("%s: %s takes a Secret as a variable (mount it as a file)", name, e.Name)
			}
		}
		for _, ef := range c.EnvFrom {
			if ef.SecretRef != nil {
				fail("%s: envFrom a Secret puts secrets in variables (mount it as a file)", name)
			}
		}
		if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			fail("%s: no memory request and limit", name)
		}
	}
}

func checkWorkers(r *rendered) (summary string) {
	if len(r.statefulSets) != 1 {
		fail("want one StatefulSet of workers, found %d", len(r.statefulSets))
		return ""
	}
	ss := r.statefulSets[0]
	spec := &ss.Spec.Template.Spec
	checkPod("StatefulSet "+ss.Name, r, spec)
	var worker *corev1.Container
	for i := range spec.Containers {
		if spec.Containers[i].Name == "worker" {
			worker = &spec.Containers[i]
		}
	}
	if worker == nil {
		fail("StatefulSet %s: no container named worker", ss.Name)
		return ""
	}
	// Each pod's identity: the StatefulSet names pods <name>-0, -1, ...,
	// so metadata.name differs per pod and stays with the ordinal across
	// restarts. Anything else (a literal, a label) would give two pods
	// one transactional id, and they would fence each other forever.
	for _, v := range []string{"ORDER_WORKER_WORKER_REPLICA_ID", "ORDER_WORKER_KAFKA_CONSUMER_GROUP_INSTANCE_ID"} {
		e := envOf(worker, v)
		if e == nil || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
			fail("StatefulSet %s: %s does not come from the pod's name (fieldRef metadata.name): replica ids would not differ per pod", ss.Name, v)
		}
		if _, ok := configValue(r, v); ok {
			fail("ConfigMap: %s is shared by every pod; it must come from each pod's name", v)
		}
	}
	guarantee, _ := configValue(r, "ORDER_WORKER_PROCESSING_GUARANTEE")
	timeout := int64(10000)
	if v, ok := configValue(r, "ORDER_WORKER_SHUTDOWN_TIMEOUT_MS"); ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			fail("ConfigMap: ORDER_WORKER_SHUTDOWN_TIMEOUT_MS=%q is not a number", v)
		}
		timeout = n
	}
	if e := envOf(worker, "ORDER_WORKER_SHUTDOWN_TIMEOUT_MS"); e != nil {
		n, _ := strconv.ParseInt(e.Value, 10, 64)
		timeout = n
	}
	grace := int64(30)
	if spec.TerminationGracePeriodSeconds != nil {
		grace = *spec.TerminationGracePeriodSeconds
	}
	if grace*1000 <= timeout+2000 {
		fail("StatefulSet %s: terminationGracePeriodSeconds %d does not exceed shutdown.timeout_ms %d ms + 2 s", ss.Name, grace, timeout)
	}
	probe := func(kind string, p *corev1.Probe, path string) {
		if p == nil || p.HTTPGet == nil || (path != "" && p.HTTPGet.Path != path) {
			fail("StatefulSet %s: no %s probe on %s", ss.Name, kind, path)
		}
	}
	probe("liveness", worker.LivenessProbe, "/healthz")
	probe("readiness", worker.ReadinessProbe, "/readyz")
	probe("startup", worker.StartupProbe, "")
	if e := envOf(worker, "ORDER_WORKER_MYSQL_PASSWORD_FILE"); e == nil || e.Value == "" {
		fail("StatefulSet %s: no mysql.password_file", ss.Name)
	}
	pdbOK := false
	for _, p := range r.pdbs {
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
		if err == nil && sel.Matches(labelSet(ss.Spec.Template.Labels)) {
			pdbOK = true
		}
	}
	if !pdbOK {
		fail("no PodDisruptionBudget selects the workers")
	}
	return fmt.Sprintf("replica ids from each pod's name, grace %d s > shutdown.timeout_ms %d ms + 2 s, guarantee %s",
		grace, timeout, guarantee)
}

type labelSet map[string]string

func (l labelSet) Has(k string) bool              { _, ok := l[k]; return ok }
func (l labelSet) Get(k string) string            { return l[k] }
func (l labelSet) Lookup(k string) (string, bool) { v, ok := l[k]; return v, ok }

// The PrometheusRule's groups must be config/prometheus's, rule for rule.
func checkRules(r *rendered, rulesFile string) string {
	if len(r.rules) == 0 {
		return ""
	}
	raw, err := os.ReadFile(rulesFile)
	if err != nil {
		fail("%v", err)
		return ""
	}
	var want monitoringv1.PrometheusRuleSpec
	data, err := yaml.YAMLToJSONStrict(raw)
	if err == nil {
		_, err = kjson.UnmarshalStrict(data, &want)
	}
	if err != nil {
		fail("%s: %v", rulesFile, err)
		return ""
	}
	got := r.rules[0].Spec
	names := func(s monitoringv1.PrometheusRuleSpec) []string {
		var out []string
		for _, g := range s.Groups {
			for _, rule := range g.Rules {
				out = append(out, g.Name+"/"+rule.Record+rule.Alert)
			}
		}
		sort.Strings(out)
		return out
	}
	if !reflect.DeepEqual(got, want) {
		gn, wn := names(got), names(want)
		missing, extra := diff(wn, gn), diff(gn, wn)
		fail("PrometheusRule %s: its rules differ from %s (missing %v, extra %v, or an expression, label or duration changed)",
			r.rules[0].Name, rulesFile, missing, extra)
		return ""
	}
	return fmt.Sprintf("PrometheusRule = %s (%d rules)", rulesFile, len(names(want)))
}

func diff(a, b []string) []string {
	in := map[string]bool{}
	for _, x := range b {
		in[x] = true
	}
	var out []string
	for _, x := range a {
		if !in[x] {
			out = append(out, x)
		}
	}
	return out
}

func checkMonitoring(r *rendered) {
	for _, sm := range r.serviceMonitors {
		sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
		matched := 0
		for _, s := range r.services {
			if err == nil && sel.Matches(labelSet(s.Labels)) {
				matched++
				for _, ep := range sm.Spec.Endpoints {
					found := false
					for _, p := range s.Spec.Ports {
						found = found || p.Name == ep.Port
					}
					if !found {
						fail("ServiceMonitor %s: Service %s has no port %q", sm.Name, s.Name, ep.Port)
					}
				}
			}
		}
		if matched != 1 {
			fail("ServiceMonitor %s selects %d Services, want the metrics Service alone", sm.Name, matched)
		}
	}
	for _, so := range r.scaledObjects {
		spec, _ := so["spec"].(map[string]interface{})
		ref, _ := spec["scaleTargetRef"].(map[string]interface{})
		if len(r.statefulSets) == 1 && (ref["kind"] != "StatefulSet" || ref["name"] != r.statefulSets[0].Name) {
			fail("ScaledObject: scaleTargetRef is not the workers' StatefulSet")
		}
		if _, ok := spec["maxReplicaCount"]; !ok {
			fail("ScaledObject: no maxReplicaCount (the input's partitions)")
		}
	}
}

func main() {
	rulesFile := flag.String("rules", "", "config/prometheus/order-worker.rules.yml")
	kedaCRD := flag.String("keda-crd", "", "KEDA's ScaledObject CRD (keda.sh_scaledobjects.yaml)")
	flag.Parse()
	var kedaSchema map[string]interface{}
	if *kedaCRD != "" {
		s, err := loadCRDSchema(*kedaCRD, "v1alpha1")
		if err != nil {
			fmt.Fprintf(os.Stderr, "chart-check: %v\n", err)
			os.Exit(2)
		}
		kedaSchema = s
	}
	r, err := load(os.Stdin, kedaSchema)
	if err != nil {
		fmt.Fprintf(os.Stderr, "chart-check: %v\n", err)
		os.Exit(1)
	}
	for _, d := range r.deployments {
		checkPod("Deployment "+d.Name, r, &d.Spec.Template.Spec)
	}
	for _, j := range r.jobs {
		checkPod("Job "+j.Name, r, &j.Spec.Template.Spec)
		if !strings.Contains(j.Annotations["helm.sh/hook"], "pre-install") || !strings.Contains(j.Annotations["helm.sh/hook"], "pre-upgrade") {
			fail("Job %s: not a pre-install,pre-upgrade hook", j.Name)
		}
	}
	for _, cm := range r.configMaps {
		for k, v := range cm.Data {
			if secretName(k) && v != "" {
				fail("ConfigMap %s: %s holds a secret (use a file)", cm.Name, k)
			}
		}
	}
	workers := checkWorkers(r)
	rules := checkRules(r, *rulesFile)
	checkMonitoring(r)
	if len(findings) > 0 {
		for _, f := range findings {
			fmt.Printf("chart-check: FAIL %s\n", f)
		}
		os.Exit(1)
	}
	var kinds []string
	total := 0
	for k, n := range r.kinds {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		total += n
	}
	sort.Strings(kinds)
	line := fmt.Sprintf("chart-check: ok: %d objects decoded strictly (%s); %s", total, strings.Join(kinds, ", "), workers)
	if rules != "" {
		line += "; " + rules
	}
	fmt.Println(line)
}
