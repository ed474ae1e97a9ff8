package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/latticelab/lattice/runsc"
)

// termGrace is how long Run lets the agent exit after SIGTERM before it
// kills it.
const termGrace = 5 * time.Second

// AgentEnv is the environment Run gives the agent: the proxies in every
// spelling common tools read, and the sandbox's identity.
func (d *PodDriver) AgentEnv() []string {
	st := d.Status()
	var env []string
	userinfo := url.UserPassword(d.creds.Username, d.creds.Password)
	if st.SOCKS5 != "" {
		u := (&url.URL{Scheme: "socks5h", User: userinfo, Host: st.SOCKS5}).String()
		env = append(env, "ALL_PROXY="+u, "all_proxy="+u)
	}
	if st.HTTPProxy != "" {
		u := (&url.URL{Scheme: "http", User: userinfo, Host: st.HTTPProxy}).String()
		env = append(env, "HTTP_PROXY="+u, "http_proxy="+u, "HTTPS_PROXY="+u, "https_proxy="+u)
	}
	if len(env) > 0 {
		env = append(env, "NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1")
	}
	return append(env, d.identityEnv()...)
}

// identityEnv is the sandbox's identity for the agent's environment.
func (d *PodDriver) identityEnv() []string {
	st := d.Status()
	return []string{
		"LATTICE_SANDBOX=" + st.Name,
		"LATTICE_NODE_ID=" + st.NodeID,
		"LATTICE_ADDRESS=" + st.Address.Addr().String(),
	}
}

// Run implements IsolationDriver. In namespace isolation argv runs in
// namespaces of its own behind a TUN device (see IsolationNamespace), its
// environment the host's plus the sandbox's identity; in proxy isolation
// as a child process whose network access is the sandbox's proxies
// (AgentEnv). When ctx ends the agent gets SIGTERM, then SIGKILL after 5s.
func (d *PodDriver) Run(ctx context.Context, argv []string, stdio Stdio) (int, error) {
	if len(argv) == 0 {
		return -1, errors.New("sandbox: run: no command")
	}
	if d.Node() == nil {
		return -1, errors.New("sandbox: run: not started")
	}
	if d.cfg.Isolation == IsolationNamespace {
		return d.runIsolated(ctx, argv, stdio)
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return -1, fmt.Errorf("sandbox: run: %w", err)
	}
	cmd := exec.CommandContext(ctx, path, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Env = append(os.Environ(), d.AgentEnv()...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdio.Stdin, stdio.Stdout, stdio.Stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = termGrace
	d.log.Info("running agent", "argv", argv)
	err = cmd.Run()
	if code, ok := runsc.ExitStatus(err); ok {
		return code, nil
	}
	return -1, fmt.Errorf("sandbox: run %s: %w", argv[0], err)
}
