package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

// FlagValues makes shell completion (the completion command cobra adds to
// every tree) offer values for cmd's flag. It panics if cmd has no such
// flag: a mistake in the command tree that any test building it finds.
func FlagValues(cmd *cobra.Command, flag string, values ...string) {
	err := cmd.RegisterFlagCompletionFunc(flag, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp))
	if err != nil {
		panic(fmt.Sprintf("cli: completion for %s --%s: %v", cmd.CommandPath(), flag, err))
	}
}
