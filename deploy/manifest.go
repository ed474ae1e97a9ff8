package deploy

import (
	"bytes"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// Kustomization is the part of kustomize's file these manifests use;
// anything else in one is an error, as for the Kubernetes objects.
type Kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace,omitempty"`
	Resources  []string `json:"resources"`
}

// Object is one YAML document of a manifest file.
type Object struct {
	File string // path in the tree, e.g. base/control.yaml
	Line int    // where the document starts, 1-based
	Kind string
	Name string
	// Value is a pointer to the decoded type: *appsv1.Deployment,
	// *corev1.Service, *Kustomization, ...
	Value any
}

// Where names the object for messages: "base/control.yaml:30: Deployment control".
func (o *Object) Where() string { return fmt.Sprintf("%s:%d: %s %s", o.File, o.Line, o.Kind, o.Name) }

// Manifests is every object of the tree.
type Manifests struct {
	Objects []*Object
}

// kinds maps apiVersion/kind to a constructor of its Go type. A kind not
// here is an error: the tree uses these and nothing else.
var kinds = map[string]func() any{
	"v1/Namespace":                  func() any { return &corev1.Namespace{} },
	"v1/Service":                    func() any { return &corev1.Service{} },
	"v1/ConfigMap":                  func() any { return &corev1.ConfigMap{} },
	"apps/v1/Deployment":            func() any { return &appsv1.Deployment{} },
	"apps/v1/StatefulSet":           func() any { return &appsv1.StatefulSet{} },
	"policy/v1/PodDisruptionBudget": func() any { return &policyv1.PodDisruptionBudget{} },
	"kustomize.config.k8s.io/v1beta1/Kustomization": func() any { return &Kustomization{} },
}

