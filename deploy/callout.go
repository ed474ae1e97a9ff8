package deploy

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// On the NATS cluster only control is a configured user; every other
// login goes to the servers' auth callout, which control serves with an
// account nkey seed: its public key is the callout's issuer in nats.conf.
// checkCallout verifies the two ends are wired: nats.conf has an
// authorization block with auth_callout, whose issuer comes from the nats
// container's environment (a ConfigMap key, the public key) and whose
// auth_users hold control's NATS user; control runs with
// --auth-callout-seed-file in a Secret volume no other workload mounts,
// and with the password of that user. Whether the ConfigMap's key is the seed's public key cannot
// be seen here (neither is in the tree); test/e2e's TestDeployManifests
// fills both from one seed and shows nodes confined.

var (
	authBlockRe = regexp.MustCompile(`(?m)^\s*authorization\s*[:=]?\s*\{`)
	calloutRe   = regexp.MustCompile(`(?m)^\s*auth_callout\s*[:=]?\s*\{`)
	issuerRe    = regexp.MustCompile(`(?m)^\s*issuer\s*[:=]\s*(\S+)\s*$`)
	authUsersRe = regexp.MustCompile(`(?m)^\s*auth_users\s*[:=]\s*\[([^\]]*)\]`)
	envRefRe    = regexp.MustCompile(`^\$([A-Za-z_][A-Za-z0-9_]*)$`)
)

func checkCallout(m *Manifests) error {
	cm := m.Find("ConfigMap", "nats-config")
	nats, err := m.Workload("nats")
	if cm == nil || err != nil {
		return nil //nolint:nilerr // checkReplicas reports these
	}
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(cm.Where()+": "+format, a...)) }
	conf := cm.Value.(*corev1.ConfigMap).Data["nats.conf"]
	a := authBlockRe.FindStringIndex(conf)
	if a == nil {
		bad("nats.conf has no authorization block: nothing confines a node to its own subjects")
		return errors.Join(errs...)
	}
	block := conf[a[1]:]
	c := calloutRe.FindStringIndex(block)
	if c == nil {
		bad("nats.conf's authorization has no auth_callout: nothing confines a node to its own subjects")
		return errors.Join(errs...)
	}
	callout := block[c[1]:]
	if end := strings.Index(callout, "}"); end >= 0 {
		callout = callout[:end]
	}
	if iss := issuerRe.FindStringSubmatch(callout); iss == nil {
		bad("auth_callout has no issuer")
	} else if err := checkIssuer(nats, iss[1]); err != nil {
		bad("auth_callout issuer %s: %w", iss[1], err)
	}
	var authUsers []string
	if u := authUsersRe.FindStringSubmatch(callout); u != nil {
		authUsers = strings.FieldsFunc(u[1], func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '"' })
	}

	control, err := m.Workload("control")
	if err != nil {
		return errors.Join(errs...) // checkReplicas reports it
	}
	ctr, err := control.Container("control")
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	user := FlagValue(ctr.Args, "--nats-user")
	switch {
	case user == "":
		errs = append(errs, fmt.Errorf("%s: control has no --nats-user, which auth_callout's auth_users must name", control.Where()))
	case !slices.Contains(authUsers, user):
		bad("auth_callout auth_users %v lack control's NATS user %s: its own login would go to the callout it serves", authUsers, user)
	}
	if FlagValue(ctr.Args, "--nats-password-file") == "" {
		errs = append(errs, fmt.Errorf("%s: control has no --nats-password-file for its NATS user", control.Where()))
	}
	seed := FlagValue(ctr.Args, "--auth-callout-seed-file")
	if seed == "" {
		errs = append(errs, fmt.Errorf("%s: control has no --auth-callout-seed-file: nobody answers the NATS servers' auth callout", control.Where()))
	} else if v := secretVolumeOf(control, ctr, seed); v == "" {
		errs = append(errs, fmt.Errorf("%s: --auth-callout-seed-file %s is not in a Secret volume", control.Where(), seed))
	} else {
		errs = append(errs, onlyControlHolds(m, control, v))
	}
	return errors.Join(errs...)
}

// onlyControlHolds: no other workload mounts the seed's Secret, which
// signs any permission for anyone on the NATS cluster.
func onlyControlHolds(m *Manifests, control Workload, secret string) error {
	var errs []error
	for _, w := range m.Workloads() {
		if w.File == control.File && w.Name == control.Name {
			continue
		}
		for _, v := range w.Pod.Spec.Volumes {
			if v.Secret != nil && v.Secret.SecretName == secret {
				errs = append(errs, fmt.Errorf("%s: volume %s is Secret %s, control's auth callout seed: only control may hold it", w.Where(), v.Name, secret))
			}
		}
	}
	return errors.Join(errs...)
}

// checkIssuer: the issuer is $VAR, set in the nats container from a
// ConfigMap key (a public key is not secret, and differs per deployment).
func checkIssuer(nats Workload, issuer string) error {
	ref := envRefRe.FindStringSubmatch(issuer)
	if ref == nil {
		return errors.New("want $VAR, from the nats container's environment (the deployment's own key, not one in the tree)")
	}
	ctr, err := nats.Container("nats")
	if err != nil {
		return err
	}
	i := slices.IndexFunc(ctr.Env, func(e corev1.EnvVar) bool { return e.Name == ref[1] })
	if i < 0 {
		return fmt.Errorf("%s is not in the nats container's environment", ref[1])
	}
	if e := ctr.Env[i]; e.ValueFrom == nil || e.ValueFrom.ConfigMapKeyRef == nil {
		return fmt.Errorf("%s does not come from a ConfigMap key", ref[1])
	}
	return nil
}

// secretVolumeOf returns the name of the Secret whose volume holds file
// in container c, or "".
func secretVolumeOf(w Workload, c *corev1.Container, file string) string {
	for _, vm := range c.VolumeMounts {
		if path.Dir(path.Clean(file)) != path.Clean(vm.MountPath) {
			continue
		}
		for _, v := range w.Pod.Spec.Volumes {
			if v.Name == vm.Name && v.Secret != nil {
				return v.Secret.SecretName
			}
		}
	}
	return ""
}
