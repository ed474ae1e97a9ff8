package sandboxcmd

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/latticelab/lattice/internal/cli"
	"github.com/latticelab/lattice/internal/edition"
	"github.com/latticelab/lattice/sandbox"
)

// maxExecStdin is what `sandbox exec --stdin` passes on: the control
// socket takes a request of at most 1 MiB, command line included.
const maxExecStdin = 768 << 10

func newSandboxExecCmd() *cobra.Command {
	var stateDir, name string
	var stdin bool
	cmd := &cobra.Command{
		Use:   "exec [flags] -- CMD [ARG...]",
		Short: "Pro: run CMD as the agent of a running sandbox and exit with its code",
		Long: `exec asks a running sandbox, through the control socket in its state directory,
to run CMD as its agent, as 'sandbox run' would (in pod mode with the proxies and
the sandbox's identity in its environment), and waits for it. It prints the last
64 KiB of CMD's output and of its errors, and exits with CMD's exit code.
Interrupting exec stops CMD. One CMD runs in a sandbox at a time; another waits.

CMD reads nothing unless --stdin is given: then exec sends what its own stdin
holds (at most 768 KiB) before CMD starts.`,
		Example: `  lattice sandbox exec --name agent-1 -- curl -s http://web-1:8080/
  echo '{"task": 42}' | lattice sandbox exec --name agent-1 --stdin -- /opt/agent/bin/agent`,
		Args: cobra.MinimumNArgs(1),
	}
	cmd.Flags().StringVar(&stateDir, "state-dir", "", "the sandbox's state dir")
	cmd.Flags().StringVar(&name, "name", "", "the sandbox's name (finds the default state dir)")
	cmd.Flags().BoolVar(&stdin, "stdin", false, "pass this command's stdin (at most 768 KiB) to CMD")
	_ = cmd.RegisterFlagCompletionFunc("name", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return sandboxNames(filepath.Join(cli.DefaultStateDir(), "sandbox")), cobra.ShellCompDirectiveNoFileComp
	})
	_ = cmd.MarkFlagDirname("state-dir")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := edition.Require("sandbox exec"); err != nil {
			return err
		}
		if cmd.ArgsLenAtDash() < 0 {
			return cli.Usagef("put the command after --: lattice sandbox exec [flags] -- CMD")
		}
		dir, err := runningDir(stateDir, name)
		if err != nil {
			return err
		}
		req := sandbox.ExecRequest{Argv: args}
		if stdin {
			data, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), maxExecStdin+1))
			if err != nil {
				return fmt.Errorf("read stdin: %w", err)
			}
			if len(data) > maxExecStdin {
				return errors.New("--stdin: over 768 KiB; exec passes small inputs only (give the agent a file instead)")
			}
			req.Stdin = string(data)
		}
		c := sandbox.NewClient(filepath.Join(dir, sandbox.SocketName))
		defer c.Close()
		res, err := c.Run(cmd.Context(), req)
		if err != nil {
			return err
		}
		return printExec(cmd, res)
	}
	return cmd
}

// printExec writes what the agent printed and passes its exit code on.
func printExec(cmd *cobra.Command, res sandbox.ExecResult) error {
	out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
	if res.StdoutTruncated {
		fmt.Fprintln(errOut, "sandbox exec: output cut to its last 64 KiB")
	}
	fmt.Fprint(out, res.Stdout)
	if res.StderrTruncated {
		fmt.Fprintln(errOut, "sandbox exec: errors cut to their last 64 KiB")
	}
	fmt.Fprint(errOut, res.Stderr)
	if res.Code != 0 {
		return cli.ExitCode{Code: res.Code}
	}
	return nil
}