// Load reads every .yaml file under fsys (Files, or a mutated copy in
// tests) and decodes each document strictly.
func Load(fsys fs.FS) (*Manifests, error) {
	m := &Manifests{}
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || path.Ext(p) != ".yaml" {
			return err
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return fmt.Errorf("deploy: read %s: %w", p, err)
		}
		objs, err := Decode(p, b)
		if err != nil {
			return err
		}
		m.Objects = append(m.Objects, objs...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// typeMeta is what Decode reads first, to pick the Go type.
type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
}

// Decode splits a file into its documents and decodes each into its
// k8s.io/api type, refusing unknown and duplicated fields. Errors name
// file:line:col.
func Decode(file string, b []byte) ([]*Object, error) {
	var objs []*Object
	for _, doc := range splitDocs(b) {
		if len(bytes.TrimSpace(stripComments(doc.text))) == 0 {
			continue
		}
		var tm typeMeta
		if err := yaml.Unmarshal(doc.text, &tm); err != nil {
			return nil, locate(file, doc, err)
		}
		mk, ok := kinds[tm.APIVersion+"/"+tm.Kind]
		if !ok {
			return nil, fmt.Errorf("%s:%d:1: unknown kind %q (apiVersion %q)", file, doc.line, tm.Kind, tm.APIVersion)
		}
		v := mk()
		if err := yaml.UnmarshalStrict(doc.text, v); err != nil {
			return nil, locate(file, doc, err)
		}
		name := tm.Metadata.Name
		if tm.Kind == "Kustomization" {
			name = path.Dir(file)
		}
		objs = append(objs, &Object{File: file, Line: doc.line, Kind: tm.Kind, Name: name, Value: v})
	}
	return objs, nil
}

type document struct {
	text []byte
	line int // of its first line in the file
}

// splitDocs splits at lines that are exactly "---".
func splitDocs(b []byte) []document {
	var docs []document
	start, line := 0, 1
	cur := document{line: 1}
	for i := 0; i <= len(b); i++ {
		if i < len(b) && b[i] != '\n' {
			continue
		}
		text := strings.TrimRight(string(b[start:i]), "\r")
		if text == "---" {
			docs = append(docs, cur)
			cur = document{line: line + 1}
		} else {
			cur.text = append(cur.text, b[start:min(i+1, len(b))]...)
		}
		start, line = i+1, line+1
	}
	return append(docs, cur)
}

func stripComments(b []byte) []byte {
	var out []byte
	for l := range bytes.Lines(b) {
		if t := bytes.TrimSpace(l); len(t) > 0 && t[0] != '#' {
			out = append(out, l...)
		}
	}
	return out
}

var (
	lineRe  = regexp.MustCompile(`line (\d+)(?::(\d+))?: `)
	fieldRe = regexp.MustCompile(`(?:unknown field "|key "|Go struct field )([^" ]+)`)
	dupRe   = regexp.MustCompile(`^key "((?:[^"\\]|\\.)*)" already set in map`)
)

// locate turns a decoding error into file:line:col. The YAML parser gives
// a line; an unknown or duplicated field (found after the conversion to
// JSON) is looked up as a key in the document's text, a bad resource
// quantity as a value in its tree (quantity.go).
func locate(file string, doc document, err error) error {
	if qerr, ok := quantityError(file, doc, err); ok {
		return qerr
	}
	msg := strings.TrimPrefix(err.Error(), "error converting YAML to JSON: ")
	msg = strings.TrimPrefix(msg, "error unmarshaling JSON: while decoding JSON: ")
	if loc := lineRe.FindStringSubmatchIndex(msg); loc != nil {
		var n, col int
		n, _ = strconv.Atoi(msg[loc[2]:loc[3]]) // digits: lineRe matched them
		col = 1
		if loc[4] >= 0 {
			col, _ = strconv.Atoi(msg[loc[4]:loc[5]])
		}
		// The parser counts lines from the document's start, so its "line
		// N" would contradict the file's; the first problem is enough.
		what, _, _ := strings.Cut(msg[loc[1]:], "\n")
		if m := dupRe.FindStringSubmatch(what); m != nil {
			if lines := strings.Split(string(doc.text), "\n"); n >= 1 && n <= len(lines) {
				// The last on the line: in flow style the first may be too.
				if c, ok := lastKey(lines[n-1], m[1]); ok {
					col = c
				}
			}
			return fmt.Errorf("%s:%d:%d: yaml: duplicate key %q; remove one of them", file, doc.line+n-1, col, m[1])
		}
		return fmt.Errorf("%s:%d:%d: yaml: %s", file, doc.line+n-1, col, what)
	}
	if m := fieldRe.FindStringSubmatch(msg); m != nil {
		key := m[1]
		if i := strings.LastIndex(key, "."); i >= 0 {
			key = key[i+1:]
		}
		if n, col, ok := findKey(doc.text, key); ok {
			return fmt.Errorf("%s:%d:%d: %s", file, doc.line+n-1, col, msg)
		}
	}
	return fmt.Errorf("%s:%d:1: %s", file, doc.line, msg)
}

// lastKey returns the column of the last "key:" on line.
func lastKey(line, key string) (int, bool) {
	locs := keyRe(key).FindAllStringIndex(line, -1)
	if len(locs) == 0 {
		return 0, false
	}
	return keyCol(line, locs[len(locs)-1][0]), true
}

// keyRe matches "key:" in block or flow style, with the character before it.
func keyRe(key string) *regexp.Regexp {
	return regexp.MustCompile(`(^|[\s{,-])` + regexp.QuoteMeta(key) + `\s*:`)
}

// keyCol is the 1-based column of the key keyRe matched at start.
func keyCol(line string, start int) int {
	if start < len(line) && strings.ContainsRune(" \t{,-", rune(line[start])) {
		return start + 2
	}
	return start + 1
}

// findKey returns the line and column of the first "key:" in text (block
// or flow style).
func findKey(text []byte, key string) (line, col int, ok bool) {
	re := keyRe(key)
	for i, l := range strings.Split(string(text), "\n") {
		if loc := re.FindStringIndex(l); loc != nil {
			return i + 1, keyCol(l, loc[0]), true
		}
	}
	return 0, 0, false
}

// Find returns the object of kind and name, or nil.
func (m *Manifests) Find(kind, name string) *Object {
	for _, o := range m.Objects {
		if o.Kind == kind && o.Name == name {
			return o
		}
	}
	return nil
}

// Workload is a Deployment or StatefulSet: its pod template and replicas.
type Workload struct {
	*Object
	Replicas int32
	Pod      *corev1.PodTemplateSpec
}

// Workloads returns every Deployment and StatefulSet, in file order.
func (m *Manifests) Workloads() []Workload {
	var ws []Workload
	for _, o := range m.Objects {
		switch v := o.Value.(type) {
		case *appsv1.Deployment:
			ws = append(ws, Workload{o, replicas(v.Spec.Replicas), &v.Spec.Template})
		case *appsv1.StatefulSet:
			ws = append(ws, Workload{o, replicas(v.Spec.Replicas), &v.Spec.Template})
		}
	}
	return ws
}

// Workload returns the Deployment or StatefulSet named name.
func (m *Manifests) Workload(name string) (Workload, error) {
	for _, w := range m.Workloads() {
		if w.Name == name {
			return w, nil
		}
	}
	return Workload{}, fmt.Errorf("deploy: no workload %q", name)
}

// Container returns the workload's container named name.
func (w Workload) Container(name string) (*corev1.Container, error) {
	i := slices.IndexFunc(w.Pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == name })
	if i < 0 {
		return nil, fmt.Errorf("deploy: %s has no container %q", w.Where(), name)
	}
	return &w.Pod.Spec.Containers[i], nil
}

// replicas is Kubernetes' default of 1 for an unset count.
func replicas(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}
