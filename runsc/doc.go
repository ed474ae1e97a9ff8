// Package runsc runs an agent as PID 1 in a gVisor container (runsc) for
// the sandbox's gvisor mode. The Manager finds a statically linked runsc,
// writes an OCI bundle and drives the container's lifecycle.
//
// The container shares the network namespace runsc is started in
// (--network=host, and no "network" entry in the spec's namespaces): the
// agent's sockets are the host kernel's, made by gVisor's sentry on its
// behalf, so its traffic follows the pod's routes into wg0. Every system
// call goes through the sentry. The spec grants no capabilities (so no
// CAP_NET_ADMIN), sets no_new_privileges, runs the agent as an
// unprivileged user, and gives it a read-only root: an empty directory
// with the host's /bin, /usr, /lib, /lib64 and /etc bind-mounted read-only
// (so dynamically linked agents run) and the agent binary itself. Nothing
// else of the host is visible: not the WireGuard key, not the state
// directory. With Spec.Hosts, the host's /etc/hosts is covered by one
// written into the bundle (localhost and the given names, e.g. the
// overlay's peers), so the agent's own resolver finds peers by name.
//
// Two facts about runsc shaped this package:
//
//   - runsc must be statically linked (CGO_ENABLED=0): it re-executes
//     itself inside a chroot where a dynamic loader does not exist, and
//     fails with "fork/exec /proc/self/exe: no such file or directory".
//     Find checks the ELF header and says how to rebuild it.
//   - `runsc spec` puts a network namespace in the spec; with it the agent
//     sees only lo and gets "network is unreachable". The spec here has
//     none, so --network=host means the namespace runsc runs in. Enter a
//     pod's namespace with setns (nsenter --net=...), not `ip netns exec`,
//     which remounts /sys and breaks runsc's cgroup setup.
package runsc
