// Package deploy holds the Kubernetes manifests (kustomize bases under
// base/, sandbox/pod, sandbox/gvisor and overlays/) and the code that
// reads them back: Load decodes every manifest strictly into the
// k8s.io/api types (an unknown or duplicated field is an error naming its
// file, line and column), and Check verifies what docs/OPERATIONS.md
// promises about them: the PodSecurity profiles, the capabilities, probes,
// limits, replica counts, listen addresses and that every kustomization
// lists exactly the files beside it. test/e2e runs the same containers
// under Docker with settings derived from these manifests.
package deploy

import "embed"

// Files is the manifest tree, rooted at this directory.
//
//go:embed base sandbox overlays
var Files embed.FS
